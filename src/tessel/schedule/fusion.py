"""Which chains of consecutive layers run as one fused step (cascading, tessel.ops.fused_emit):
the chains that may start at a node (`fusible_chain`: conv -> depthwise [-> 1x1 project
[-> residual qadd]], depthwise -> project [-> qadd], conv -> max pool, conv -> k x k conv; all
batch 1, int8, each intermediate read only by the next member), and the one whose step saves
the most estimated cycles over its members run alone (`best_chain`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tessel.ir import DType, Graph, Node, Op
from tessel.ops import conv_geometry, pool_emit
from tessel.ops.fused_geometry import FusedChain


def _is_conv(graph: Graph, n: Node) -> bool:
    """An ordinary conv of one CONV instruction per tile (kernel and strides <= 15)."""
    if n.op is not Op.QCONV2D or n.attr_map["groups"] != 1 or n.type.shape[0] != 1:
        return False
    _, kh, kw, _ = graph.type_of(n.inputs[1]).shape
    return (n.type.dtype is DType.I8 and graph.type_of(n.inputs[0]).dtype is DType.I8
            and max(kh, kw, *n.attr_map["stride"]) <= conv_geometry.MAX_KERNEL
            and conv_geometry.refusal(n, graph) is None)


def _is_dw(graph: Graph, n: Node) -> bool:
    if n.op is not Op.QCONV2D or n.type.shape[0] != 1 or n.type.dtype is not DType.I8:
        return False
    c = graph.type_of(n.inputs[0]).shape[3]
    return (n.attr_map["groups"] == c == n.type.shape[3] > 1
            and graph.type_of(n.inputs[1]).shape[3] == 1
            and graph.type_of(n.inputs[0]).dtype is DType.I8
            and conv_geometry.refusal(n, graph) is None)


def _is_project(graph: Graph, n: Node) -> bool:
    a = n.attr_map
    return (_is_conv(graph, n) and graph.type_of(n.inputs[1]).shape[1:3] == (1, 1)
            and a["stride"] == (1, 1) and not any(a["padding"]))


def _only_reader(graph: Graph, producer: Node, reader: Node, operand: int | None = 0) -> bool:
    """`reader` reads `producer`'s result (as input `operand`, any if None) and nothing else
    does (not a graph output either)."""
    ins = reader.inputs if operand is None else reader.inputs[operand:operand + 1]
    return producer.name in ins and graph.num_uses(producer.name) == 1 and (
        reader.inputs.count(producer.name) == 1)


def _is_pool(graph: Graph, n: Node) -> bool:
    """An int8 max pool of one POOL instruction per tile."""
    return (n.op is Op.MAX_POOL2D and n.type.shape[0] == 1 and n.type.dtype is DType.I8
            and graph.type_of(n.inputs[0]).dtype is DType.I8
            and pool_emit.pool_refusal(n, graph) is None)


def _is_halo_conv(graph: Graph, n: Node) -> bool:
    """An ordinary conv reading rows around each output row (kernel height > 1)."""
    return _is_conv(graph, n) and graph.type_of(n.inputs[1]).shape[1] > 1


def _is_residual_add(graph: Graph, project: Node, n: Node) -> bool:
    if n.op is not Op.QADD or n.type.dtype is not DType.I8 or len(n.inputs) != 2:
        return False
    if not _only_reader(graph, project, n, None):
        return False
    other = next(i for i in n.inputs if i != project.name)
    t = graph.type_of(other)
    return (graph.constant_value(other) is None and t.shape == project.type.shape == n.type.shape
            and t.dtype is DType.I8)


def fusible_chain(graph: Graph, nodes: Sequence[Node], k: int) -> list[FusedChain]:
    """The chains that may start at `nodes[k]` (members consecutive in `nodes`), longest
    first; empty when none."""
    at = lambda i: nodes[i] if i < len(nodes) else None  # noqa: E731
    out: list[FusedChain] = []
    first = at(k)
    if first is None:
        return out
    if _is_conv(graph, first):
        dw = at(k + 1)
        if dw is not None and _is_pool(graph, dw) and _only_reader(graph, first, dw):
            return [FusedChain(first, dw)]  # conv -> max pool
        if dw is not None and _is_halo_conv(graph, dw) and _only_reader(graph, first, dw):
            return [FusedChain(first, dw)]  # conv -> k x k conv
        if dw is None or not _is_dw(graph, dw) or not _only_reader(graph, first, dw):
            return out
        conv, nxt = first, k + 2
    elif _is_dw(graph, first):
        dw, conv, nxt = first, None, k + 1
    else:
        return out
    if conv is not None:
        out.append(FusedChain(conv, dw))
    pj = at(nxt)
    if pj is not None and _is_project(graph, pj) and _only_reader(graph, dw, pj):
        out.append(FusedChain(conv, dw, pj))
        add = at(nxt + 1)
        if add is not None and _is_residual_add(graph, pj, add):
            out.append(FusedChain(conv, dw, pj, add))
    return out[::-1]


def best_chain(graph: Graph, nodes: Sequence[Node], k: int,
               alone_cycles: Callable[[Node], int],
               choose: Callable[[FusedChain], tuple[Any, Any] | None]
               ) -> tuple[FusedChain, Any, Any] | None:
    """The chain starting at `nodes[k]` whose step saves the most estimated cycles over its
    members run alone (`alone_cycles`), with its mapping and estimate (`choose`: the search's
    best mapping of a chain, None if none fits); None when no chain is faster."""
    best, saving = None, 0
    for chain in fusible_chain(graph, nodes, k):
        fused = choose(chain)
        if fused is None:
            continue
        gain = sum(alone_cycles(n) for n in chain.nodes) - fused[1].cycles
        if gain > saving:
            best, saving = (chain, *fused), gain
    return best
