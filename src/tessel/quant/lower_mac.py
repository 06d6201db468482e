"""Lowering rules of the matrix-engine ops: conv2d, linear, matmul -> qconv2d, qlinear, qmatmul.

Each rule is called on a `quantize` node and returns the name of the integer value replacing
it, or None when the float op in front of it does not match (it then stays float: a host op).
"""

from __future__ import annotations

import numpy as np

from tessel.ir.attrs import ConstData
from tessel.ir.graph import Node
from tessel.ir.ops import Op
from tessel.ir.types import DType, TensorType
from tessel.passes.rewriting import Rewriter
from tessel.quant.lower_common import (
    IntVal,
    QOut,
    channel_scales,
    deq,
    emit,
    fused_act,
    int_weight,
    multiplier,
    multiplier_vectors,
)

_CONV_KEYS = ("stride", "padding", "dilation", "groups", "layout")


def _bias(rw: Rewriter, name: str | None, acc_scales: np.ndarray) -> np.ndarray | None:
    """int32 bias at scale s_in * s_w[c]: pt2e's int32 bias (rescaled if its scale differs),
    a float constant quantised, zeros if absent; None if the bias is a runtime value."""
    if name is None:
        return np.zeros(acc_scales.size, np.int32)
    w = int_weight(rw, name)
    if w is not None:
        _, arr, quant = w
        real = (arr.astype(np.float64) - np.asarray(quant.zero_point)) * channel_scales(
            quant, acc_scales.size)
        if w[2].zero_point == (0,) * len(w[2].zero_point) and np.allclose(
                channel_scales(quant, acc_scales.size), acc_scales, rtol=1e-6, atol=0):
            return arr.astype(np.int32)
    else:
        real = rw.const(name)
        if real is None:
            return None
        real = np.asarray(real, np.float64)
    return np.clip(np.rint(real / acc_scales), -(2**31), 2**31 - 1).astype(np.int32)


def _mac_operands(rw: Rewriter, node: Node, x: IntVal | None = None,
                 w: tuple[str, np.ndarray, object] | None = None
                 ) -> tuple[IntVal, str, np.ndarray, np.ndarray] | None:
    """(int8 input, int8 weight constant, per-channel weight scales, int32 bias) or None;
    `x` / `w` replace the node's own first two operands when a rule has looked through them."""
    x = x if x is not None else deq(rw, node.inputs[0])
    w = w if w is not None else int_weight(rw, node.inputs[1])
    if x is None or w is None or x.dtype is not DType.I8:
        return None
    wname, warr, wquant = w
    if warr.dtype != np.int8 or any(wquant.zero_point):
        return None
    out_channels = warr.shape[0]
    w_scales = channel_scales(wquant, out_channels)
    bias = _bias(rw, node.inputs[2] if len(node.inputs) > 2 else None, x.scale * w_scales)
    if bias is None:
        return None
    return x, wname, w_scales, bias


def _requant_params(rw: Rewriter, hint: str, x: IntVal, w_scales: np.ndarray, bias: np.ndarray,
                    out: QOut) -> list[str]:
    """Constant operands bias, multiplier, shift of a per-channel requantisation."""
    q31, shift = multiplier_vectors(x.scale * w_scales / out.scale)
    return [rw.constant(bias, hint=f"{hint}_bias"), rw.constant(q31, hint=f"{hint}_mult"),
            rw.constant(shift, hint=f"{hint}_shift")]


