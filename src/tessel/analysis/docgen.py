"""Generates the tables of docs/analysis.md from the parameter declarations (tessel.arch.decl):
`tessel advise`'s knobs and the parameters `tessel explore` may vary.

Blocks ``<!-- BEGIN GENERATED advise knobs -->`` and ``explore params``, rewritten like
docs/architecture.md's (tessel.arch.docgen). ``python -m tessel.analysis.docgen
docs/analysis.md`` updates the file in place; tests/unit/arch/test_arch_docs.py fails when it
is out of date.
"""

from __future__ import annotations

import sys

from tessel.analysis.advise import Knob
from tessel.analysis.explore_space import EXPLORABLE, arch_name
from tessel.arch import docgen, load_preset
from tessel.arch.decl import Memories

EXAMPLE = "tnpu-s"  # the preset whose values the explore table names as examples


def knob_table() -> str:
    """One row per advise knob, in the order advice tries them."""
    rows = ["| change | limit it relaxes | in the area model | parameter |", "|---|---|---|---|"]
    for k in Knob:
        p, how = k.param, k.knob.relax.value
        if not p.per_memory:
            change = f"`{p.key} {how}`"
        elif k.knob.memories is Memories.EACH_BUS:
            change = (f"`offchip.<memory>.{p.field} {how}`, once per off-chip memory holding "
                      "weights or activations (once when they share one)")
        else:
            change = f"`offchip.*.{p.field} {how}`: every off-chip memory at once"
        area = "yes" if p.area_term else "no (n/m)"
        rows.append(f"| {change} | {k.limit.value} | {area} | {p.doc} |")
    return "\n".join(rows) + "\n"


def explore_table() -> str:
    """One row per explorable parameter: its values (the declared rules), its part of a design
    point's name (for the example preset's value) and what it is."""
    base = load_preset(EXAMPLE)
    rows = [f"| parameter | values | in a point's name ({EXAMPLE}'s value) | meaning |",
            "|---|---|---|---|"]
    for key, p in EXPLORABLE.items():
        value = base.param(key)
        value = value.name if hasattr(value, "name") else value
        name = arch_name(base, {key: value})[len(base.name) + 1:]
        rows.append(f"| `{key}` | {docgen.rule(p)} | `{name}` | {p.doc} |")
    return "\n".join(rows) + "\n"


def render(name: str) -> str:
    """Contents of the generated block called ``name``."""
    if name == "advise knobs":
        return knob_table()
    if name == "explore params":
        return explore_table()
    raise KeyError(f"no generated block called {name!r}")


def update(text: str) -> str:
    return docgen.update(text, render)


if __name__ == "__main__":
    sys.exit(docgen.main(sys.argv[1:], render, "docs/analysis.md"))
