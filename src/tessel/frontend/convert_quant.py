"""Converters of pt2e's quantize / dequantize ops (``quantized_decomposed``) to IR ops.

A converted pt2e graph (``convert_pt2e``), exported again, holds activations as
``quantize_per_tensor -> dequantize_per_tensor`` pairs and weights / biases as integer constants
read through ``dequantize_per_channel``. They import as:

* ``quantize_per_tensor(x, s, zp, qmin, qmax, dtype)`` => ``quantize(x)`` (result type carries
  ``q(s, zp)``);
* ``dequantize_per_tensor(q, s, zp, ...)`` => ``dequantize(q)``;
* ``dequantize_per_channel(C, scales, zps, axis, ...)`` of a constant ``C`` =>
  ``mul(cast(C'), S)`` (``sub`` of the zero points first if any is non-zero), where ``C'`` is
  the integer constant whose type carries the per-channel ``QuantParams`` and ``S`` the scales
  shaped to broadcast along ``axis``: the float reference computes the dequantised weight,
  and the QDQ lowering (``tessel.quant.lower``) reads the integer weight back from ``C'``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed ops)
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, converts, ir_dtype
from tessel.ir import DType, Op, QuantParams

QD = torch.ops.quantized_decomposed
Node = torch.fx.Node
Args = dict[str, Any]


def _scalar(value: Any, what: str) -> Any:
    if isinstance(value, Node):
        raise Unsupported(f"{what} is a tensor; only Python-number quantisation parameters import")
    return value


def _const_array(ctx: ImportContext, name: str, what: str) -> np.ndarray:
    value = ctx.builder.build([]).constant_value(name)
    if value is None:
        raise Unsupported(f"{what} of dequantize_per_channel is not a constant")
    return np.asarray(value)


# quantized_decomposed.quantize_per_tensor(x, scale, zp, qmin, qmax, dtype) => quantize(x)
@converts(QD.quantize_per_tensor.default)
def quantize_per_tensor(ctx: ImportContext, node: Node, a: Args) -> str:
    args = list(node.args)
    scale, zp = _scalar(args[1], "scale"), _scalar(args[2], "zero point")
    return ctx.add(Op.QUANTIZE, [ctx.v(args[0])], {
        "scale": float(scale), "zero_point": int(zp), "qmin": int(args[3]),
        "qmax": int(args[4]), "dtype": ir_dtype(args[5])})


# quantized_decomposed.dequantize_per_tensor(q, scale, zp, qmin, qmax, dtype) => dequantize(q)
@converts(QD.dequantize_per_tensor.default)
def dequantize_per_tensor(ctx: ImportContext, node: Node, a: Args) -> str:
    args = list(node.args)
    scale, zp = _scalar(args[1], "scale"), _scalar(args[2], "zero point")
    x = ctx.v(args[0])
    t = ctx.type(x)
    if t.quant is None:  # an integer constant: give its type the parameters it is read with
        value = ctx.builder.build([]).constant_value(x)
        if value is not None:
            x = ctx.quantized_constant(np.asarray(value), QuantParams((float(scale),), (int(zp),)))
    return ctx.add(Op.DEQUANTIZE, [x], {"scale": float(scale), "zero_point": int(zp)})


# quantized_decomposed.dequantize_per_channel(C, scales, zps, axis, ...) of a constant C
#   => mul(cast(C {per-channel quant}, f32), scales broadcast along axis)
@converts(QD.dequantize_per_channel.default)
def dequantize_per_channel(ctx: ImportContext, node: Node, a: Args) -> str:
    args = list(node.args)
    q = _const_array(ctx, ctx.v(args[0]), "the quantised tensor")
    scales = _const_array(ctx, ctx.v(args[1]), "scales").astype(np.float64).reshape(-1)
    zps = (_const_array(ctx, ctx.v(args[2]), "zero points").astype(np.int64).reshape(-1)
           if isinstance(args[2], Node) else np.zeros_like(scales, dtype=np.int64))
    axis = int(args[3]) % max(q.ndim, 1)
    if q.ndim == 0 or q.shape[axis] != scales.size:
        raise Unsupported(f"dequantize_per_channel: {scales.size} scales for shape {list(q.shape)}")
    return ctx.dequantized_constant(q, scales, zps, axis, _narrowed(q, args[4:6]))


def _narrowed(q: np.ndarray, bounds: list[Any]) -> DType | None:
    """I4 when an int8 tensor is declared within int4's range (quant_min / quant_max), else
    None (its own type)."""
    lo, hi = DType.I4.bounds
    if q.dtype == np.int8 and len(bounds) == 2 and all(isinstance(b, int) for b in bounds) \
            and lo <= bounds[0] and bounds[1] <= hi:
        return DType.I4
    return None
