"""The `Pass` base class: a frozen dataclass with a `name` whose `apply` returns a new graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tessel.ir.graph import Graph


@dataclass(frozen=True)
class Pass:
    """A graph-to-graph rewrite. `apply` never mutates its argument and returns a valid graph."""

    name: ClassVar[str] = ""

    def apply(self, graph: Graph) -> Graph:
        raise NotImplementedError(f"pass {type(self).__name__} does not implement apply")
