"""Element-wise functions of one tensor: relu, clamp, the LUT activations (sigmoid, tanh, gelu,
hardswish, hardsigmoid, silu, exp), log, neg, abs, sqrt, rsqrt, reciprocal; and the integer
ops they lower to: `lut` (a 256-entry int8 or 513-entry int16 table, docs/numerics.md) and
`requantize` (new quantisation parameters and clamp; relu and clamp become one).

The NPU runs lut and requantize on the vector engine (tessel.ops.eltwise_emit); log, neg, abs,
sqrt, rsqrt and reciprocal have no integer form and stay on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Node
from tessel.ir.kernels import erf, expit
from tessel.ir.ops import InferError, Op, OpSpec, same_type
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import DType, TensorType
from tessel.isa.fields import EltOp, LutMode
from tessel.ops import eltwise_emit, intops, lut
from tessel.ops.base import (
    FloatFn,
    LayoutRule,
    Npu,
    OpDef,
    Trait,
    lazy_functional,
    lazy_torch,
    register,
)
from tessel.ops.quantise import (
    OUT_ATTRS,
    OUT_FIELDS,
    REQUANT_ATTRS,
    QOut,
    deq,
    emit,
    fused_act,
    int_result,
    requantize,
    require_int,
)

Fn = Callable[[np.ndarray], np.ndarray]


def _unary(fn: Fn) -> Callable[[Mapping[str, Any], list[np.ndarray]], np.ndarray]:
    return lambda a, xs: np.asarray(fn(xs[0])).astype(xs[0].dtype)


def _torch(name: str) -> Callable[[Mapping[str, Any], list[Any]], Any]:
    return lambda a, xs: getattr(lazy_torch(), name)(xs[0])


def _functional(name: str) -> Callable[[Mapping[str, Any], list[Any]], Any]:
    return lambda a, xs: getattr(lazy_functional(), name)(xs[0])


def _clamp_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return np.clip(xs[0], a["min"], a["max"]).astype(xs[0].dtype)


def _clamp_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    import math

    lo, hi = a["min"], a["max"]
    if math.isfinite(lo) and math.isfinite(hi):
        return lazy_functional().hardtanh(xs[0], lo, hi)
    return lazy_torch().clamp(xs[0], lo if math.isfinite(lo) else None,
                              hi if math.isfinite(hi) else None)


def _gelu_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0].astype(np.float64)
    if a["approximate"] == "tanh":
        y = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    return y.astype(xs[0].dtype)


# ---------------------------------------------------------------- integer ops


def _lut_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, table = ts
    want = {DType.I8: ((LutMode.I8_256.entries,), DType.I8),
            DType.I16: ((LutMode.I16_513.entries,), DType.I16)}.get(x.dtype)
    if want is None:
        raise InferError(f"lut input must be i8 or i16, got {x.dtype.value}")
    if (table.shape, table.dtype) != want:
        raise InferError(f"lut table for {x.dtype.value} must be {want[1].value}[{want[0][0]}], "
                         f"got {table.text()}")
    return TensorType(x.shape, x.dtype, x.layout)


def _requantize_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    return int_result(ts[0], attrs)


def _lut_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """LUT I8_256 (int8) or I16_513 (int16, TFLite interpolation)."""
    x, table = xs
    return intops.lut_i8(x, table) if x.dtype == np.int8 else intops.lut_i16(x, table)


def _requantize_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE ADD with b multiplier 0: clamp(MBQM(x - in_zp, multiplier, shift) + out_zp)."""
    return intops.eltwise(EltOp.ADD, xs[0], np.zeros((), np.int32), a_zp=a["in_zp"],
                          b_zp=0, left_shift=0, a_mult=a["multiplier"], a_shift=a["shift"],
                          b_mult=0, b_shift=0, out_mult=1 << 30, out_shift=1,
                          out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"],
                          out_dtype=a["dtype"].numpy)


# ---------------------------------------------------------------- QDQ -> integer


# q(f(dq(x))) for f = sigmoid, tanh, hardswish, hardsigmoid, silu, exp, gelu  =>  lut(x, table)
def lower_lut(rw: Rewriter, q: Node) -> str | None:
    from tessel.ops.registry import definition

    node = rw.producer(q.inputs[0])
    table_of = definition(node.op).lut if node is not None else None
    if table_of is None:
        return None
    fn = table_of(node)
    x, out = deq(rw, node.inputs[0]), QOut.of(q)
    if x is None or x.dtype is not out.dtype or x.dtype not in (DType.I8, DType.I16):
        return None  # a LUT maps int8 -> int8 or int16 -> int16
    given = node.attr("table")
    if given is not None and x.dtype is DType.I8 and (out.qmin, out.qmax) == (-128, 127):
        table = given.array  # the source framework's own int8 table (docs/frontend.md)
    elif x.dtype is DType.I8:
        table = lut.make_lut_i8(fn, x.scale, x.zp, out.scale, out.zp, out.qmin, out.qmax)
    else:
        table = lut.make_lut_i16(fn, x.scale, x.zp, out.scale, out.zp)
    t = rw.constant(table, hint=f"{node.name}_table")
    return emit(rw, Op.LUT, [x.name, t], {}, out.quant, hint=f"{node.name}_q", loc=node.loc)


