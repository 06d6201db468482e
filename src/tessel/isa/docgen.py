"""Generates the tables of docs/isa.md from the ISA table, so the document cannot drift.

The document holds marked blocks (``<!-- BEGIN GENERATED opcodes -->`` ... ``<!-- END
GENERATED opcodes -->``, one ``fields NAME`` block per opcode, the static rules of each
instruction (``rules``) and the cost tables (``costs``, ``gemm``, ``vector``), all from the
instructions' definitions); ``update(text)`` rewrites their contents. ``python -m
tessel.isa.docgen docs/isa.md`` updates the file in place; tests/unit/isa/test_isa_docs.py
fails when the file is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tessel.isa.cost_rules import CostRule, Gemm, Vector
from tessel.isa.fields import Engine
from tessel.isa.table import SPECS, InstrSpec, Opcode

_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED (?P<name>[\w ]+) -->\n)(?P<body>.*?)(<!-- END GENERATED (?P=name) -->)",
    re.S,
)


def opcode_table() -> str:
    rows = ["| opcode | name | engine | bytes | what it does |", "|---|---|---|---|---|"]
    for op, sp in SPECS.items():
        engine = sp.engine.name if sp.engine is not None else "any"
        if sp.also is not None:
            engine += f" or {sp.also.name}"
        rows.append(f"| 0x{int(op):02x} | {op.name} | {engine} | {sp.size} | {sp.summary} |")
    return "\n".join(rows) + "\n"


def field_table(spec: InstrSpec) -> str:
    head = (f"`{spec.opcode.name}` = 0x{int(spec.opcode):02x}, {spec.size} bytes "
            f"({spec.bits} bits used).\n\n")
    if not spec.fields:
        return head + "No fields.\n"
    rows = ["| bits | field | type | legal values | default | meaning |",
            "|---|---|---|---|---|---|"]
    for f, at in zip(spec.fields, spec.offsets(), strict=True):
        if f.enum is not None:
            legal = ", ".join(f"{m.name}={m.value}" for m in f.enum)
            default = "" if f.default is None else f.enum(f.default).name
        else:
            legal = f"{f.min} .. {f.max}"
            default = "" if f.default is None else str(f.default)
        rows.append(f"| {at}-{at + f.bits - 1} | `{f.name}` | {f.type_name()} | {legal} "
                    f"| {default} | {f.doc} |")
    return head + "\n".join(rows) + "\n"


def _code(text: str) -> str:
    return f"`{text}`"


def rules_table() -> str:
    """Per instruction: its rules 3 and 4, and what rule 5 bounds (docs/isa.md section 3)."""
    rows = ["| instruction | rules 3 and 4 | rule 5: SRAM patterns (elements) "
            "| rule 5: window frame x channels |", "|---|---|---|---|"]
    for op, sp in SPECS.items():
        patterns = "; ".join(f"`{what}`: {_code(p.doc())}" for what, p in sp.sram_elements)
        frame = ""
        if sp.frame is not None:
            frame = f"frame x {_code(sp.frame.channels)}"
            if sp.frame.im2col is not None:
                frame += f"; im2col {_code(sp.frame.im2col.doc())}"
        if sp.rules or patterns or frame:
            rows.append(f"| {op.name} | {'; '.join(r.doc() for r in sp.rules)} | {patterns} "
                        f"| {frame} |")
    return "\n".join(rows) + "\n"


def _rules() -> list[tuple[str, CostRule]]:
    """(instruction, as the cost tables name it, its cost rule) for every engine it runs on."""
    out = []
    for op, sp in SPECS.items():
        if sp.also is None:
            out.append((op.name, sp.cost))
        else:
            out.append((f"{op.name} in {sp.engine.name}", sp.cost))
            out.append((f"{op.name} in {sp.also.name}", sp.also_cost))
    return out  # type: ignore[return-value]


def cost_table() -> str:
    """The cost rules: which instructions each applies to, its cycles and events."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, rule in _rules():
        groups.setdefault((rule.cycles_doc(), rule.events_doc()), []).append(name)
    rows = ["| instructions | cycles | events |", "|---|---|---|"]
    rows += [f"| {', '.join(names)} | {cycles} | {events} |"
             for (cycles, events), names in groups.items()]
    return "\n".join(rows) + "\n"


def gemm_table() -> str:
    """The GEMM of each matrix-engine instruction, and its input window."""
    rows = ["| instruction | `M` | `N` | `K` | `window` | `im2col` |", "|---|---|---|---|---|---|"]
    for name, rule in _rules():
        if isinstance(rule, Gemm):
            window = "`M*K`" if rule.window is None else _code(rule.window.doc())
            im2col = "`M*K*N`" if rule.depthwise else "`M*K`"
            rows.append(f"| {name} | {_code(rule.m.doc())} | {_code(rule.n.doc())} "
                        f"| {_code(rule.k.doc())} | {window} | {im2col} |")
    return "\n".join(rows) + "\n"


def vector_table() -> str:
    """The work and events of each vector-engine instruction."""
    rows = ["| instruction | work (lane-cycles) | other events |", "|---|---|---|"]
    for name, rule in _rules():
        if isinstance(rule, Vector):
            rows.append(f"| {name.replace(f' in {Engine.VECTOR.name}', '')} "
                        f"| {_code(rule.work.doc())} | {rule.events_text} |")
    return "\n".join(rows) + "\n"


_TABLES = {"opcodes": opcode_table, "rules": rules_table, "costs": cost_table,
           "gemm": gemm_table, "vector": vector_table}


def render(name: str) -> str:
    """Contents of the generated block called ``name``."""
    if name in _TABLES:
        return _TABLES[name]()
    kind, _, op = name.partition(" ")
    if kind == "fields" and op in Opcode.__members__:
        return field_table(SPECS[Opcode[op]])
    raise KeyError(f"no generated block called {name!r}")


def update(text: str) -> str:
    """``text`` with every generated block re-rendered."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def block_names(text: str) -> list[str]:
    return [m.group("name") for m in _BLOCK.finditer(text)]


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "docs/isa.md")
    old = path.read_text(encoding="utf-8")
    new = update(old)
    if new != old:
        path.write_text(new, encoding="utf-8")
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
