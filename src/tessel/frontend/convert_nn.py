"""Converters of the compute ATen ops (convolution, matmul, norms, attention, softmax) to IR ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, converts
from tessel.ir import Layout, Op

A = torch.ops.aten
Node = torch.fx.Node
Args = dict[str, Any]


def ints(value: Any, n: int, what: str) -> tuple[int, ...]:
    """An int or a 1- or n-element list as an n-tuple of ints."""
    vals = [value] if isinstance(value, int) else list(value)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise Unsupported(f"{what} {value!r} does not have {n} entries")
    return tuple(int(v) for v in vals)


def same_padding(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, int, int, int]:
    """padding='same' (stride 1) as (top, left, bottom, right); an odd extra goes bottom/right."""
    th, tw = (d * (k - 1) for k, d in zip(kernel, dilation, strict=True))
    return th // 2, tw // 2, th - th // 2, tw - tw // 2


def _conv2d(ctx: ImportContext, x: str, w: str, bias: str | None, stride: tuple[int, ...],
            padding: Any, dilation: tuple[int, ...], groups: int) -> str:
    if padding == "same":
        pads = same_padding(ctx.shape(w)[2:], dilation)
    elif padding == "valid":
        pads = (0, 0, 0, 0)
    else:
        ph, pw = padding
        pads = (ph, pw, ph, pw)
    inputs = [x, w] + ([bias] if bias is not None else [])
    return ctx.add(Op.CONV2D, inputs, {"stride": stride, "padding": pads, "dilation": dilation,
                                       "groups": int(groups), "layout": Layout.NCHW})


def _conv(ctx: ImportContext, a: Args) -> str:
    """conv2d, or conv1d as a conv2d over a height-1 image (reshape in, conv2d, reshape out)."""
    x, w = ctx.v(a["input"]), ctx.v(a["weight"])
    bias = ctx.v(a["bias"]) if a.get("bias") is not None else None
    rank = len(ctx.shape(w))
    if len(ctx.shape(x)) != rank:
        raise Unsupported("unbatched convolution input")
    pad = a["padding"]
    if rank == 4:
        pad = pad if isinstance(pad, str) else ints(pad, 2, "padding")
        return _conv2d(ctx, x, w, bias, ints(a["stride"], 2, "stride"), pad,
                       ints(a["dilation"], 2, "dilation"), a["groups"])
    if rank != 3:
        raise Unsupported(f"{rank - 2}-D convolution")
    n, c, length = ctx.shape(x)
    x4 = ctx.reshape(x, (n, c, 1, length))
    w4 = ctx.reshape(w, ctx.shape(w)[:2] + (1, ctx.shape(w)[2]))
    pad = pad if isinstance(pad, str) else (0, ints(pad, 1, "padding")[0])
    out = _conv2d(ctx, x4, w4, bias, (1, ints(a["stride"], 1, "stride")[0]), pad,
                  (1, ints(a["dilation"], 1, "dilation")[0]), a["groups"])
    o = ctx.shape(out)
    return ctx.reshape(out, (o[0], o[1], o[3]))


# aten.conv2d(x, w, b, stride, padding, dilation, groups) => conv2d(x, w, b) (NCHW/OIHW)
# aten.conv1d(...) => reshape -> conv2d over [N, C, 1, L] -> reshape
@converts(A.conv2d.default, A.conv2d.padding, A.conv1d.default, A.conv1d.padding)
def conv(ctx: ImportContext, node: Node, a: Args) -> str:
    return _conv(ctx, a)


def _conv_transpose(ctx: ImportContext, a: Args) -> str:
    """conv_transpose2d (2-D only: a 1-D one is not imported)."""
    x, w = ctx.v(a["input"]), ctx.v(a["weight"])
    if len(ctx.shape(w)) != 4 or len(ctx.shape(x)) != 4:
        raise Unsupported("transposed convolution of a rank other than 2-D, or unbatched")
    bias = [ctx.v(a["bias"])] if a.get("bias") is not None else []
    return ctx.add(Op.CONV_TRANSPOSE2D, [x, w, *bias], {
        "stride": ints(a["stride"], 2, "stride"), "padding": ints(a["padding"], 2, "padding"),
        "output_padding": ints(a["output_padding"], 2, "output_padding"),
        "dilation": ints(a["dilation"], 2, "dilation"), "groups": int(a["groups"]),
        "layout": Layout.NCHW})


# aten.convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
#   => conv2d, or conv_transpose2d when transposed
@converts(A.convolution.default)
def convolution(ctx: ImportContext, node: Node, a: Args) -> str:
    if a["transposed"]:
        return _conv_transpose(ctx, a)
    if any(int(p) for p in a["output_padding"]):
        raise Unsupported("convolution with output_padding")
    return _conv(ctx, a)


# aten.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
#   => conv_transpose2d (IOHW weights)
@converts(A.conv_transpose2d.input)
def conv_transpose2d(ctx: ImportContext, node: Node, a: Args) -> str:
    return _conv_transpose(ctx, a)


# aten.linear(x, w, b) => linear(x, w, b)
@converts(A.linear.default)
def linear(ctx: ImportContext, node: Node, a: Args) -> str:
    x, w = ctx.v(a["input"]), ctx.v(a["weight"])
    if len(ctx.shape(w)) != 2 or not ctx.shape(x):
        raise Unsupported("linear with a non-2-D weight or a scalar input")
    bias = [ctx.v(a["bias"])] if a.get("bias") is not None else []
    return ctx.add(Op.LINEAR, [x, w] + bias)


def _matmul(ctx: ImportContext, node: Node, lhs: str, rhs: str) -> str:
    """matmul with numpy/torch rules for 1-D operands (reshaped to 2-D and back)."""
    la, lb = len(ctx.shape(lhs)), len(ctx.shape(rhs))
    if la == 0 or lb == 0:
        raise Unsupported("matmul of a 0-D tensor")
    a2 = ctx.reshape(lhs, (1,) + ctx.shape(lhs)) if la == 1 else lhs
    b2 = ctx.reshape(rhs, ctx.shape(rhs) + (1,)) if lb == 1 else rhs
    out = ctx.add(Op.MATMUL, [a2, b2])
    shape, _ = ctx.out_meta(node)
    return ctx.reshape(out, shape)


# aten.matmul / mm / bmm(a, b) => matmul(a, b)
@converts(A.matmul.default, A.mm.default, A.bmm.default)
def matmul(ctx: ImportContext, node: Node, a: Args) -> str:
    first, second = list(a.values())[:2]
    return _matmul(ctx, node, ctx.v(first), ctx.v(second))


# aten.addmm(b, x, transpose(w)) => linear(x, w, b); other addmm(c, a, b) => add(matmul(a, b), c)
@converts(A.addmm.default)
def addmm(ctx: ImportContext, node: Node, a: Args) -> str:
    bias, m1, m2 = ctx.v(a["self"]), ctx.v(a["mat1"]), ctx.v(a["mat2"])
    beta, alpha = a["beta"], a["alpha"]
    d = ctx.defs.get(m2)
    if beta == 1 and alpha == 1 and d is not None and d.op is Op.TRANSPOSE and \
            ctx.shape(bias) == ctx.shape(m2)[1:]:
        return ctx.add(Op.LINEAR, [m1, d.inputs[0], bias])
    _, dtype = ctx.out_meta(node)
    prod = ctx.add(Op.MATMUL, [m1, m2])
    return ctx.add(Op.ADD, [ctx.scaled(prod, alpha, dtype), ctx.scaled(bias, beta, dtype)])


def _batch_norm(ctx: ImportContext, a: Args, training: bool) -> tuple:
    if training:
        raise Unsupported("batch norm in training mode (call model.eval())")
    if a.get("running_mean") is None or a.get("running_var") is None:
        raise Unsupported("batch norm without running statistics")
    x = ctx.v(a["input"])
    c = ctx.shape(x)[1]
    inputs = [x, ctx.v(a["running_mean"]), ctx.v(a["running_var"])]
    weight, bias = a.get("weight"), a.get("bias")
    if weight is not None or bias is not None:
        inputs.append(ctx.v(weight) if weight is not None else ctx.const(np.ones(c, np.float32)))
    if bias is not None:
        inputs.append(ctx.v(bias))
    out = ctx.add(Op.BATCH_NORM, inputs, {"eps": float(a["eps"]), "layout": Layout.NCHW})
    return (out, None, None)


# aten._native_batch_norm_legit_no_training(x, w, b, mean, var, _, eps)[0]
#   => batch_norm(x, mean, var, w, b)
@converts(A._native_batch_norm_legit_no_training.default)
def batch_norm_no_training(ctx: ImportContext, node: Node, a: Args) -> tuple:
    return _batch_norm(ctx, a, training=False)


# aten.native_batch_norm / _native_batch_norm_legit(..., training=False, ...)[0] => batch_norm
@converts(A.native_batch_norm.default, A._native_batch_norm_legit.default)
def native_batch_norm(ctx: ImportContext, node: Node, a: Args) -> tuple:
    return _batch_norm(ctx, a, training=bool(a["training"]))


# aten.batch_norm(x, w, b, mean, var, training=False, _, eps) => batch_norm
@converts(A.batch_norm.default)
def batch_norm(ctx: ImportContext, node: Node, a: Args) -> str:
    return _batch_norm(ctx, a, training=bool(a["training"]))[0]


def _layer_norm(ctx: ImportContext, a: Args) -> str:
    x = ctx.v(a["input"])
    shape = tuple(int(d) for d in a["normalized_shape"])
    weight, bias = a.get("weight"), a.get("bias")
    inputs = [x]
    if weight is not None or bias is not None:
        ones = np.ones(shape, np.float32)
        inputs.append(ctx.v(weight) if weight is not None else ctx.const(ones))
    if bias is not None:
        inputs.append(ctx.v(bias))
    return ctx.add(Op.LAYER_NORM, inputs, {"normalized_shape": shape, "eps": float(a["eps"])})


# aten.layer_norm(x, shape, w, b, eps) => layer_norm(x, w, b)
@converts(A.layer_norm.default)
def layer_norm(ctx: ImportContext, node: Node, a: Args) -> str:
    return _layer_norm(ctx, a)


# aten.native_layer_norm(x, shape, w, b, eps)[0] => layer_norm(x, w, b)
@converts(A.native_layer_norm.default)
def native_layer_norm(ctx: ImportContext, node: Node, a: Args) -> tuple:
    return (_layer_norm(ctx, a), None, None)


def _softmax_input(ctx: ImportContext, node: Node, a: Args) -> str:
    _, dtype = ctx.out_meta(node)
    return ctx.cast(ctx.v(a["self"]), dtype)


# aten._softmax(x, dim) / softmax.int(x, dim) => softmax(x, axis=dim)
@converts(A._softmax.default, A.softmax.int)
def softmax(ctx: ImportContext, node: Node, a: Args) -> str:
    return ctx.add(Op.SOFTMAX, [_softmax_input(ctx, node, a)], {"axis": int(a["dim"])})


# aten._log_softmax(x, dim) / log_softmax.int(x, dim) => log(softmax(x, axis=dim))
@converts(A._log_softmax.default, A.log_softmax.int)
def log_softmax(ctx: ImportContext, node: Node, a: Args) -> str:
    s = ctx.add(Op.SOFTMAX, [_softmax_input(ctx, node, a)], {"axis": int(a["dim"])})
    return ctx.add(Op.LOG, [s])


# aten.scaled_dot_product_attention(q, k, v, mask, 0, causal, scale) => sdpa(q, k, v, mask)
@converts(A.scaled_dot_product_attention.default)
def sdpa(ctx: ImportContext, node: Node, a: Args) -> str:
    if a.get("dropout_p"):
        raise Unsupported(f"attention dropout_p={a['dropout_p']}")
    if a.get("enable_gqa"):
        raise Unsupported("grouped-query attention (enable_gqa=True)")
    q, k, v = ctx.v(a["query"]), ctx.v(a["key"]), ctx.v(a["value"])
    scale = a.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(ctx.shape(q)[-1])
    inputs = [q, k, v] + ([ctx.v(a["attn_mask"])] if a.get("attn_mask") is not None else [])
    return ctx.add(Op.SDPA, inputs, {"scale": scale, "causal": bool(a["is_causal"])})


# aten.embedding(table, indices) => embedding(table, indices)
@converts(A.embedding.default)
def embedding(ctx: ImportContext, node: Node, a: Args) -> str:
    return ctx.add(Op.EMBEDDING, [ctx.v(a["weight"]), ctx.v(a["indices"])])
