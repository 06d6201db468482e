"""Converters of data-movement ATen ops (views, permutes, slices, concat, pad) and of ops that
make constants (full, zeros, arange, ...) to IR ops."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import torch
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, converts
from tessel.ir import Op

A = torch.ops.aten
Node = torch.fx.Node
Args = dict[str, Any]


# aten.view / reshape / _unsafe_view / flatten / squeeze / unsqueeze / unflatten(x) => reshape(x)
@converts(A.view.default, A.reshape.default, A._unsafe_view.default, A.view_copy.default,
          A.flatten.using_ints, A.unflatten.int, A.squeeze, A.unsqueeze.default,
          A.squeeze_copy, A.unsqueeze_copy.default)
def reshape(ctx: ImportContext, node: Node, a: Args) -> str:
    shape, _ = ctx.out_meta(node)
    return ctx.reshape(ctx.v(node.args[0]), shape)


# aten.permute(x, dims) => transpose(x, perm=dims)
@converts(A.permute.default, A.permute_copy.default)
def permute(ctx: ImportContext, node: Node, a: Args) -> str:
    return ctx.transpose(ctx.v(a["self"]), a["dims"])


# aten.transpose(x, d0, d1) => transpose(x, perm with d0 and d1 swapped)
@converts(A.transpose.int)
def transpose(ctx: ImportContext, node: Node, a: Args) -> str:
    x = ctx.v(a["self"])
    rank = len(ctx.shape(x))
    perm = list(range(rank))
    d0, d1 = int(a["dim0"]) % rank, int(a["dim1"]) % rank
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.transpose(x, perm)


# aten.t(x) => transpose(x, perm=[1, 0]) (identity for rank < 2)
@converts(A.t.default)
def t(ctx: ImportContext, node: Node, a: Args) -> str:
    x = ctx.v(a["self"])
    return ctx.transpose(x, list(reversed(range(len(ctx.shape(x))))))


# aten.expand(x, sizes) => expand(x, shape)
@converts(A.expand.default, A.expand_copy.default)
def expand(ctx: ImportContext, node: Node, a: Args) -> str:
    shape, _ = ctx.out_meta(node)
    return ctx.expand(ctx.v(a["self"]), shape)


# aten.expand_as(x, other) => expand(x, shape of other)
@converts(A.expand_as.default)
def expand_as(ctx: ImportContext, node: Node, a: Args) -> str:
    shape, _ = ctx.out_meta(node)
    return ctx.expand(ctx.v(a["self"]), shape)


# aten.cat(xs, dim) => concat(xs, axis=dim)
@converts(A.cat.default)
def cat(ctx: ImportContext, node: Node, a: Args) -> str:
    shape, dtype = ctx.out_meta(node)
    parts = [ctx.cast(ctx.v(x), dtype) for x in a["tensors"]]
    parts = [p for p in parts if ctx.shape(p) != (0,) or len(shape) == 1]  # legacy empty inputs
    if len(parts) == 1:
        return parts[0]
    return ctx.add(Op.CONCAT, parts, {"axis": int(a["dim"]) % len(shape)})


def _slice(ctx: ImportContext, x: str, dim: int, start: Any, end: Any, step: int) -> str:
    shape = ctx.shape(x)
    dim = int(dim) % len(shape)
    start, end, step = slice(start, end, int(step)).indices(shape[dim])
    end = max(end, start)
    if (start, end, step) == (0, shape[dim], 1):
        return x
    return ctx.add(Op.SLICE, [x], {"axis": dim, "start": start, "end": end, "step": step})


# aten.slice(x, dim, start, end, step) => slice(x, axis, start, end, step) (ends clamped)
@converts(A.slice.Tensor, A.slice_copy.Tensor)
def slice_(ctx: ImportContext, node: Node, a: Args) -> str:
    if a["step"] < 1:
        raise Unsupported(f"slice with step {a['step']}")
    return _slice(ctx, ctx.v(a["self"]), a["dim"], a["start"], a["end"], a["step"])


# aten.narrow(x, dim, start, length) => slice(x, axis, start, start + length)
@converts(A.narrow.default)
def narrow(ctx: ImportContext, node: Node, a: Args) -> str:
    x = ctx.v(a["self"])
    start = int(a["start"]) % ctx.shape(x)[int(a["dim"])] if a["start"] < 0 else int(a["start"])
    return _slice(ctx, x, a["dim"], start, start + int(a["length"]), 1)


# aten.select(x, dim, i) => reshape(slice(x, axis=dim, start=i, end=i+1))
@converts(A.select.int, A.select_copy.int)
def select(ctx: ImportContext, node: Node, a: Args) -> str:
    x = ctx.v(a["self"])
    dim = int(a["dim"]) % len(ctx.shape(x))
    index = int(a["index"]) % ctx.shape(x)[dim]
    shape, _ = ctx.out_meta(node)
    return ctx.reshape(_slice(ctx, x, dim, index, index + 1, 1), shape)


def _split(ctx: ImportContext, node: Node, x: str, sizes: list[int], dim: int) -> tuple:
    dim = int(dim) % len(ctx.shape(x))
    out, start = [], 0
    for size in sizes:
        out.append(_slice(ctx, x, dim, start, start + int(size), 1))
        start += int(size)
    return tuple(out)


# aten.split_with_sizes(x, sizes, dim) => (slice(x, ...), ...)
@converts(A.split_with_sizes.default, A.split_with_sizes_copy.default)
def split_with_sizes(ctx: ImportContext, node: Node, a: Args) -> tuple:
    return _split(ctx, node, ctx.v(a["self"]), list(a["split_sizes"]), a["dim"])


# aten.split(x, size, dim) => (slice(x, ...), ...)
@converts(A.split.Tensor)
def split(ctx: ImportContext, node: Node, a: Args) -> tuple:
    x = ctx.v(a["self"])
    total, size = ctx.shape(x)[int(a["dim"])], int(a["split_size"])
    sizes = [min(size, total - s) for s in range(0, total, size)] if size > 0 else [total]
    return _split(ctx, node, x, sizes, a["dim"])


# aten.unbind(x, dim) => (reshape(slice(x, ...)), ...)
@converts(A.unbind.int)
def unbind(ctx: ImportContext, node: Node, a: Args) -> tuple:
    x = ctx.v(a["self"])
    dim = int(a["dim"]) % len(ctx.shape(x))
    shape = ctx.shape(x)[:dim] + ctx.shape(x)[dim + 1:]
    parts = _split(ctx, node, x, [1] * ctx.shape(x)[dim], dim)
    return tuple(ctx.reshape(p, shape) for p in parts)


def _pad(ctx: ImportContext, x: str, pad: list[int], value: float) -> str:
    rank = len(ctx.shape(x))
    if len(pad) % 2 or len(pad) > 2 * rank:
        raise Unsupported(f"padding {pad} for a rank-{rank} tensor")
    if any(int(p) < 0 for p in pad):
        raise Unsupported(f"negative padding {pad}")
    pads = [0] * (2 * rank)
    for i in range(len(pad) // 2):  # torch lists (lo, hi) pairs from the last dim backwards
        d = rank - 1 - i
        pads[2 * d], pads[2 * d + 1] = int(pad[2 * i]), int(pad[2 * i + 1])
    if not any(pads):
        return x
    return ctx.add(Op.PAD, [x], {"pads": tuple(pads), "value": float(value)})


# aten.constant_pad_nd(x, [l, r, t, b], v) => pad(x, pads=[0, 0, 0, 0, t, b, l, r], value=v)
@converts(A.constant_pad_nd.default)
def constant_pad_nd(ctx: ImportContext, node: Node, a: Args) -> str:
    return _pad(ctx, ctx.v(a["self"]), list(a["pad"]), a["value"] or 0.0)


# aten.pad(x, pad, "constant", v) => pad(x, ...)
@converts(A.pad.default)
def pad(ctx: ImportContext, node: Node, a: Args) -> str:
    if a["mode"] != "constant":
        raise Unsupported(f"{a['mode']} padding")
    return _pad(ctx, ctx.v(a["self"]), list(a["pad"]), a["value"] or 0.0)


# aten.full / zeros / ones / scalar_tensor / arange / empty-free factories (static) => constant
@converts(A.full.default, A.zeros.default, A.ones.default, A.scalar_tensor.default, A.arange)
def factory(ctx: ImportContext, node: Node, a: Args) -> str:
    if any(isinstance(x, Node) for x in (*node.args, *node.kwargs.values())):
        raise Unsupported("factory op with non-static arguments")
    shape, dtype = ctx.out_meta(node)
    value = node.target(*node.args, **node.kwargs)
    return ctx.const(value.detach().numpy().astype(dtype.numpy).reshape(shape))


_FILL = {A.zeros_like.default: 0, A.ones_like.default: 1}


# aten.zeros_like / ones_like / full_like(x, v) => constant of x's shape
@converts(A.zeros_like.default, A.ones_like.default, A.full_like.default)
def like(ctx: ImportContext, node: Node, a: Args) -> str:
    shape, dtype = ctx.out_meta(node)
    fill = _FILL.get(node.target, a.get("fill_value"))
    if isinstance(fill, Node):
        raise Unsupported("full_like with a tensor fill value")
    return ctx.const(np.full(shape, fill).astype(dtype.numpy))


# getitem(multi-output op, k) => the k-th imported output
@converts(operator.getitem)
def getitem(ctx: ImportContext, node: Node, a: Args) -> str:
    src, index = node.args
    value = ctx.env.get(src)
    if not isinstance(value, tuple) or not isinstance(value[index], str):
        raise Unsupported(f"output {index} of {src.target}")
    return value[index]
