"""Dead-code elimination: drop every node whose value no output depends on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tessel.ir.graph import Graph
from tessel.ir.rewriting import live_names
from tessel.passes.base import Pass


@dataclass(frozen=True)
class DeadCodeElimination(Pass):
    """Every op is pure (host ops included), so a node is kept only if an output needs it."""

    name: ClassVar[str] = "dce"

    def apply(self, graph: Graph) -> Graph:
        live = live_names(graph)
        # node unused by any output  =>  removed
        kept = [n for n in graph.nodes if n.name in live]
        return graph if len(kept) == len(graph.nodes) else graph.with_nodes(kept)