# q(relu | clamp(dq(x)))  =>  requantize(x) {multiplier 1.0 or s_x / s_out, clamp}
def lower_relu_clamp(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    if inner == q.inputs[0]:
        return None
    x = deq(rw, inner)
    if x is None:
        return None
    node = rw.producer(q.inputs[0])
    return requantize(rw, x, QOut.of(q), hint=f"{node.name}_q", loc=node.loc, lo=lo, hi=hi)


def _table(fn: FloatFn) -> Callable[[Node], FloatFn]:
    return lambda node: fn


def _gelu_table(node: Node) -> FloatFn:
    return lut.gelu_tanh if node.attr("approximate") == "tanh" else lut.gelu_erf


# ---------------------------------------------------------------- the definitions

_X = ("x",)
_INT_POINTWISE = frozenset({Trait.INTEGER, Trait.POINTWISE})


def _float(op: Op, fn: Fn, torch: Callable[[Mapping[str, Any], list[Any]], Any],
           lut_fn: FloatFn | None = None, **spec: Any) -> OpDef:
    """A float element-wise op: its kernel, torch kernel, and the LUT it lowers to (if any)."""
    return OpDef(op, OpSpec(_X, same_type, spec), kernel=_unary(fn), torch=torch,
                 layout=LayoutRule.FOLLOW, lower=(lower_lut,) if lut_fn else (),
                 lut=_table(lut_fn) if lut_fn else None)


register(
    OpDef(Op.RELU, OpSpec(_X, same_type), kernel=_unary(lambda x: np.maximum(x, 0)),
          torch=_functional("relu"), layout=LayoutRule.FOLLOW, lower=(lower_relu_clamp,),
          look_through=True),
    OpDef(Op.CLAMP, OpSpec(_X, same_type, {"min": AttrSpec(AttrKind.FLOAT, float("-inf")),
                                           "max": AttrSpec(AttrKind.FLOAT, float("inf"))}),
          kernel=_clamp_kernel, torch=_clamp_torch, layout=LayoutRule.FOLLOW,
          lower=(lower_relu_clamp,), look_through=True),
    _float(Op.SIGMOID, expit, _torch("sigmoid"), lut.sigmoid),
    _float(Op.TANH, np.tanh, _torch("tanh"), lut.tanh),
    OpDef(Op.GELU, OpSpec(_X, same_type, {"approximate": AttrSpec(AttrKind.STR, "none")}),
          kernel=_gelu_kernel,
          torch=lambda a, xs: lazy_functional().gelu(xs[0], approximate=a["approximate"]),
          layout=LayoutRule.FOLLOW, lower=(lower_lut,), lut=_gelu_table),
    # table: an imported model's int8 LUT of its framework's integer kernel (tessel.ops.litert)
    _float(Op.HARDSWISH, lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
           _functional("hardswish"), lut.hardswish,
           table=AttrSpec(AttrKind.TENSOR, optional=True)),
    _float(Op.HARDSIGMOID, lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
           _functional("hardsigmoid"), lut.hardsigmoid),
    _float(Op.SILU, lambda x: x * expit(x), _functional("silu"), lut.silu),
    _float(Op.EXP, np.exp, _torch("exp"), lut.exp),
    _float(Op.LOG, np.log, _torch("log")),
    _float(Op.NEG, np.negative, _torch("neg"), lut.neg),
    _float(Op.ABS, np.abs, _torch("abs")),
    _float(Op.SQRT, np.sqrt, _torch("sqrt")),
    _float(Op.RSQRT, lambda x: 1.0 / np.sqrt(x), _torch("rsqrt"), lut.rsqrt),
    _float(Op.RECIPROCAL, lambda x: 1.0 / x, _torch("reciprocal")),
    OpDef(Op.LUT, OpSpec(("x", "table"), _lut_type), golden=_lut_golden,
          layout=LayoutRule.FOLLOW_FIRST,
          npu=Npu(eltwise_emit, matrix=False, values_matter=True), traits=_INT_POINTWISE),
    OpDef(Op.REQUANTIZE, OpSpec(_X, _requantize_type, {"in_zp": AttrSpec(AttrKind.INT),
                                                       **REQUANT_ATTRS, **OUT_ATTRS}),
          golden=_requantize_golden, layout=LayoutRule.FOLLOW,
          npu=Npu(eltwise_emit, matrix=False,
                  quant_free=frozenset({"in_zp", "multiplier", "shift"}) | OUT_FIELDS),
          traits=_INT_POINTWISE),
)
