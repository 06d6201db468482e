"""Common-subexpression elimination: identical nodes (same op, same operands after renaming,
same attributes, same type; constants compared by content) become one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tessel.ir.graph import Graph, Node, rename_uses
from tessel.ir.rewriting import drop_newly_dead
from tessel.passes.base import Pass


def _key(node: Node) -> tuple[Any, ...]:
    # ConstData hashes and compares by content, so equal constants share a key
    return (node.op, node.inputs, node.attrs, node.type)


@dataclass(frozen=True)
class CommonSubexpressionElimination(Pass):
    """One forward walk; host ops are never merged (they may wrap arbitrary torch code)."""

    name: ClassVar[str] = "cse"

    def apply(self, graph: Graph) -> Graph:
        seen: dict[tuple[Any, ...], str] = {}
        renames: dict[str, str] = {}
        nodes = []
        for old in graph.nodes:
            node = rename_uses(old, renames)
            key = _key(node) if not node.is_host else None
            # op(a, b) {attrs} defined twice  =>  second use reads the first
            if key is not None and key in seen:
                renames[node.name] = seen[key]
                continue
            if key is not None:
                seen[key] = node.name
            nodes.append(node)
        if not renames:
            return graph
        outputs = tuple(renames.get(o, o) for o in graph.outputs)
        return drop_newly_dead(graph, graph.with_nodes(nodes, outputs))
