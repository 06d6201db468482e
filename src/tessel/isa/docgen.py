"""Generates the tables of docs/isa.md from the ISA table, so the document cannot drift.

The document holds marked blocks (``<!-- BEGIN GENERATED opcodes -->`` ... ``<!-- END
GENERATED opcodes -->`` and one ``fields NAME`` block per opcode); ``update(text)`` rewrites
their contents. ``python -m tessel.isa.docgen docs/isa.md`` updates the file in place;
tests/unit/isa/test_isa_docs.py fails when the file is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

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


def render(name: str) -> str:
    """Contents of the generated block called ``name``."""
    if name == "opcodes":
        return opcode_table()
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
