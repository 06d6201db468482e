"""Lowering rules of pooling, mean and data movement on integer tensors.

max_pool2d, reshape, transpose, slice, pad, expand, upsample_nearest and concat run unchanged
on integer tensors whose types carry the QuantParams; avg_pool2d becomes qavg_pool2d and mean
becomes qmean. A REQUANTIZE is appended (or, for concat, put in front of each input) where
the `quantize` after the op asks for other parameters than the op produces.
"""

from __future__ import annotations

import math

import numpy as np

from tessel.ir.graph import Node
from tessel.ir.ops import Op
from tessel.ir.types import Layout
from tessel.passes.rewriting import Rewriter
from tessel.quant.lower_common import IntVal, QOut, deq, emit, multiplier, requantize

_MOVEMENT = (Op.MAX_POOL2D, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.PAD, Op.EXPAND,
             Op.UPSAMPLE_NEAREST)
_POOL_KEYS = ("kernel", "stride", "padding", "ceil_mode", "layout")


def _movement_chain(rw: Rewriter, name: str) -> tuple[IntVal, list[Node]] | None:
    """(x, [op1, ..., opk]) when `name` = opk(...op1(dq(x))) with data-movement ops only."""
    chain: list[Node] = []
    node = rw.producer_op(name, *_MOVEMENT)
    while node is not None and len(chain) < 16:
        chain.append(node)
        x = deq(rw, node.inputs[0])
        if x is not None:
            return x, chain[::-1]
        node = rw.producer_op(node.inputs[0], *_MOVEMENT)
    return None


# q(max_pool2d | reshape | transpose | slice | pad | expand | upsample(...(dq(x))))
#   =>  the same ops on the integer x (pad value -> the zero point) [-> requantize]
def lower_movement(rw: Rewriter, q: Node) -> str | None:
    found = _movement_chain(rw, q.inputs[0])
    if found is None:
        return None
    x, chain = found
    for node in chain:
        attrs = dict(node.attr_map)
        if node.op is Op.PAD:  # the padding value in the integer domain (0.0 -> zero point)
            lo, hi = x.dtype.bounds
            attrs["value"] = float(np.clip(x.zp + np.rint(node.attr("value") / x.scale), lo, hi))
        y = emit(rw, node.op, [x.name], attrs, x.quant, hint=f"{node.name}_q", loc=node.loc)
        x = IntVal(y, x.scale, x.zp, x.dtype)
    return requantize(rw, x, QOut.of(q), hint=f"{chain[-1].name}_rq", loc=chain[-1].loc)


# q(concat(dq(x1), dq(x2), ...))  =>  concat(requantize?(x1), ...) with the output's parameters
def lower_concat(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.CONCAT)
    if node is None:
        return None
    parts = [deq(rw, i) for i in node.inputs]
    if any(p is None for p in parts):
        return None
    out = QOut.of(q)
    names = [requantize(rw, p, out, hint=f"{node.name}_in{k}", loc=node.loc)
             for k, p in enumerate(parts)]
    return emit(rw, Op.CONCAT, names, node.attr_map, out.quant, hint=f"{node.name}_q",
                loc=node.loc)


def _avg_pool_integer(node: Node) -> bool:
    """True if the pool divides by the valid window size (what ISA POOL AVG computes)."""
    no_pad = not any(node.attr("padding"))
    return no_pad or not node.attr("count_include_pad")


# q(avg_pool2d(dq(x)))  =>  qavg_pool2d(x) [-> requantize]  (count_include_pad with padding: host)
# an unpadded window over the whole map  =>  qmean(x) (exact sum, one rounding to the output)
def lower_avg_pool(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.AVG_POOL2D)
    if node is None or not _avg_pool_integer(node):
        return None
    x = deq(rw, node.inputs[0])
    if x is None:
        return None
    if _global_window(rw, node, x):
        return _mean(rw, node, x, (2, 3), True, QOut.of(q))
    lo, hi = x.dtype.bounds
    attrs = {k: node.attr(k) for k in _POOL_KEYS}
    attrs.update(act_min=lo, act_max=hi)
    y = emit(rw, Op.QAVG_POOL2D, [x.name], attrs, x.quant, hint=f"{node.name}_q", loc=node.loc)
    return requantize(rw, IntVal(y, x.scale, x.zp, x.dtype), QOut.of(q),
                      hint=f"{node.name}_rq", loc=node.loc)


def _global_window(rw: Rewriter, node: Node, x: IntVal) -> bool:
    """An NCHW avg pool whose unpadded window is the whole H x W map (one output pixel)."""
    shape = rw.type_of(x.name).shape
    return (len(shape) == 4 and node.attr("layout") is Layout.NCHW
            and tuple(node.attr("kernel")) == shape[2:] and not any(node.attr("padding")))


# q(mean(dq(x), axes))  =>  qmean(x) {multiplier = s_x / (n * s_out)}
def lower_mean(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.MEAN)
    if node is None:
        return None
    x = deq(rw, node.inputs[0])
    if x is None:
        return None
    return _mean(rw, node, x, node.attr("axes"), node.attr("keepdim"), QOut.of(q))


def _mean(rw: Rewriter, node: Node, x: IntVal, axes, keepdim: bool, out: QOut) -> str:
    shape = rw.type_of(x.name).shape
    n = math.prod(shape[a % len(shape)] for a in axes)
    q31, shift = multiplier(x.scale / (n * out.scale))
    attrs = {"axes": tuple(axes), "keepdim": keepdim, "in_zp": x.zp,
             "multiplier": q31, "shift": shift, **out.out_attrs()}
    return emit(rw, Op.QMEAN, [x.name], attrs, out.quant, hint=f"{node.name}_q", loc=node.loc)
