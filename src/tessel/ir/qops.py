"""Specs of the integer ops: operands, attributes, type inference (registered into ops.SPECS).

Every integer op's semantics is a fixed chain of NPU instructions (docs/numerics.md,
docs/isa.md); all parameters (zero points, Q31 multipliers and shifts, clamp bounds, tables)
are on the node. Per-channel parameter vectors (bias, multiplier, shift) and tables are
constant operands. `dtype` is the output type; the result's QuantParams are set by the
lowering (inference leaves them out; the verifier compares shape and dtype).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.ops import (
    _CONV_ATTRS,
    _POOL_ATTRS,
    SPECS,
    InferError,
    Op,
    OpSpec,
    _binary,
    _conv2d,
    _linear,
    _matmul,
    _pool2d,
    _reduce,
    _softmax,
)
from tessel.ir.types import DType, TensorType

_I, _F, _INTS = AttrKind.INT, AttrKind.FLOAT, AttrKind.INTS
_INT_OUT = (DType.I8, DType.I16, DType.I32)


def _out(ts_type: TensorType, attrs: Mapping[str, Any]) -> TensorType:
    dtype = attrs["dtype"]
    if dtype not in _INT_OUT:
        raise InferError(f"integer op output dtype must be i8, i16 or i32, got {dtype.value}")
    lo, hi = dtype.bounds
    if not lo <= attrs["act_min"] <= attrs["act_max"] <= hi:
        raise InferError(f"act_min/act_max [{attrs['act_min']}, {attrs['act_max']}] outside "
                         f"{dtype.value}")
    return TensorType(ts_type.shape, dtype, ts_type.layout)


def _ints(ts: Sequence[TensorType], n: int) -> None:
    for i, t in enumerate(ts[:n]):
        if not t.dtype.is_int:
            raise InferError(f"operand {i} must be an integer tensor, got {t.dtype.value}")


def _per_channel(ts: Sequence[TensorType], first: int, channels: int) -> None:
    names = ("bias", "multiplier", "shift")
    for name, t in zip(names, ts[first:first + 3], strict=True):
        if t.shape != (channels,) or t.dtype is not DType.I32:
            raise InferError(f"{name} must be i32[{channels}], got {t.text()}")


def _qconv2d(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 2)
    out = _conv2d(ts[:2], attrs)
    _per_channel(ts, 2, ts[1].shape[0])
    return _out(out, attrs)


def _qlinear(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 2)
    out = _linear(ts[:2], attrs)
    _per_channel(ts, 2, ts[1].shape[0])
    return _out(out, attrs)


def _qmatmul(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 2)
    return _out(_matmul(ts, attrs), attrs)


def _qbinary(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 2)
    a, b = ts
    shape = _binary([a, b.with_shape(b.shape) if a.dtype == b.dtype else
                     TensorType(b.shape, a.dtype)], attrs)
    return _out(shape, attrs)


def _unary_int(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 1)
    return _out(ts[0], attrs)


def _lut(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, table = ts
    want = {DType.I8: ((256,), DType.I8), DType.I16: ((513,), DType.I16)}.get(x.dtype)
    if want is None:
        raise InferError(f"lut input must be i8 or i16, got {x.dtype.value}")
    if (table.shape, table.dtype) != want:
        raise InferError(f"lut table for {x.dtype.value} must be {want[1].value}[{want[0][0]}], "
                         f"got {table.text()}")
    return TensorType(x.shape, x.dtype, x.layout)


def _qavg_pool(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 1)
    return _pool2d(ts, attrs)


def _qmean(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 1)
    return _out(_reduce(ts, attrs), attrs)


def _qsoftmax(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 1)
    if ts[1].shape != (513,) or ts[1].dtype is not DType.I16:
        raise InferError(f"qsoftmax exp table must be i16[513], got {ts[1].text()}")
    axis_len = ts[0].shape[attrs["axis"] % max(ts[0].rank, 1)] if ts[0].rank else 1
    if attrs["axis_len"] != axis_len:
        raise InferError(f"qsoftmax axis_len {attrs['axis_len']} != axis extent {axis_len}")
    return _out(_softmax(ts[:1], attrs), attrs)


def _qlayer_norm(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _ints(ts, 1)
    n = attrs["n"]
    if tuple(attrs["normalized_shape"]) != (n,) or ts[0].shape[-1:] != (n,):
        raise InferError(f"qlayer_norm normalizes the last axis of {n} elements; got "
                         f"normalized_shape {list(attrs['normalized_shape'])}, input "
                         f"{list(ts[0].shape)}")
    if ts[1].shape != (n,) or ts[1].dtype is not DType.I16:
        raise InferError(f"qlayer_norm gamma must be i16[{n}], got {ts[1].text()}")
    if ts[2].shape != (n,) or ts[2].dtype is not DType.I32:
        raise InferError(f"qlayer_norm beta must be i32[{n}], got {ts[2].text()}")
    return _out(ts[0], attrs)


def _a(kind: AttrKind, default: Any = None) -> AttrSpec:
    return AttrSpec(kind, default)


_OUT = {"out_zp": _a(_I), "act_min": _a(_I), "act_max": _a(_I), "dtype": _a(AttrKind.DTYPE)}
_REQ = {"multiplier": _a(_I), "shift": _a(_I)}

SPECS[Op.QCONV2D] = OpSpec(("input", "weight", "bias", "multiplier", "shift"), _qconv2d,
                           {**_CONV_ATTRS, "in_zp": _a(_I), **_OUT})
SPECS[Op.QLINEAR] = OpSpec(("input", "weight", "bias", "multiplier", "shift"), _qlinear,
                           {"in_zp": _a(_I), **_OUT})
SPECS[Op.QMATMUL] = OpSpec(("lhs", "rhs"), _qmatmul,
                           {"a_zp": _a(_I), "b_zp": _a(_I), **_REQ, **_OUT})
_ELTWISE = {"a_zp": _a(_I), "b_zp": _a(_I), "left_shift": _a(_I, 0),
            "a_multiplier": _a(_I), "a_shift": _a(_I), "b_multiplier": _a(_I), "b_shift": _a(_I),
            "out_multiplier": _a(_I), "out_shift": _a(_I), **_OUT}
SPECS[Op.QADD] = OpSpec(("lhs", "rhs"), _qbinary, _ELTWISE)
SPECS[Op.QSUB] = OpSpec(("lhs", "rhs"), _qbinary, _ELTWISE)
SPECS[Op.QMUL] = OpSpec(("lhs", "rhs"), _qbinary, {"a_zp": _a(_I), "b_zp": _a(_I),
                                                   "out_multiplier": _a(_I),
                                                   "out_shift": _a(_I), **_OUT})
SPECS[Op.REQUANTIZE] = OpSpec(("x",), _unary_int, {"in_zp": _a(_I), **_REQ, **_OUT})
SPECS[Op.LUT] = OpSpec(("x", "table"), _lut)
SPECS[Op.QAVG_POOL2D] = OpSpec(("x",), _qavg_pool, {**_POOL_ATTRS, "act_min": _a(_I),
                                                    "act_max": _a(_I)})
SPECS[Op.QMEAN] = OpSpec(("x",), _qmean, {"axes": _a(_INTS), "keepdim": _a(AttrKind.BOOL, False),
                                          "in_zp": _a(_I), **_REQ, **_OUT})
# Softmax and layer norm: every step of their instruction chain has its parameters as named
# int attributes (`tessel.ops.softmax.SoftmaxPlan`, `tessel.ops.layer_norm.LayerNormPlan`;
# `*_dtype` attributes are ISA DType codes: 0 i8, 1 i16, 2 i32); `dtype` is the IR output type.
_SOFTMAX_PLAN = ("axis_len", "in_dtype", "in_zp", "sub_mult", "sub_shift", "sub_zp",
                 "recip_frac_bits", "mul_mult", "mul_shift", "out_dtype", "out_zp", "act_min",
                 "act_max")
SPECS[Op.QSOFTMAX] = OpSpec(("x", "exp_table"), _qsoftmax,
                            {"axis": _a(_I, -1), "dtype": _a(AttrKind.DTYPE),
                             **{k: _a(_I) for k in _SOFTMAX_PLAN}})
_LAYER_NORM_PLAN = ("n", "in_dtype", "in_zp", "mean_mult", "mean_shift", "sub_a_shift",
                    "sub_mult", "sub_shift", "d_dtype", "var_bias", "var_mult", "var_shift",
                    "rsqrt_frac_bits", "norm_mult", "norm_shift", "gamma_mult", "gamma_shift",
                    "out_mult", "out_shift", "out_dtype", "out_zp", "act_min", "act_max")
SPECS[Op.QLAYER_NORM] = OpSpec(("input", "weight", "bias"), _qlayer_norm,
                               {"normalized_shape": _a(_INTS), "dtype": _a(AttrKind.DTYPE),
                                **{k: _a(_I) for k in _LAYER_NORM_PLAN}})
