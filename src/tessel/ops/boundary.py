"""Constants, the quantisation boundaries (quantize / dequantize, PyTorch's semantics: round half
to even, then clamp) and host ops (an ATen op the IR cannot express, run through torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Node
from tessel.ir.ops import InferError, Op, OpSpec, require
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import DType, QuantParams, TensorType
from tessel.ops.base import LayoutRule, OpDef, Trait, lazy_torch, register
from tessel.ops.movement import torch_dtype
from tessel.ops.quantise import QOut, deq, requantize


def _constant(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    value = attrs["value"]
    return TensorType(value.shape, value.dtype)


def _quantize(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require(ts[0].dtype is DType.F32, f"quantize takes f32, got {ts[0].dtype.value}")
    dtype = attrs["dtype"]
    require(dtype in (DType.I8, DType.I16, DType.I32, DType.U8), f"cannot quantize to {dtype.value}")
    lo, hi = dtype.bounds
    require(lo <= attrs["qmin"] <= attrs["qmax"] <= hi,
            f"qmin/qmax [{attrs['qmin']}, {attrs['qmax']}] outside {dtype.value}")
    quant = QuantParams((attrs["scale"],), (attrs["zero_point"],))
    return TensorType(ts[0].shape, dtype, ts[0].layout, quant)


def _dequantize(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require(ts[0].dtype.is_int, f"dequantize takes an integer tensor, got {ts[0].dtype.value}")
    return TensorType(ts[0].shape, DType.F32, ts[0].layout)


def _host(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    raise InferError("host op result types are declared, not inferred")


def _quantize_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """PyTorch's quantize_per_tensor: round(x / scale) half to even, + zero point, clamp.
    NaN (inputs run with allow_nonfinite) quantises to the zero point, the code of 0.0: a cast
    of NaN to an integer is undefined, and machines differ. A quotient past float32 (a mask of
    float32's minimum over a scale below 1) is +-inf, clamped like any other."""
    with np.errstate(over="ignore"):
        q = np.rint(xs[0].astype(np.float32) * np.float32(1.0 / a["scale"])) + a["zero_point"]
    nan = np.isnan(q)
    if nan.any():
        q[nan] = a["zero_point"]
    return np.clip(q, a["qmin"], a["qmax"]).astype(a["dtype"].numpy)


def _dequantize_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    diff = xs[0].astype(np.int32) - np.int32(a["zero_point"])
    return (diff.astype(np.float32) * np.float32(a["scale"])).astype(np.float32)


def _quantize_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    torch = lazy_torch()
    q = torch.round(xs[0] * float(np.float32(1.0 / a["scale"]))) + a["zero_point"]
    q = torch.where(torch.isnan(q), float(a["zero_point"]), q)
    return torch.clamp(q, a["qmin"], a["qmax"]).to(torch_dtype(a["dtype"]))


def _dequantize_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    torch = lazy_torch()
    return (xs[0].to(torch.int32) - a["zero_point"]).to(torch.float32) * float(
        np.float32(a["scale"]))


# q(dq(x))  =>  x, or requantize(x) when the parameters differ
def lower_requantize(rw: Rewriter, q: Node) -> str | None:
    x = deq(rw, q.inputs[0])
    if x is None:
        return None
    return requantize(rw, x, QOut.of(q), hint=f"{q.name}_rq", loc=q.loc)


_BOUNDARY = frozenset({Trait.BOUNDARY})

register(
    OpDef(Op.CONSTANT, OpSpec((), _constant, {"value": AttrSpec(AttrKind.TENSOR)}),
          kernel=lambda a, xs: a["value"].array, layout=LayoutRule.CONSTANT),
    OpDef(Op.QUANTIZE, OpSpec(("x",), _quantize, {
        "scale": AttrSpec(AttrKind.FLOAT), "zero_point": AttrSpec(AttrKind.INT),
        "qmin": AttrSpec(AttrKind.INT), "qmax": AttrSpec(AttrKind.INT),
        "dtype": AttrSpec(AttrKind.DTYPE)}),
          kernel=_quantize_kernel, torch=_quantize_torch, layout=LayoutRule.FOLLOW,
          traits=_BOUNDARY),
    # dequantize is not a follower in the layout pass: a value leaves the integer domain in its
    # logical order, so the transpose back from NHWC runs on integer data (on the NPU)
    OpDef(Op.DEQUANTIZE, OpSpec(("x",), _dequantize, {"scale": AttrSpec(AttrKind.FLOAT),
                                                      "zero_point": AttrSpec(AttrKind.INT)}),
          kernel=_dequantize_kernel, torch=_dequantize_torch, lower=(lower_requantize,),
          traits=_BOUNDARY),
    OpDef(Op.HOST, OpSpec(("inputs",), _host, {"target": AttrSpec(AttrKind.STR),
                                               "args": AttrSpec(AttrKind.STR, "")},
                          variadic=True, optional=1)),
)


def is_host(node: Node) -> bool:
    """An ATen op the IR cannot express (run through torch on the host)."""
    return node.is_host
