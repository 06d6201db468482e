"""Pooling and reductions: max_pool2d, avg_pool2d, mean, sum, reduce_max; and the integer ops
they lower to. A max pool runs unchanged on integers (POOL MAX: padding never wins); an average
pool becomes `qavg_pool2d` (POOL AVG: the rounded mean of the valid window, same parameters in
and out) unless it counts padding; a mean (and an average pool over the whole map) becomes
`qmean` (REDUCE SUM, then REQUANT: an exact sum, one rounding to the output). The vector engine
runs them (tessel.ops.pool_emit); sum and reduce_max stay on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Node
from tessel.ir.kernels import from_nhwc, pad_hw, to_nhwc, windows
from tessel.ir.ops import POOL_ATTRS, Op, OpSpec, axis_index, nchw_like, require, spatial, window_out
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import Layout, TensorType
from tessel.isa.fields import PoolOp, ReduceOp
from tessel.ops import intops, litert, pool_emit
from tessel.ops.base import LayoutRule, Npu, OpDef, Trait, lazy_functional, lazy_torch, register
from tessel.ops.conv import window_fields
from tessel.ops.movement import lower_movement
from tessel.ops.quantise import (
    OUT_ATTRS,
    REQUANT_ATTRS,
    IntVal,
    QOut,
    deq,
    emit,
    int_result,
    multiplier,
    requantize,
    require_int,
)

_POOL_KEYS = ("kernel", "stride", "padding", "ceil_mode", "layout")


# ---------------------------------------------------------------- shape rules


def _pool2d_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    layout = attrs["layout"]
    n, c, h, w = spatial(x, layout)
    kh, kw = attrs["kernel"]
    sh, sw = attrs["stride"]
    pt, pl, pb, pr = attrs["padding"]
    dh, dw = attrs.get("dilation", (1, 1)) or (1, 1)
    ceil = attrs.get("ceil_mode", False)
    oh = window_out(h, kh, sh, pt, pb, dh, ceil)
    ow = window_out(w, kw, sw, pl, pr, dw, ceil)
    return TensorType(nchw_like(layout, n, c, oh, ow), x.dtype, layout)


def _reduce_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    axes = {axis_index(a, x.rank) for a in attrs["axes"]}
    require(len(axes) == len(attrs["axes"]), f"repeated axes {list(attrs['axes'])}")
    keep = attrs["keepdim"]
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return TensorType(shape, x.dtype)


def _qavg_pool_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    return _pool2d_type(ts, attrs)


def _qmean_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    return int_result(_reduce_type(ts, attrs), attrs)


# ---------------------------------------------------------------- kernels


def _pool2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    _, h, w, _ = x.shape
    (kh, kw), (sh, sw), pad = a["kernel"], a["stride"], a["padding"]
    dil = a.get("dilation", (1, 1))
    ceil = a["ceil_mode"]
    oh = window_out(h, kh, sh, pad[0], pad[2], dil[0], ceil)
    ow = window_out(w, kw, sw, pad[1], pad[3], dil[1], ceil)
    extra = (max(0, (oh - 1) * sh + dil[0] * (kh - 1) + 1 - (h + pad[0] + pad[2])),
             max(0, (ow - 1) * sw + dil[1] * (kw - 1) + 1 - (w + pad[1] + pad[3])))
    if "dilation" in a:  # max pool
        padded = pad_hw(x, pad, -np.inf, extra)
        out = windows(padded, (kh, kw), (sh, sw), dil, (oh, ow)).max(axis=(4, 5))
    else:
        total = windows(pad_hw(x, pad, 0.0, extra), (kh, kw), (sh, sw), (1, 1), (oh, ow))
        ones = np.ones((1, h, w, 1), np.float64)
        region = pad_hw(ones, pad, 1.0 if a["count_include_pad"] else 0.0)
        region = pad_hw(region, (0, 0, 0, 0), 0.0, extra)  # ceil overflow never counts
        count = windows(region, (kh, kw), (sh, sw), (1, 1), (oh, ow)).sum(axis=(4, 5))
        out = total.sum(axis=(4, 5), dtype=np.float64) / count
    return from_nhwc(out.astype(xs[0].dtype), layout)


def _reducer(fn: Callable[..., np.ndarray]) -> Callable[[Mapping[str, Any], list[np.ndarray]],
                                                        np.ndarray]:
    def k(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
        return np.asarray(fn(xs[0], axis=tuple(a["axes"]), keepdims=a["keepdim"])).astype(
            xs[0].dtype)
    return k


def _pool_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    from tessel.errors import TesselConfigError

    functional = lazy_functional()
    pads = a["padding"]
    if "dilation" in a:
        top, left, bottom, right = pads
        x, padding = xs[0], (top, left)
        if top != bottom or left != right:
            x, padding = functional.pad(xs[0], (left, right, top, bottom), value=-math.inf), (0, 0)
        return functional.max_pool2d(x, list(a["kernel"]), list(a["stride"]), list(padding),
                                     list(a["dilation"]), a["ceil_mode"])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise TesselConfigError("avg_pool2d with asymmetric padding cannot run as a torch module")
    return functional.avg_pool2d(xs[0], list(a["kernel"]), list(a["stride"]), [pads[0], pads[1]],
                                 a["ceil_mode"], a["count_include_pad"])


def _reduce_torch(name: str) -> Callable[[Mapping[str, Any], list[Any]], Any]:
    return lambda a, xs: getattr(lazy_torch(), name)(xs[0], list(a["axes"]), a["keepdim"])


def _max_pool_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """POOL MAX on integer tensors (padding never wins); the float kernel for float tensors."""
    if not np.issubdtype(xs[0].dtype, np.integer):
        return _pool2d(a, xs)
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    kh, kw = a["kernel"]
    lo, hi = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max
    y = intops.pool(x, PoolOp.MAX, (kh, kw), **window_fields(a, x.shape[1], x.shape[2], kh, kw),
                    act_min=int(lo), act_max=int(hi))
    return from_nhwc(y, layout)


def _qavg_pool_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """POOL AVG: rounding_div(sum(valid), count(valid)), clamped; same parameters in and out."""
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    kh, kw = a["kernel"]
    y = intops.pool(x, PoolOp.AVG, (kh, kw), **window_fields(a, x.shape[1], x.shape[2], kh, kw),
                    act_min=a["act_min"], act_max=a["act_max"])
    return from_nhwc(y, layout)


def _qmean_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """REDUCE SUM (zero point subtracted) over the axes (moved last and merged: a COPY) +
    REQUANT src=SRAM."""
    x = xs[0]
    axes = sorted({ax % x.ndim for ax in a["axes"]})
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = x.transpose(kept + axes)
    # [..., 1, K]: the sums keep a trailing axis even over every axis (the requantisation
    # works on arrays, never on a rank-0 scalar)
    flat = moved.reshape(moved.shape[:len(kept)] + (1, -1))
    s = intops.reduce(flat, ReduceOp.SUM, -1, a["in_zp"])
    y = intops.requant(s, 0, a["multiplier"], a["shift"], a["out_zp"], a["act_min"],
                       a["act_max"], a["dtype"].numpy)
    if a["keepdim"]:
        return y.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return y.reshape([x.shape[i] for i in kept])


# ---------------------------------------------------------------- QDQ -> integer


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
    if node.attr("litert"):  # an imported model's own multiplier (tessel.ops.litert)
        q31, shift = litert.mean_multiplier(x.scale, out.scale, n)
    else:
        q31, shift = multiplier(x.scale / (n * out.scale))
    attrs = {"axes": tuple(axes), "keepdim": keepdim, "in_zp": x.zp,
             "multiplier": q31, "shift": shift, **out.out_attrs()}
    return emit(rw, Op.QMEAN, [x.name], attrs, out.quant, hint=f"{node.name}_q", loc=node.loc)


# ---------------------------------------------------------------- the definitions

_I, _B, _INTS = AttrKind.INT, AttrKind.BOOL, AttrKind.INTS
_REDUCE_ATTRS = {"axes": AttrSpec(_INTS), "keepdim": AttrSpec(_B, False)}
_POOL_NPU = Npu(pool_emit, pool_emit.pool_refusal, matrix=False)
_INTEGER = frozenset({Trait.INTEGER})


def _reduction(op: Op, fn: Callable[..., np.ndarray], torch: str, lower: tuple = (),
               extra: Mapping[str, AttrSpec] | None = None) -> OpDef:
    return OpDef(op, OpSpec(("x",), _reduce_type, {**_REDUCE_ATTRS, **(extra or {})}),
                 kernel=_reducer(fn), torch=_reduce_torch(torch), layout=LayoutRule.AXES,
                 lower=lower)


register(
    OpDef(Op.MAX_POOL2D, OpSpec(("x",), _pool2d_type, {**POOL_ATTRS,
                                                       "dilation": AttrSpec(_INTS, (1, 1))}),
          kernel=_pool2d, torch=_pool_torch, golden=_max_pool_golden, layout=LayoutRule.WINDOW,
          lower=(lower_movement,), npu=_POOL_NPU, traits=frozenset({Trait.SAME_ON_INTEGERS})),
    OpDef(Op.AVG_POOL2D, OpSpec(("x",), _pool2d_type, {**POOL_ATTRS,
                                                       "count_include_pad": AttrSpec(_B, True)}),
          kernel=_pool2d, torch=_pool_torch, layout=LayoutRule.WINDOW, lower=(lower_avg_pool,)),
    # litert: an imported .tflite MEAN, lowered with LiteRT's multiplier (tessel.ops.litert)
    _reduction(Op.MEAN, np.mean, "mean", (lower_mean,), {"litert": AttrSpec(_B, optional=True)}),
    _reduction(Op.SUM, np.sum, "sum"),
    _reduction(Op.REDUCE_MAX, np.max, "amax"),
    OpDef(Op.QAVG_POOL2D, OpSpec(("x",), _qavg_pool_type, {
        **POOL_ATTRS, "act_min": AttrSpec(_I), "act_max": AttrSpec(_I)}),
          golden=_qavg_pool_golden, layout=LayoutRule.WINDOW, npu=_POOL_NPU, traits=_INTEGER),
    OpDef(Op.QMEAN, OpSpec(("x",), _qmean_type, {**_REDUCE_ATTRS, "in_zp": AttrSpec(_I),
                                                  **REQUANT_ATTRS, **OUT_ATTRS}),
          golden=_qmean_golden, layout=LayoutRule.AXES,
          npu=Npu(pool_emit, pool_emit.mean_refusal, matrix=False), traits=_INTEGER),
)
