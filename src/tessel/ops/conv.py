"""2-D convolution (ordinary, grouped, depthwise; conv1d as the frontend writes it: reshapes
around a conv2d of height 1), batch norm (folded into the conv before it by a float pass), and
the integer `qconv2d` they lower to: CONV (DWCONV when groups == channels) into the int32
accumulator, then REQUANT per output channel (docs/numerics.md), run by
tessel.ops.conv_emit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Graph, Node
from tessel.ir.kernels import from_nhwc, pad_hw, to_nhwc, windows
from tessel.ir.ops import CONV_ATTRS, Op, OpSpec, nchw_like, require, spatial, window_out
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import Layout, TensorType
from tessel.ops import conv_emit, intops
from tessel.ops.base import LayoutRule, Npu, OpDef, Trait, lazy_functional, register
from tessel.ops.quantise import (
    OUT_ATTRS,
    OUT_FIELDS,
    IntVal,
    QOut,
    deq,
    emit,
    fused_act,
    int_result,
    int_weight,
    mac_operands,
    requant_params,
    require_int,
    require_per_channel,
)

_CONV_KEYS = ("stride", "padding", "dilation", "groups", "layout")


# ---------------------------------------------------------------- shape rules


def conv2d_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, w = ts[0], ts[1]
    layout = attrs["layout"]
    n, c, h, wd = spatial(x, layout)
    require(w.rank == 4, f"weight must be 4-D, got rank {w.rank}")
    if layout is Layout.NHWC:
        o, kh, kw, ci = w.shape
    else:
        o, ci, kh, kw = w.shape
    g = attrs["groups"]
    require(g >= 1 and c % g == 0 and o % g == 0, f"groups={g} must divide in {c} and out {o}")
    require(ci * g == c, f"weight expects {ci * g} input channels, input has {c}")
    if len(ts) > 2:
        require(ts[2].shape == (o,), f"bias shape {list(ts[2].shape)} != [{o}]")
    sh, sw = attrs["stride"]
    pt, pl, pb, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    oh = window_out(h, kh, sh, pt, pb, dh)
    ow = window_out(wd, kw, sw, pl, pr, dw)
    return TensorType(nchw_like(layout, n, o, oh, ow), x.dtype, layout)


def _qconv2d_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 2)
    out = conv2d_type(ts[:2], attrs)
    require_per_channel(ts, 2, ts[1].shape[0])
    return int_result(out, attrs)


def _batch_norm_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    axis = 3 if attrs["layout"] is Layout.NHWC else 1
    require(x.rank >= 2, "batch_norm input must have rank >= 2")
    c = x.shape[axis if x.rank == 4 else 1]
    for t in ts[1:]:
        require(t.shape == (c,), f"per-channel parameter shape {list(t.shape)} != [{c}]")
    return TensorType(x.shape, x.dtype, x.layout)


# ---------------------------------------------------------------- kernels


def _conv2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    w = xs[1] if layout is Layout.NHWC else xs[1].transpose(0, 2, 3, 1)  # -> OHWI
    o, kh, kw, ci = w.shape
    g = a["groups"]
    n, h, wd, c = x.shape
    oh = window_out(h, kh, a["stride"][0], a["padding"][0], a["padding"][2], a["dilation"][0])
    ow = window_out(wd, kw, a["stride"][1], a["padding"][1], a["padding"][3], a["dilation"][1])
    win = windows(pad_hw(x, a["padding"], 0.0), (kh, kw), a["stride"], a["dilation"], (oh, ow))
    if g == 1:
        out = np.tensordot(win, w.transpose(3, 1, 2, 0), axes=([3, 4, 5], [0, 1, 2]))
    elif g == c and ci == 1 and o == c:
        out = np.einsum("nhwckl,ckl->nhwc", win, w[..., 0], optimize=True)
    else:
        og = o // g
        parts = [np.tensordot(win[:, :, :, gi * ci:(gi + 1) * ci],
                              w[gi * og:(gi + 1) * og].transpose(3, 1, 2, 0),
                              axes=([3, 4, 5], [0, 1, 2])) for gi in range(g)]
        out = np.concatenate(parts, axis=3)
    if len(xs) > 2:
        out = out + xs[2]
    return from_nhwc(out.astype(xs[0].dtype), layout)


def _batch_norm(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x, mean, var = xs[:3]
    axis = 3 if a["layout"] is Layout.NHWC else 1
    shape = [1] * x.ndim
    shape[axis] = -1
    scale = 1.0 / np.sqrt(var.astype(np.float64) + a["eps"])
    if len(xs) > 3:
        scale = scale * xs[3]
    shift = -mean * scale + (xs[4] if len(xs) > 4 else 0.0)
    return (x * scale.reshape(shape) + shift.reshape(shape)).astype(x.dtype)


def _pad_hw_torch(x: Any, p: tuple[int, ...], value: float = 0.0) -> tuple[Any, tuple[int, int]]:
    """(x, torch padding): symmetric padding stays an argument, asymmetric is applied here."""
    top, left, bottom, right = p
    if top == bottom and left == right:
        return x, (top, left)
    return lazy_functional().pad(x, (left, right, top, bottom), value=value), (0, 0)


def _conv2d_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    x, padding = _pad_hw_torch(xs[0], a["padding"])
    bias = xs[2] if len(xs) > 2 else None
    return lazy_functional().conv2d(x, xs[1], bias, list(a["stride"]), list(padding),
                                    list(a["dilation"]), a["groups"])


def _batch_norm_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    return lazy_functional().batch_norm(xs[0], xs[1], xs[2], *(xs[3:5] + [None, None])[:2],
                                        False, 0.0, a["eps"])


def window_fields(a: Mapping[str, Any], h: int, w: int, kh: int, kw: int) -> dict[str, Any]:
    """Window fields of CONV / DWCONV / POOL from the op's attributes (NHWC input h x w)."""
    pt, pl, pb, pr = a["padding"]
    dil = tuple(a.get("dilation") or (1, 1))
    ceil = a.get("ceil_mode", False)
    oh = window_out(h, kh, a["stride"][0], pt, pb, dil[0], ceil)
    ow = window_out(w, kw, a["stride"][1], pl, pr, dil[1], ceil)
    return {"stride": tuple(a["stride"]), "dilation": dil, "pad": (pt, pl), "out_hw": (oh, ow)}