# q(act(conv2d(dq(x), W, B)))  =>  qconv2d(x, W_i8, B_i32, mult, shift) {act clamp folded}
def lower_conv2d(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    conv = rw.producer_op(inner, Op.CONV2D)
    if conv is None:
        return None
    found = _mac_operands(rw, conv)
    if found is None:
        return None
    return _qconv(rw, q, conv, found, lo, hi)


def _qconv(rw: Rewriter, q: Node, conv: Node, found, lo, hi) -> str:
    """The qconv2d of `conv` (its MAC operands found) quantised like `q`, act clamp folded."""
    x, wname, w_scales, bias = found
    out = QOut.of(q)
    hint = f"{conv.name}_q"
    attrs = {k: conv.attr(k) for k in _CONV_KEYS}
    attrs.update(in_zp=x.zp, **out.out_attrs(lo, hi))
    params = _requant_params(rw, hint, x, w_scales, bias, out)
    return emit(rw, Op.QCONV2D, [x.name, wname, *params], attrs, out.quant, hint=hint,
                loc=conv.loc)


def _reshaped_input(rw: Rewriter, name: str) -> IntVal | None:
    """reshape(dq(x)) => the integer x reshaped (the frontend's conv1d -> [N, C, 1, L])."""
    node = rw.producer_op(name, Op.RESHAPE)
    x = deq(rw, node.inputs[0]) if node is not None else None
    if x is None:
        return None
    y = emit(rw, Op.RESHAPE, [x.name], node.attr_map, x.quant, hint=f"{node.name}_q",
             loc=node.loc)
    return IntVal(y, x.scale, x.zp, x.dtype)


def _reshaped_weight(rw: Rewriter, name: str) -> tuple[str, np.ndarray, object] | None:
    """reshape(W) of a per-channel integer weight => the integer constant reshaped (axis 0 kept)."""
    node = rw.producer_op(name, Op.RESHAPE)
    w = int_weight(rw, node.inputs[0]) if node is not None else None
    if w is None or w[1].shape[:1] != tuple(node.attr("shape"))[:1]:
        return None
    arr = w[1].reshape(node.attr("shape"))
    type_ = TensorType(arr.shape, rw.type_of(w[0]).dtype, quant=rw.type_of(w[0]).quant)
    cname = rw.add(Op.CONSTANT, (), {"value": ConstData(arr)}, hint=f"{w[0]}_4d", type_=type_)
    return cname, arr, w[2]


# q(act(reshape(conv2d(reshape(dq(x)), reshape(W), B))))   (conv1d as the frontend writes it)
#   =>  reshape(qconv2d(reshape(x), W_i8[O, I, 1, K], B_i32, mult, shift))
def lower_conv1d(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    tail = rw.producer_op(inner, Op.RESHAPE)
    conv = rw.producer_op(tail.inputs[0], Op.CONV2D) if tail is not None else None
    if conv is None or rw.type_of(conv.name).shape[2] != 1:
        return None
    if rw.producer_op(conv.inputs[0], Op.RESHAPE) is None or deq(
            rw, rw.producer(conv.inputs[0]).inputs[0]) is None:
        return None
    w = int_weight(rw, conv.inputs[1]) or _reshaped_weight(rw, conv.inputs[1])
    if w is None:
        return None
    found = _mac_operands(rw, conv, _reshaped_input(rw, conv.inputs[0]), w)
    if found is None:
        return None
    y = _qconv(rw, q, conv, found, lo, hi)
    return emit(rw, Op.RESHAPE, [y], tail.attr_map, QOut.of(q).quant, hint=f"{tail.name}_q",
                loc=tail.loc)


# q(act(linear(dq(x), W, B)))  =>  qlinear(x, W_i8, B_i32, mult, shift) {act clamp folded}
def lower_linear(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    lin = rw.producer_op(inner, Op.LINEAR)
    if lin is None:
        return None
    found = _mac_operands(rw, lin)
    if found is None:
        return None
    x, wname, w_scales, bias = found
    out = QOut.of(q)
    hint = f"{lin.name}_q"
    params = _requant_params(rw, hint, x, w_scales, bias, out)
    attrs = {"in_zp": x.zp, **out.out_attrs(lo, hi)}
    return emit(rw, Op.QLINEAR, [x.name, wname, *params], attrs, out.quant, hint=hint,
                loc=lin.loc)


# q(act(matmul(dq(a), dq(b))))  =>  qmatmul(a, b) {a_zp, b_zp, multiplier = s_a s_b / s_out}
def lower_matmul(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    mm = rw.producer_op(inner, Op.MATMUL)
    if mm is None:
        return None
    a, b = deq(rw, mm.inputs[0]), deq(rw, mm.inputs[1])
    if a is None or b is None or a.dtype is not DType.I8 or b.dtype is not DType.I8:
        return None  # the matrix engine is int8 x int8
    out = QOut.of(q)
    q31, shift = multiplier(a.scale * b.scale / out.scale)
    attrs = {"a_zp": a.zp, "b_zp": b.zp, "multiplier": q31, "shift": shift,
             **out.out_attrs(lo, hi)}
    return emit(rw, Op.QMATMUL, [a.name, b.name], attrs, out.quant, hint=f"{mm.name}_q",
                loc=mm.loc)
