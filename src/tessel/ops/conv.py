"""2-D convolution (ordinary, grouped, depthwise; conv1d as the frontend writes it: reshapes
around a conv2d of height 1), transposed convolution (the gradient of a conv2d: upsampling
decoders), batch norm (folded into the conv before it by a float pass), and the integer
`qconv2d` they lower to: CONV (DWCONV when groups == channels) into the int32
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
from tessel.ir.types import DType, Layout, QuantParams, TensorType
from tessel.isa.fixedpoint import Rounding
from tessel.ops import conv_emit, conv_geometry, intops
from tessel.ops.base import LayoutRule, Npu, OpDef, Trait, lazy_functional, register
from tessel.ops.quantise import (
    OUT_ATTRS,
    OUT_FIELDS,
    ROUNDING_ATTR,
    IntVal,
    QOut,
    channel_scales,
    deq,
    emit,
    fused_act,
    int_result,
    int_weight,
    mac_bias,
    mac_bias_dtype,
    mac_operands,
    requant_params,
    require_int,
    require_per_channel,
    rounding_of,
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


def _conv_transpose2d_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, w = ts[0], ts[1]
    require(attrs["layout"] is Layout.NCHW, "conv_transpose2d is NCHW (weights IOHW)")
    n, c, h, wd = spatial(x, Layout.NCHW)
    require(w.rank == 4, f"weight must be 4-D [in, out / groups, kh, kw], got rank {w.rank}")
    ci, og, kh, kw = w.shape
    g = attrs["groups"]
    require(g >= 1 and ci == c and c % g == 0, f"weight has {ci} input channels, input {c} "
            f"(groups={g})")
    if len(ts) > 2:
        require(ts[2].shape == (og * g,), f"bias shape {list(ts[2].shape)} != [{og * g}]")
    (sh, sw), (ph, pw) = attrs["stride"], attrs["padding"]
    (dh, dw), (oph, opw) = attrs["dilation"], attrs["output_padding"]
    require(min(sh, sw, dh, dw) >= 1 and min(ph, pw, oph, opw) >= 0,
            "strides and dilations must be >= 1, paddings >= 0")
    require(oph < max(sh, dh) and opw < max(sw, dw),
            "output_padding must be smaller than the stride or the dilation")
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    require(oh >= 1 and ow >= 1, f"padding {[ph, pw]} leaves no output")
    return TensorType((n, og * g, oh, ow), x.dtype, Layout.NCHW)


def _upsample_bilinear_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require(attrs["layout"] is Layout.NCHW, "upsample_bilinear is NCHW")
    n, c, h, w = spatial(ts[0], Layout.NCHW)
    fh, fw = attrs["scale"]
    require(fh >= 1 and fw >= 1, f"scale factors must be >= 1, got {[fh, fw]}")
    return TensorType((n, c, h * fh, w * fw), ts[0].dtype, Layout.NCHW)


def _qconv2d_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 2)
    out = conv2d_type(ts[:2], attrs)
    require_per_channel(ts, 2, ts[1].shape[0], mac_bias_dtype(ts[0]))
    rounding = attrs.get("rounding")
    require(rounding is None or rounding in set(Rounding),
            f"rounding {rounding} is not one of {[int(r) for r in Rounding]}")
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


def _conv_transpose2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """Every input pixel times the kernel, added into the output at stride steps (the
    gradient of conv2d), then the padding cropped."""
    x, w = xs[0], xs[1]
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    g = a["groups"]
    cg = c // g
    (sh, sw), (ph, pw) = a["stride"], a["padding"]
    (dh, dw), (oph, opw) = a["dilation"], a["output_padding"]
    full = np.zeros((n, og * g, (h - 1) * sh + dh * (kh - 1) + 1 + oph,
                     (wd - 1) * sw + dw * (kw - 1) + 1 + opw), np.float64)
    for gi in range(g):
        xs_g = x[:, gi * cg:(gi + 1) * cg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                part = np.einsum("nchw,co->nohw", xs_g, w[gi * cg:(gi + 1) * cg, :, i, j])
                full[:, gi * og:(gi + 1) * og, i * dh:i * dh + (h - 1) * sh + 1:sh,
                     j * dw:j * dw + (wd - 1) * sw + 1:sw] += part
    oh = full.shape[2] - 2 * ph
    ow = full.shape[3] - 2 * pw
    out = full[:, :, ph:ph + oh, pw:pw + ow]
    if len(xs) > 2:
        out = out + xs[2].reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


def _conv_transpose2d_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    bias = xs[2] if len(xs) > 2 else None
    return lazy_functional().conv_transpose2d(xs[0], xs[1], bias, list(a["stride"]),
                                              list(a["padding"]), list(a["output_padding"]),
                                              a["groups"], list(a["dilation"]))


def _linear_taps(n_in: int, n_out: int, align_corners: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PyTorch's linear interpolation along one axis: for each output index the two input
    indices it reads and the second one's weight."""
    o = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        src = np.maximum((o + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, src - i0


def _upsample_bilinear(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0].astype(np.float64)
    _, _, h, w = x.shape
    fh, fw = a["scale"]
    r0, r1, wr = _linear_taps(h, h * fh, a["align_corners"])
    c0, c1, wc = _linear_taps(w, w * fw, a["align_corners"])
    rows = x[:, :, r0] * (1 - wr)[:, None] + x[:, :, r1] * wr[:, None]
    return (rows[..., c0] * (1 - wc) + rows[..., c1] * wc).astype(xs[0].dtype)


def _upsample_bilinear_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    return lazy_functional().interpolate(xs[0], scale_factor=tuple(float(s) for s in a["scale"]),
                                         mode="bilinear", align_corners=a["align_corners"])


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
    """CONV (DWCONV when groups == channels, one CONV per group otherwise) + REQUANT src=ACC;
    an int16 input accumulates wide, with an int64 bias (docs/numerics.md)."""
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
                       a["dtype"].numpy, rounding_of(a), wide=intops.is_wide(x))
    return from_nhwc(y, layout)


def conv_macs(graph: Graph, node: Node) -> int:
    """Output elements x kernel taps x input channels per group."""
    w = graph.type_of(node.inputs[1]).shape
    kh, kw, cin_g = (w[1], w[2], w[3]) if node.attr("layout") is Layout.NHWC else (
        w[2], w[3], w[1])
    return math.prod(node.type.shape) * kh * kw * cin_g


def conv_transpose_macs(graph: Graph, node: Node) -> int:
    """Input elements x kernel taps x output channels per group (every input pixel meets the
    whole kernel)."""
    _, og, kh, kw = graph.type_of(node.inputs[1]).shape
    return math.prod(graph.type_of(node.inputs[0]).shape) * og * kh * kw


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


# q(act(conv_transpose2d(dq(x), W, B)))  (groups 1, dilation 1)
#   =>  one qconv2d of every output phase (stride sh x sw phases, each a conv of the input with
#       a flipped sub-kernel, as output channels) -> depth-to-space -> crop the padding
def lower_conv_transpose2d(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    node = rw.producer_op(inner, Op.CONV_TRANSPOSE2D)
    if node is None or node.attr("groups") != 1 or tuple(node.attr("dilation")) != (1, 1):
        return None
    x = deq(rw, node.inputs[0])
    w = int_weight(rw, node.inputs[1])
    if x is None or w is None or x.dtype is not DType.I8 or w[1].dtype != np.int8:
        return None
    wtype, warr, wquant = rw.type_of(w[0]).dtype, w[1], w[2]
    cout = warr.shape[1]
    if any(wquant.zero_point) or (wquant.per_channel and wquant.axis != 1):
        return None
    w_scales = channel_scales(wquant, cout)
    bias = mac_bias(rw, node.inputs[2] if len(node.inputs) > 2 else None, x.scale * w_scales)
    if bias is None:
        return None
    (sh, sw), phases = node.attr("stride"), node.attr("stride")[0] * node.attr("stride")[1]
    weights = phase_weights(warr, sh, sw)
    scales = np.tile(w_scales, phases)
    quant = QuantParams(tuple(float(s) for s in scales), (0,) * scales.size, 0)
    wname = rw.constant(weights, hint=f"{node.name}_phases",
                        type_=TensorType(weights.shape, wtype, quant=quant))
    n, _, h, wd = rw.type_of(x.name).shape
    _, _, oh, ow = node.type.shape
    (ph, pw), (kkh, kkw) = node.attr("padding"), weights.shape[2:]
    qh, qw = -(-(ph + oh) // sh), -(-(pw + ow) // sw)  # phase rows / columns needed
    out = QOut.of(q)
    hint = f"{node.name}_q"
    conv = emit(rw, Op.QCONV2D, [x.name, wname, *requant_params(
        rw, hint, x, scales, np.tile(bias, phases), out)],
        {"stride": (1, 1), "padding": (kkh - 1, kkw - 1, max(qh - h, 0), max(qw - wd, 0)),
         "dilation": (1, 1), "groups": 1, "layout": Layout.NCHW, "in_zp": x.zp,
         **out.out_attrs(lo, hi)}, out.quant, hint=hint, loc=node.loc)
    return _depth_to_space(rw, conv, True, sh, sw, cout, (ph, pw, oh, ow), out.quant, node)


def _depth_to_space(rw: Rewriter, conv: str, phase_major: bool, sh: int, sw: int, c: int,
                    crop: tuple[int, int, int, int], quant: QuantParams, node: Node) -> str:
    """The output phases of `conv` (channels (phase, c) when `phase_major`, else (c, phase))
    interleaved into rows and columns, then cropped to [top, top + h) x [left, left + w)."""
    n, _, zh, zw = rw.type_of(conv).shape
    shape, perm = ((n, sh, sw, c, zh, zw), (0, 3, 4, 1, 5, 2)) if phase_major else (
        (n, c, sh, sw, zh, zw), (0, 1, 4, 2, 5, 3))
    y = emit(rw, Op.RESHAPE, [conv], {"shape": shape}, quant, hint=f"{node.name}_phases",
             loc=node.loc)
    y = emit(rw, Op.TRANSPOSE, [y], {"perm": perm}, quant, hint=f"{node.name}_interleave",
             loc=node.loc)
    y = emit(rw, Op.RESHAPE, [y], {"shape": (n, c, zh * sh, zw * sw)}, quant,
             hint=f"{node.name}_full", loc=node.loc)
    top, left, h, w = crop
    for axis, start, size in ((2, top, h), (3, left, w)):
        if (start, size) != (0, rw.type_of(y).shape[axis]):
            y = emit(rw, Op.SLICE, [y], {"axis": axis, "start": start, "end": start + size,
                                         "step": 1}, quant, hint=f"{node.name}_crop",
                     loc=node.loc)
    return y


MAX_BILINEAR_SCALE = 5  # tent weights are multiples of 1 / (2 f): (2 fh)(2 fw) <= 127 in int8


def tent(f: int) -> tuple[np.ndarray, int]:
    """Linear interpolation by an integer factor `f` (align_corners off) as the kernel of a
    transposed conv with stride f, times 2 f (integers), and the crop before its output (on an
    input padded by one replicated pixel per side, add f)."""
    a = np.arange(2 * f)
    return np.rint(2 * f * np.maximum(0.0, 1 - np.abs((a - f // 2 + 0.5) / f - 0.5))), f // 2


def _edge_padded(rw: Rewriter, x: IntVal, node: Node) -> IntVal:
    """x with its first and last rows and columns repeated once (interpolation clamps at the
    edges)."""
    name = x.name
    for axis in (2, 3):
        size = rw.type_of(name).shape[axis]
        edges = [emit(rw, Op.SLICE, [name], {"axis": axis, "start": s, "end": s + 1, "step": 1},
                      x.quant, hint=f"{node.name}_edge", loc=node.loc) for s in (0, size - 1)]
        name = emit(rw, Op.CONCAT, [edges[0], name, edges[1]], {"axis": axis}, x.quant,
                    hint=f"{node.name}_padded", loc=node.loc)
    return IntVal(name, x.scale, x.zp, x.dtype)


# q(upsample_bilinear(dq(x), f) {align_corners off})  (integer factors up to 5)
#   =>  edge-replicated x -> one depthwise-style qconv2d of the tent kernel's phases (f_h f_w
#       output channels per channel) -> depth-to-space -> crop
def lower_upsample_bilinear(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.UPSAMPLE_BILINEAR)
    if node is None or node.attr("align_corners"):
        return None
    fh, fw = node.attr("scale")
    x = deq(rw, node.inputs[0])
    if x is None or x.dtype is not DType.I8 or max(fh, fw) > MAX_BILINEAR_SCALE:
        return None
    n, c, h, w = rw.type_of(x.name).shape
    (kh, oh), (kw, ow) = tent(fh), tent(fw)
    kernel = np.outer(kh, kw).astype(np.int8)[None, None]  # IOHW, one channel
    phases = np.tile(phase_weights(kernel, fh, fw), (c, 1, 1, 1))  # [c f_h f_w, 1, 2, 2]
    scale = 1.0 / (4 * fh * fw)
    wname = rw.constant(phases, hint=f"{node.name}_tent", type_=TensorType(
        phases.shape, DType.I8, quant=QuantParams((scale,), (0,))))
    padded = _edge_padded(rw, x, node)
    out = QOut.of(q)
    hint = f"{node.name}_q"
    channels = c * fh * fw
    conv = emit(rw, Op.QCONV2D, [padded.name, wname, *requant_params(
        rw, hint, padded, np.full(channels, scale), np.zeros(channels, np.int32), out)],
        {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": c,
         "layout": Layout.NCHW, "in_zp": x.zp, **out.out_attrs()}, out.quant, hint=hint,
        loc=node.loc)
    return _depth_to_space(rw, conv, False, fh, fw, c, (fh + oh, fw + ow, h * fh, w * fw),
                           out.quant, node)


def phase_weights(w: np.ndarray, sh: int, sw: int) -> np.ndarray:
    """A transposed conv's IOHW kernel as the OIHW kernel of one conv computing all its output
    phases: output channel (rh * sw + rw) * cout + co of the conv over the input padded by
    kernel - 1 is output pixel (q * sh + rh, r * sw + rw) of channel co before the crop; its
    taps are those of phase (rh, rw), flipped (a conv correlates, a transposed conv convolves);
    taps beyond the kernel are zero."""
    cin, cout, kh, kw = w.shape
    kkh, kkw = -(-kh // sh), -(-kw // sw)
    out = np.zeros((sh * sw * cout, cin, kkh, kkw), w.dtype)
    for rh in range(sh):
        for rw_ in range(sw):
            block = out[(rh * sw + rw_) * cout:(rh * sw + rw_ + 1) * cout]
            for jh in range(kkh):
                for jw in range(kkw):
                    a, b = (kkh - 1 - jh) * sh + rh, (kkw - 1 - jw) * sw + rw_
                    if a < kh and b < kw:
                        block[:, :, jh, jw] = w[:, :, a, b].T
    return out


# ---------------------------------------------------------------- the definitions

_I, _F = AttrKind.INT, AttrKind.FLOAT
_CONV_OPERANDS = ("input", "weight", "bias")

register(
    OpDef(Op.CONV2D, OpSpec(_CONV_OPERANDS, conv2d_type, CONV_ATTRS, optional=1),
          kernel=_conv2d, torch=_conv2d_torch, layout=LayoutRule.WINDOW_WEIGHTS,
          lower=(lower_conv2d, lower_conv1d), macs=conv_macs),
    OpDef(Op.QCONV2D, OpSpec((*_CONV_OPERANDS, "multiplier", "shift"), _qconv2d_type,
                             {**CONV_ATTRS, "in_zp": AttrSpec(_I), **OUT_ATTRS,
                              **ROUNDING_ATTR}),
          golden=_qconv2d_golden, layout=LayoutRule.WINDOW_WEIGHTS,
          npu=Npu(conv_emit, conv_geometry.refusal, quant_free=frozenset({"in_zp"}) | OUT_FIELDS,
                  int4=frozenset({1}), int64=frozenset({2})),
          macs=conv_macs, traits=frozenset({Trait.INTEGER})),
    OpDef(Op.CONV_TRANSPOSE2D, OpSpec(_CONV_OPERANDS, _conv_transpose2d_type, {
        "stride": AttrSpec(AttrKind.INTS, (1, 1)), "padding": AttrSpec(AttrKind.INTS, (0, 0)),
        "output_padding": AttrSpec(AttrKind.INTS, (0, 0)),
        "dilation": AttrSpec(AttrKind.INTS, (1, 1)), "groups": AttrSpec(_I, 1),
        "layout": AttrSpec(AttrKind.LAYOUT, Layout.NCHW)}, optional=1),
          kernel=_conv_transpose2d, torch=_conv_transpose2d_torch,
          lower=(lower_conv_transpose2d,), macs=conv_transpose_macs),
    OpDef(Op.UPSAMPLE_BILINEAR, OpSpec(("x",), _upsample_bilinear_type, {
        "scale": AttrSpec(AttrKind.INTS), "align_corners": AttrSpec(AttrKind.BOOL, False),
        "layout": AttrSpec(AttrKind.LAYOUT, Layout.NCHW)}),
          kernel=_upsample_bilinear, torch=_upsample_bilinear_torch,
          lower=(lower_upsample_bilinear,)),
    OpDef(Op.BATCH_NORM, OpSpec(("input", "mean", "var", "weight", "bias"), _batch_norm_type,
                                {"eps": AttrSpec(_F, 1e-5),
                                 "layout": AttrSpec(AttrKind.LAYOUT, Layout.NCHW)}, optional=2),
          kernel=_batch_norm, torch=_batch_norm_torch, layout=LayoutRule.WINDOW),
)
