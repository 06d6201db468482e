"""The `lower_qdq` pass: an imported QDQ graph (float ops between quantize / dequantize) ->
integer Graph IR.

At every `quantize` node the pass tries the lowering rules (`OpDef.lower`) of the float op in
front of it, after those of the ops it looks through (`OpDef.look_through`: a relu or clamp
that a conv, linear, matmul, add or mul absorbs as its output clamp; a reshape around a conv1d).
A rule looks back from the `quantize` through the float op(s) to the `dequantize` nodes that
feed them; one that matches emits the integer op(s) and the `quantize` is replaced by their
result; the float ops and dequantizes it read become dead and are dropped. A float op no rule
matches stays a float op between its dequantize(s) and quantize: a HOST op (the NPU has no
float datapath), listed by :func:`host_ops`, never dropped. Graph inputs keep their boundary
`quantize`, outputs their `dequantize`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op
from tessel.ir.rewriting import Rewriter, rewrite
from tessel.ops import Trait, definition
from tessel.ops.base import LowerRule
from tessel.passes.base import Pass


def _rules(rw: Rewriter, q: Node) -> list[LowerRule]:
    """The rules to try at quantize node `q`: those of the ops its input reads through (a
    look-through op, then the op in front of it, ...), innermost first."""
    chain: list[Node] = []
    node = rw.producer(q.inputs[0])
    while node is not None and len(chain) < 4:
        chain.append(node)
        if not definition(node.op).look_through or not node.inputs:
            break
        node = rw.producer(node.inputs[0])
    return [rule for n in reversed(chain) for rule in definition(n.op).lower]


def _on_quantize(rw: Rewriter, node: Node) -> str | None:
    """Dispatch: the first rule that lowers the float op(s) in front of this quantize."""
    if node.op is not Op.QUANTIZE:
        return None
    for rule in _rules(rw, node):
        result = rule(rw, node)
        if result is not None:
            return result
    return None


@dataclass(frozen=True)
class LowerQDQ(Pass):
    """QDQ graph -> integer ops between boundary quantize / dequantize; the rest stays host."""

    name: ClassVar[str] = "lower_qdq"

    def apply(self, graph: Graph) -> Graph:
        return rewrite(graph, [_on_quantize], once=True)


def lower_qdq(qdq: Graph) -> Graph:
    """The quantise stage's lowering: QDQ graph -> integer ops (LowerQDQ), ops of constants
    folded (host ops too: index and mask arithmetic of constants never runs), element-wise
    chains fused into LUTs (exact), dead code removed; verified after each pass."""
    from tessel.passes.fold_constants import FoldConstants
    from tessel.passes.manager import run_pipeline
    from tessel.quant.fuse_pointwise import FusePointwiseLut

    return run_pipeline(qdq, [LowerQDQ(), "dce", FoldConstants(host=True), "dce",
                              FusePointwiseLut(), "dce"], verify_each=True, dump=lambda _: None)


def is_host_node(node: Node) -> bool:
    """True for a node the NPU cannot run: a `host` op or any float compute op (constants and
    the quantize / dequantize boundaries are not counted; they run on the host by definition)."""
    if node.is_host:
        return True
    d = definition(node.op)
    if d.has(Trait.INTEGER) or d.has(Trait.BOUNDARY) or node.is_constant:
        return False
    return not node.type.dtype.is_int


def host_ops(graph: Graph) -> list[Node]:
    """The host nodes of a lowered graph, in order (float compute that the NPU cannot run).

    Nodes computed from constants only (the dequantisation of a host op's int8 weight) are
    not listed: they fold at compile time.
    """
    return [n for n in graph.nodes if is_host_node(n) and not _constant_only(graph, n)]


def _constant_only(graph: Graph, node: Node) -> bool:
    """True if every operand chain of `node` ends in constants (foldable at compile time)."""
    seen: set[str] = set()
    stack = list(node.inputs)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        producer = graph.producer(name)
        if producer is None:
            return False
        if not producer.is_constant:
            stack.extend(producer.inputs)
    return True
