"""Converters of pooling, reduction and resampling ATen ops to IR ops."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, converts, normalize_dims
from tessel.frontend.convert_nn import ints
from tessel.ir import Layout, Op

A = torch.ops.aten
Node = torch.fx.Node
Args = dict[str, Any]


def _pool_attrs(a: Args) -> dict[str, Any]:
    kernel = ints(a["kernel_size"], 2, "kernel_size")
    stride = ints(a["stride"], 2, "stride") if a.get("stride") else kernel
    ph, pw = ints(a["padding"], 2, "padding")
    return {"kernel": kernel, "stride": stride, "padding": (ph, pw, ph, pw),
            "ceil_mode": bool(a["ceil_mode"]), "layout": Layout.NCHW}


def _pool_input(ctx: ImportContext, a: Args) -> str:
    x = ctx.v(a["self"])
    if len(ctx.shape(x)) != 4:
        raise Unsupported("pooling of a non-batched (3-D) input")
    return x


# aten.max_pool2d_with_indices(x, k, s, p, d, ceil)[0] => max_pool2d(x)
@converts(A.max_pool2d_with_indices.default)
def max_pool2d_with_indices(ctx: ImportContext, node: Node, a: Args) -> tuple:
    return (max_pool2d(ctx, node, a), None)


# aten.max_pool2d(x, k, s, p, d, ceil) => max_pool2d(x)
@converts(A.max_pool2d.default)
def max_pool2d(ctx: ImportContext, node: Node, a: Args) -> str:
    attrs = _pool_attrs(a) | {"dilation": ints(a["dilation"], 2, "dilation")}
    return ctx.add(Op.MAX_POOL2D, [_pool_input(ctx, a)], attrs)


# aten.avg_pool2d(x, k, s, p, ceil, count_include_pad) => avg_pool2d(x)
@converts(A.avg_pool2d.default)
def avg_pool2d(ctx: ImportContext, node: Node, a: Args) -> str:
    if a.get("divisor_override") is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    attrs = _pool_attrs(a) | {"count_include_pad": bool(a["count_include_pad"])}
    return ctx.add(Op.AVG_POOL2D, [_pool_input(ctx, a)], attrs)


# aten.adaptive_avg_pool2d(x, [1, 1]) => mean(x, axes=[2, 3], keepdim)
# aten.adaptive_avg_pool2d(x, [oh, ow]) => avg_pool2d(x, kernel=stride=[H/oh, W/ow]) if divisible
@converts(A.adaptive_avg_pool2d.default, A._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(ctx: ImportContext, node: Node, a: Args) -> str:
    x = _pool_input(ctx, a)
    oh, ow = ints(a["output_size"], 2, "output_size")
    h, w = ctx.shape(x)[2:]
    if (oh, ow) == (1, 1):
        return ctx.add(Op.MEAN, [x], {"axes": (2, 3), "keepdim": True})
    if oh == 0 or ow == 0 or h % oh or w % ow:
        raise Unsupported(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (not an integer ratio)")
    kernel = (h // oh, w // ow)
    return ctx.add(Op.AVG_POOL2D, [x], {"kernel": kernel, "stride": kernel,
                                        "layout": Layout.NCHW})


def _reduce(ctx: ImportContext, node: Node, op: Op, x: str, dims: Any, keepdim: bool) -> str:
    _, dtype = ctx.out_meta(node)
    x = ctx.cast(x, dtype)
    axes = normalize_dims(dims, len(ctx.shape(x)))
    if not ctx.shape(x):
        return x
    return ctx.add(op, [x], {"axes": axes, "keepdim": bool(keepdim)})


# aten.mean(x, dims, keepdim) => mean(x, axes, keepdim)
@converts(A.mean.dim, A.mean.default)
def mean(ctx: ImportContext, node: Node, a: Args) -> str:
    return _reduce(ctx, node, Op.MEAN, ctx.v(a["self"]), a.get("dim"), a.get("keepdim", False))


# aten.sum(x, dims, keepdim) => sum(x, axes, keepdim)
@converts(A.sum.dim_IntList, A.sum.default)
def sum_(ctx: ImportContext, node: Node, a: Args) -> str:
    return _reduce(ctx, node, Op.SUM, ctx.v(a["self"]), a.get("dim"), a.get("keepdim", False))


# aten.amax(x, dims, keepdim) => reduce_max(x, axes, keepdim)
@converts(A.amax.default)
def amax(ctx: ImportContext, node: Node, a: Args) -> str:
    return _reduce(ctx, node, Op.REDUCE_MAX, ctx.v(a["self"]), a["dim"], a["keepdim"])


# aten.max.dim(x, dim, keepdim) => (reduce_max(x, [dim], keepdim), -)   (indices not imported)
@converts(A.max.dim)
def max_dim(ctx: ImportContext, node: Node, a: Args) -> tuple:
    values = node.meta["val"][0]
    shape = tuple(int(d) for d in values.shape)
    x = ctx.v(a["self"])
    out = ctx.add(Op.REDUCE_MAX, [x], {"axes": normalize_dims([a["dim"]], len(ctx.shape(x))),
                                       "keepdim": bool(a["keepdim"])})
    return (ctx.reshape(out, shape), None)


# aten.linalg_vector_norm(x, 2, dims, keepdim) => sqrt(sum(x * x, axes, keepdim)); ord 1, inf too
@converts(A.linalg_vector_norm.default)
def vector_norm(ctx: ImportContext, node: Node, a: Args) -> str:
    _, dtype = ctx.out_meta(node)
    x = ctx.cast(ctx.v(a["self"]), dtype)
    order, dims, keep = float(a["ord"]), a["dim"], a["keepdim"]
    if order == 2.0:
        return ctx.add(Op.SQRT, [_reduce(ctx, node, Op.SUM, ctx.square(x), dims, keep)])
    if order == 1.0:
        return _reduce(ctx, node, Op.SUM, ctx.add(Op.ABS, [x]), dims, keep)
    if order == math.inf:
        return _reduce(ctx, node, Op.REDUCE_MAX, ctx.add(Op.ABS, [x]), dims, keep)
    raise Unsupported(f"vector norm of order {a['ord']}")


def _integer_scale(size_in: int, size_out: int, given: Any) -> int:
    if size_in == 0 or size_out % size_in:
        raise Unsupported(f"nearest upsampling {size_in} -> {size_out} (not an integer factor)")
    factor = size_out // size_in
    if given is not None and float(given) != float(factor):
        raise Unsupported(f"nearest upsampling by a non-integer scale factor {given}")
    return factor


# aten.upsample_nearest2d(x, size | scales) => upsample_nearest(x, scale=[fh, fw]) (integer factors)
@converts(A.upsample_nearest2d.vec, A.upsample_nearest2d.default)
def upsample_nearest2d(ctx: ImportContext, node: Node, a: Args) -> str:
    x = ctx.v(a["input"])
    if len(ctx.shape(x)) != 4:
        raise Unsupported("nearest upsampling of a non-4-D tensor")
    shape, _ = ctx.out_meta(node)
    if "scale_factors" in a:
        sh, sw = a["scale_factors"] if a["scale_factors"] is not None else (None, None)
    else:
        sh, sw = a.get("scales_h"), a.get("scales_w")
    fh = _integer_scale(ctx.shape(x)[2], shape[2], sh)
    fw = _integer_scale(ctx.shape(x)[3], shape[3], sw)
    return ctx.add(Op.UPSAMPLE_NEAREST, [x], {"scale": (fh, fw), "layout": Layout.NCHW})
