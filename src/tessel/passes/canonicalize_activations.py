"""Activation canonicalisation and no-op removal.

Activations get one spelling each: clamp(0, inf) is relu, relu6 stays clamp(0, 6), nested
clamps/relus merge, maximum/minimum with a scalar are clamps, x*sigmoid(x) is silu and the
hardsigmoid/hardswish spellings become those ops. Ops that do nothing (reshape/expand/slice/pad
to the same shape, identity transpose, cast to the same dtype) are removed, and
reshape(reshape(x)) / transpose(transpose(x)) collapse into one op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op
from tessel.ir.rewriting import Rewriter, binary_operands, is_f32, rewrite, scalar_of
from tessel.passes.base import Pass

_SAME_SHAPE_NOOPS = (Op.RESHAPE, Op.EXPAND, Op.SLICE, Op.PAD)


def remove_noop(rw: Rewriter, node: Node) -> str | None:
    # reshape/expand/slice/pad(x) to shape(x), transpose(x, identity), cast(x, dtype(x))  =>  x
    if node.op not in (*_SAME_SHAPE_NOOPS, Op.TRANSPOSE, Op.CAST):
        return None
    x = node.inputs[0]
    xt = rw.type_of(x)
    if (xt.shape, xt.dtype, xt.quant) != (node.type.shape, node.type.dtype, node.type.quant):
        return None
    if node.op is Op.TRANSPOSE and tuple(node.attr("perm")) != tuple(range(xt.rank)):
        return None
    return x


def collapse_reshape(rw: Rewriter, node: Node) -> str | None:
    # reshape(reshape(x, s1), s2)  =>  reshape(x, s2)
    inner = rw.producer_op(node.inputs[0], Op.RESHAPE) if node.op is Op.RESHAPE else None
    if inner is None:
        return None
    return rw.add(Op.RESHAPE, inner.inputs, node.attr_map, name=node.name, loc=node.loc)


def collapse_transpose(rw: Rewriter, node: Node) -> str | None:
    # transpose(transpose(x, p), q)  =>  transpose(x, [p[i] for i in q])
    inner = rw.producer_op(node.inputs[0], Op.TRANSPOSE) if node.op is Op.TRANSPOSE else None
    if inner is None:
        return None
    p, q = inner.attr("perm"), node.attr("perm")
    return rw.add(Op.TRANSPOSE, inner.inputs, {"perm": tuple(p[i] for i in q)}, name=node.name,
                  loc=node.loc)


def _bounds(node: Node | None) -> tuple[float, float] | None:
    if node is None:
        return None
    if node.op is Op.RELU:
        return 0.0, math.inf
    if node.op is Op.CLAMP:
        return node.attr("min"), node.attr("max")
    return None


def _emit_clamp(rw: Rewriter, node: Node, x: str, lo: float, hi: float) -> str:
    if lo == 0.0 and hi == math.inf:
        return rw.add(Op.RELU, (x,), name=node.name, loc=node.loc)
    return rw.add(Op.CLAMP, (x,), {"min": lo, "max": hi}, name=node.name, loc=node.loc)


def merge_clamps(rw: Rewriter, node: Node) -> str | None:
    # clamp(clamp(x, a, b), c, d)  =>  clamp(x, max(a, c), min(b, d))  (relu is clamp(0, inf))
    outer = _bounds(node)
    inner_node = rw.producer(node.inputs[0]) if outer is not None else None
    inner = _bounds(inner_node)
    if outer is None or inner is None or not is_f32(node.type):
        return None
    lo, hi = max(outer[0], inner[0]), min(outer[1], inner[1])
    if lo > hi:  # disjoint ranges: the result is a constant; leave it alone
        return None
    return _emit_clamp(rw, node, inner_node.inputs[0], lo, hi)


def clamp_to_relu(rw: Rewriter, node: Node) -> str | None:
    # clamp(x, min=0, max=inf)  =>  relu(x)
    if node.op is not Op.CLAMP or (node.attr("min"), node.attr("max")) != (0.0, math.inf):
        return None
    return rw.add(Op.RELU, node.inputs, name=node.name, loc=node.loc)


def minmax_to_clamp(rw: Rewriter, node: Node) -> str | None:
    # maximum(x, c)  =>  clamp(x, min=c);  minimum(x, c)  =>  clamp(x, max=c)
    if node.op not in (Op.MAXIMUM, Op.MINIMUM) or not is_f32(node.type):
        return None
    for x, c in binary_operands(node):
        value = scalar_of(rw, c)
        if value is not None and rw.type_of(x).shape == node.type.shape and not math.isnan(value):
            lo, hi = (value, math.inf) if node.op is Op.MAXIMUM else (-math.inf, value)
            return _emit_clamp(rw, node, x, lo, hi)
    return None


def _same_shape(rw: Rewriter, node: Node, x: str) -> bool:
    return rw.type_of(x).shape == node.type.shape and is_f32(node.type)


def _plus3_of(rw: Rewriter, name: str) -> str | None:
    """x if `name` is add(x, 3)."""
    node = rw.producer_op(name, Op.ADD)
    if node is None:
        return None
    for x, c in binary_operands(node):
        if scalar_of(rw, c) == 3.0 and _same_shape(rw, node, x):
            return x
    return None


def _relu6_plus3_of(rw: Rewriter, name: str) -> str | None:
    """x if `name` is clamp(x + 3, 0, 6)."""
    node = rw.producer_op(name, Op.CLAMP)
    if node is None or (node.attr("min"), node.attr("max")) != (0.0, 6.0):
        return None
    return _plus3_of(rw, node.inputs[0])


def _divided_by_6(rw: Rewriter, node: Node) -> str | None:
    """y if `node` is y / 6 or y * (1/6)."""
    if node.op is Op.DIV and scalar_of(rw, node.inputs[1]) == 6.0:
        return node.inputs[0] if _same_shape(rw, node, node.inputs[0]) else None
    if node.op is Op.MUL:
        for y, c in binary_operands(node):
            v = scalar_of(rw, c)
            if v is not None and abs(v - 1 / 6) < 1e-7 and _same_shape(rw, node, y):
                return y
    return None


def spelled_hardsigmoid(rw: Rewriter, node: Node) -> str | None:
    # clamp(x + 3, 0, 6) / 6  =>  hardsigmoid(x)
    y = _divided_by_6(rw, node)
    x = _relu6_plus3_of(rw, y) if y is not None else None
    if x is None:
        return None
    return rw.add(Op.HARDSIGMOID, (x,), name=node.name, loc=node.loc)


def spelled_hardswish(rw: Rewriter, node: Node) -> str | None:
    # x * clamp(x + 3, 0, 6) / 6  =>  hardswish(x)
    y = _divided_by_6(rw, node)
    prod = rw.producer_op(y, Op.MUL) if y is not None else None
    if prod is None:
        return None
    for x, r in binary_operands(prod):
        if _relu6_plus3_of(rw, r) == x and _same_shape(rw, prod, x):
            return rw.add(Op.HARDSWISH, (x,), name=node.name, loc=node.loc)
    return None


def gated_activation(rw: Rewriter, node: Node) -> str | None:
    # x * sigmoid(x)  =>  silu(x);  x * hardsigmoid(x)  =>  hardswish(x)
    if node.op is not Op.MUL or not is_f32(node.type):
        return None
    for x, g in binary_operands(node):
        gate = rw.producer_op(g, Op.SIGMOID, Op.HARDSIGMOID)
        if gate is not None and gate.inputs[0] == x and _same_shape(rw, node, x):
            op = Op.SILU if gate.op is Op.SIGMOID else Op.HARDSWISH
            return rw.add(op, (x,), name=node.name, loc=node.loc)
    return None


RULES = (remove_noop, collapse_reshape, collapse_transpose, merge_clamps, clamp_to_relu,
         minmax_to_clamp, spelled_hardswish, spelled_hardsigmoid, gated_activation)


@dataclass(frozen=True)
class CanonicalizeActivations(Pass):
    """Rules run to a fixed point; each leaves the function computed unchanged."""

    name: ClassVar[str] = "canonicalize_activations"

    def apply(self, graph: Graph) -> Graph:
        return rewrite(graph, RULES)
