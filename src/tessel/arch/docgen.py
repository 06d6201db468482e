"""Generates the preset-key table of docs/architecture.md from the parameter declarations
(``tessel.arch.params.PARAMS``), so the document cannot drift.

The document holds a marked block (``<!-- BEGIN GENERATED params -->`` ... ``<!-- END
GENERATED params -->``); ``update(text, render)`` rewrites the contents of every block with
``render(name)`` (tessel.analysis.docgen renders the blocks of docs/analysis.md the same way).
``python -m tessel.arch.docgen docs/architecture.md`` updates the file in place;
tests/unit/arch/test_arch_docs.py fails when the file is out of date.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Callable
from pathlib import Path

from tessel.arch.checks import MAX_OFFCHIP_MEMORIES, MAX_OPERATING_POINTS, type_name
from tessel.arch.decl import Param
from tessel.arch.params import FIELDS, OFFCHIP, SCHEMA
from tessel.arch.types import DECLARABLE, POINTS

_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED (?P<name>[\w ]+) -->\n)(?P<body>.*?)(<!-- END GENERATED (?P=name) -->)",
    re.S,
)


def rule(p: Param) -> str:
    """The rule column: the enum's members, or the declared checks."""
    if isinstance(p.type, type) and issubclass(p.type, enum.Enum):
        return ", ".join(f"`{m.name}`" for m in p.type)
    if p.type is bool:
        return "`true` / `false`"
    return "; ".join(c.rule() for c in p.checks)


def default(p: Param) -> str:
    if p.required:
        return ""
    if isinstance(p.default, bool):
        return "`true`" if p.default else "`false`"
    return f"`{p.default}`"


def param_table() -> str:
    """The preset keys: one row per declared parameter, plus ``schema``, the lists of tables
    (``[[offchip]]``, ``[[operating_point]]``) and ``[derived]``."""
    rows = ["| key | type | unit | default | rule | affects | meaning |",
            "|---|---|---|---|---|---|---|",
            f"| `schema` | int | | `1` | 1 .. {SCHEMA} | | preset file layout the file is "
            "written for; a newer one than this tessel reads is an error |"]
    lists = {OFFCHIP: f"| `[[offchip]]` (1 .. {MAX_OFFCHIP_MEMORIES} tables) | | | | | | "
             "off-chip memories; DMA names them by position (index 0, 1, ...) |",
             POINTS: f"| `[[operating_point]]` (0 .. {MAX_OPERATING_POINTS} tables) | | | | "
             "| | (clock, voltage) pairs the NPU runs at, slowest first; one at `clock_hz` "
             "and `voltage_v` (none: that point alone) (schema 3) |"}
    for p in FIELDS:
        if p.entries in lists:
            rows.append(lists.pop(p.entries))
        since = f" (schema {p.since})" if p.since > 1 else ""
        rows.append(f"| `{p.key}` | {type_name(p.type)} | {p.unit} | {default(p)} | {rule(p)} "
                    f"| {p.affects.value} | {p.doc}{since} |")
    rows.append(f"| `[derived]` (optional) | numbers | | | {', '.join(f'`{k}`' for k in DECLARABLE)}"
                " | | declared figures; each must equal the computed one (relative tolerance "
                "1e-3) |")
    return "\n".join(rows) + "\n"


def render(name: str) -> str:
    """Contents of the generated block called ``name``."""
    if name == "params":
        return param_table()
    raise KeyError(f"no generated block called {name!r}")


def update(text: str, render: Callable[[str], str] = render) -> str:
    """``text`` with every generated block re-rendered by ``render``."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def block_names(text: str) -> list[str]:
    return [m.group("name") for m in _BLOCK.finditer(text)]


def main(argv: list[str], render: Callable[[str], str] = render,
         default_path: str = "docs/architecture.md") -> int:
    path = Path(argv[0] if argv else default_path)
    old = path.read_text(encoding="utf-8")
    new = update(old, render)
    if new != old:
        path.write_text(new, encoding="utf-8")
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
