"""Converters of elementwise ATen ops (arithmetic, activations, casts) to IR ops."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, converts
from tessel.ir import Op

A = torch.ops.aten
Node = torch.fx.Node
Args = dict[str, Any]


def _binary(ctx: ImportContext, node: Node, op: Op, lhs: Any, rhs: Any) -> str:
    """op(lhs, rhs) computed in the result dtype (PyTorch type promotion done up front)."""
    _, dtype = ctx.out_meta(node)
    return ctx.add(op, [ctx.operand(lhs, dtype), ctx.operand(rhs, dtype)])


def _scaled(ctx: ImportContext, node: Node, arg: Any, alpha: Any) -> Any:
    """arg * alpha (the `alpha` of add/sub); a Python number is scaled directly."""
    if alpha is None or alpha == 1:
        return arg
    if not isinstance(arg, Node):
        return arg * alpha
    _, dtype = ctx.out_meta(node)
    return ctx.scaled(ctx.operand(arg, dtype), alpha, dtype)


def _binary_scaled(ctx: ImportContext, node: Node, op: Op, a: Args) -> str:
    _, dtype = ctx.out_meta(node)
    scaled = _scaled(ctx, node, a["other"], a.get("alpha"))
    rhs = ctx.cast(scaled, dtype) if isinstance(scaled, str) else ctx.operand(scaled, dtype)
    return ctx.add(op, [ctx.operand(a["self"], dtype), rhs])


# aten.add(x, y, alpha) => add(x, y * alpha)
@converts(A.add.Tensor, A.add.Scalar)
def add(ctx: ImportContext, node: Node, a: Args) -> str:
    return _binary_scaled(ctx, node, Op.ADD, a)


# aten.sub(x, y, alpha) => sub(x, y * alpha)
@converts(A.sub.Tensor, A.sub.Scalar)
def sub(ctx: ImportContext, node: Node, a: Args) -> str:
    return _binary_scaled(ctx, node, Op.SUB, a)


# aten.rsub(x, y, alpha) => sub(y, x * alpha)
@converts(A.rsub.Tensor, A.rsub.Scalar)
def rsub(ctx: ImportContext, node: Node, a: Args) -> str:
    _, dtype = ctx.out_meta(node)
    scaled = _scaled(ctx, node, a["self"], a.get("alpha"))
    x = scaled if isinstance(scaled, str) else ctx.operand(scaled, dtype)
    return ctx.add(Op.SUB, [ctx.operand(a["other"], dtype), ctx.cast(x, dtype)])


# aten.mul(x, y) => mul(x, y)
@converts(A.mul.Tensor, A.mul.Scalar)
def mul(ctx: ImportContext, node: Node, a: Args) -> str:
    return _binary(ctx, node, Op.MUL, a["self"], a["other"])


# aten.div(x, y) => div(x, y)   (true division; rounding modes are not supported)
@converts(A.div.Tensor, A.div.Scalar, A.div.Tensor_mode, A.div.Scalar_mode)
def div(ctx: ImportContext, node: Node, a: Args) -> str:
    if a.get("rounding_mode") is not None:
        raise Unsupported(f"division with rounding_mode={a['rounding_mode']!r}")
    return _binary(ctx, node, Op.DIV, a["self"], a["other"])


# aten.pow(x, e) => pow(x, e)
@converts(A.pow.Tensor_Scalar, A.pow.Tensor_Tensor, A.pow.Scalar)
def pow_(ctx: ImportContext, node: Node, a: Args) -> str:
    return _binary(ctx, node, Op.POW, a["self"], a["exponent"])


# aten.maximum(x, y) => maximum(x, y); aten.minimum likewise
@converts(A.maximum.default)
def maximum(ctx: ImportContext, node: Node, a: Args) -> str:
    return _binary(ctx, node, Op.MAXIMUM, a["self"], a["other"])


@converts(A.minimum.default)
def minimum(ctx: ImportContext, node: Node, a: Args) -> str:
    return _binary(ctx, node, Op.MINIMUM, a["self"], a["other"])


_UNARY = {
    A.relu.default: Op.RELU, A.sigmoid.default: Op.SIGMOID, A.tanh.default: Op.TANH,
    A.hardswish.default: Op.HARDSWISH, A.hardsigmoid.default: Op.HARDSIGMOID,
    A.silu.default: Op.SILU, A.exp.default: Op.EXP, A.log.default: Op.LOG, A.neg.default: Op.NEG,
    A.abs.default: Op.ABS, A.sqrt.default: Op.SQRT, A.rsqrt.default: Op.RSQRT,
    A.reciprocal.default: Op.RECIPROCAL,
}


# aten.relu(x) => relu(x), aten.sigmoid(x) => sigmoid(x), ... (one IR op each, see _UNARY)
@converts(*_UNARY)
def unary(ctx: ImportContext, node: Node, a: Args) -> str:
    op = _UNARY[node.target]
    _, dtype = ctx.out_meta(node)
    return ctx.add(op, [ctx.cast(ctx.v(a["self"]), dtype)])


def _bound(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, Node):
        raise Unsupported("tensor-valued clamp bounds")
    return float(value)


def _clamp(ctx: ImportContext, node: Node, x: Any, lo: Any, hi: Any) -> str:
    bounds = {"min": _bound(lo, -math.inf), "max": _bound(hi, math.inf)}
    return ctx.add(Op.CLAMP, [ctx.v(x)], bounds)


# aten.clamp(x, lo, hi) => clamp(x, min=lo, max=hi)
@converts(A.clamp.default)
def clamp(ctx: ImportContext, node: Node, a: Args) -> str:
    return _clamp(ctx, node, a["self"], a["min"], a["max"])


# aten.clamp_min(x, lo) => clamp(x, min=lo); aten.clamp_max(x, hi) => clamp(x, max=hi)
@converts(A.clamp_min.default)
def clamp_min(ctx: ImportContext, node: Node, a: Args) -> str:
    return _clamp(ctx, node, a["self"], a["min"], None)


@converts(A.clamp_max.default)
def clamp_max(ctx: ImportContext, node: Node, a: Args) -> str:
    return _clamp(ctx, node, a["self"], None, a["max"])


# aten.clamp.Tensor(x, lo, hi) => minimum(maximum(x, lo), hi)
@converts(A.clamp.Tensor)
def clamp_tensor(ctx: ImportContext, node: Node, a: Args) -> str:
    _, dtype = ctx.out_meta(node)
    out = ctx.cast(ctx.v(a["self"]), dtype)
    if a["min"] is not None:
        out = ctx.add(Op.MAXIMUM, [out, ctx.operand(a["min"], dtype)])
    if a["max"] is not None:
        out = ctx.add(Op.MINIMUM, [out, ctx.operand(a["max"], dtype)])
    return out


# aten.hardtanh(x, 0, 6) => clamp(x, min=0, max=6)
@converts(A.hardtanh.default)
def hardtanh(ctx: ImportContext, node: Node, a: Args) -> str:
    return _clamp(ctx, node, a["self"], a["min_val"], a["max_val"])


# aten.gelu(x, approximate) => gelu(x, approximate)
@converts(A.gelu.default)
def gelu(ctx: ImportContext, node: Node, a: Args) -> str:
    return ctx.add(Op.GELU, [ctx.v(a["self"])], {"approximate": str(a["approximate"])})


# aten._to_copy(x, dtype) => cast(x, dtype) when the dtype changes, else nothing
@converts(A._to_copy.default, A.to)
def to_copy(ctx: ImportContext, node: Node, a: Args) -> str:
    _, dtype = ctx.out_meta(node)
    return ctx.cast(ctx.v(node.args[0]), dtype)


# aten.clone / alias / detach / lift_fresh_copy / contiguous(x) => x
@converts(A.clone.default, A.alias.default, A.detach.default, A.lift_fresh_copy.default,
          A.contiguous.default)
def identity(ctx: ImportContext, node: Node, a: Args) -> str:
    return ctx.v(node.args[0])


# aten.dropout(x, p, train=False) => x
@converts(A.dropout.default)
def dropout(ctx: ImportContext, node: Node, a: Args) -> str:
    if a["train"] and a["p"] > 0:
        raise Unsupported("dropout with train=True (call model.eval() / pass training=False)")
    return ctx.v(a["input"])


# aten.native_dropout(x, p, train=False) => (x, -)
@converts(A.native_dropout.default)
def native_dropout(ctx: ImportContext, node: Node, a: Args) -> tuple:
    if a["train"] and a["p"] > 0:
        raise Unsupported("dropout with train=True (call model.eval() / pass training=False)")
    return (ctx.v(a["input"]), None)