def _qconv2d_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """CONV (DWCONV when groups == channels, one CONV per group otherwise) + REQUANT src=ACC."""
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    w = xs[1] if layout is Layout.NHWC else xs[1].transpose(0, 2, 3, 1)  # OHWI
    o, kh, kw, ci = w.shape
    g, c = a["groups"], x.shape[3]
    geo = window_fields(a, x.shape[1], x.shape[2], kh, kw)
    hwio = w.transpose(1, 2, 3, 0)
    if g == 1:
        acc = intops.conv_acc(x, hwio, a["in_zp"], **geo)
    elif g == c and o == c and ci == 1:
        acc = intops.dwconv_acc(x, hwio[:, :, 0, :], a["in_zp"], **geo)
    else:
        og = o // g
        acc = np.concatenate([intops.conv_acc(x[..., k * ci:(k + 1) * ci],
                                              hwio[..., k * og:(k + 1) * og], a["in_zp"], **geo)
                              for k in range(g)], axis=3)
    y = intops.requant(acc, xs[2], xs[3], xs[4], a["out_zp"], a["act_min"], a["act_max"],
                       a["dtype"].numpy)
    return from_nhwc(y, layout)


def conv_macs(graph: Graph, node: Node) -> int:
    """Output elements x kernel taps x input channels per group."""
    w = graph.type_of(node.inputs[1]).shape
    kh, kw, cin_g = (w[1], w[2], w[3]) if node.attr("layout") is Layout.NHWC else (
        w[2], w[3], w[1])
    return math.prod(node.type.shape) * kh * kw * cin_g


# ---------------------------------------------------------------- QDQ -> integer


# q(act(conv2d(dq(x), W, B)))  =>  qconv2d(x, W_i8, B_i32, mult, shift) {act clamp folded}
def lower_conv2d(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    conv = rw.producer_op(inner, Op.CONV2D)
    if conv is None:
        return None
    found = mac_operands(rw, conv)
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
    params = requant_params(rw, hint, x, w_scales, bias, out)
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
    cname = rw.constant(arr, hint=f"{w[0]}_4d", type_=type_)
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
    found = mac_operands(rw, conv, _reshaped_input(rw, conv.inputs[0]), w)
    if found is None:
        return None
    y = _qconv(rw, q, conv, found, lo, hi)
    return emit(rw, Op.RESHAPE, [y], tail.attr_map, QOut.of(q).quant, hint=f"{tail.name}_q",
                loc=tail.loc)


# ---------------------------------------------------------------- the definitions

_I, _F = AttrKind.INT, AttrKind.FLOAT
_CONV_OPERANDS = ("input", "weight", "bias")

register(
    OpDef(Op.CONV2D, OpSpec(_CONV_OPERANDS, conv2d_type, CONV_ATTRS, optional=1),
          kernel=_conv2d, torch=_conv2d_torch, layout=LayoutRule.WINDOW_WEIGHTS,
          lower=(lower_conv2d, lower_conv1d), macs=conv_macs),
    OpDef(Op.QCONV2D, OpSpec((*_CONV_OPERANDS, "multiplier", "shift"), _qconv2d_type,
                             {**CONV_ATTRS, "in_zp": AttrSpec(_I), **OUT_ATTRS}),
          golden=_qconv2d_golden, layout=LayoutRule.WINDOW_WEIGHTS,
          npu=Npu(conv_emit, conv_emit.refusal, quant_free=frozenset({"in_zp"}) | OUT_FIELDS),
          macs=conv_macs, traits=frozenset({Trait.INTEGER})),
    OpDef(Op.BATCH_NORM, OpSpec(("input", "mean", "var", "weight", "bias"), _batch_norm_type,
                                {"eps": AttrSpec(_F, 1e-5),
                                 "layout": AttrSpec(AttrKind.LAYOUT, Layout.NCHW)}, optional=2),
          kernel=_batch_norm, torch=_batch_norm_torch, layout=LayoutRule.WINDOW),
)
