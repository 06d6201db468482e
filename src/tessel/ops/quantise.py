"""Shared helpers of the QDQ -> integer lowering rules (each op's `lower`, run by
`tessel.quant.lower`), and of the integer ops' IR specs.

A rule looks at one `quantize` node of the imported QDQ graph and the float op(s) in front of
it; the helpers here read what the rule needs from the graph (integer values behind a
`dequantize`, integer weights behind the importer's per-channel dequantisation, the output's
quantisation) and emit integer nodes whose result types carry their QuantParams.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.builder import canonical_attrs
from tessel.ir.graph import UNKNOWN_LOC, Node, SourceLoc
from tessel.ir.ops import InferError, Op
from tessel.ir.rewriting import Rewriter, infer_type
from tessel.ir.types import DType, QuantParams, TensorType
from tessel.isa.fixedpoint import Rounding, quantize_multiplier, quantize_multipliers

ONE_Q31 = (1 << 30, 1)  # (q31, shift) that is exactly 1.0: MBQM(x, 2^30, 1) == x
INT_DTYPES = (DType.I8, DType.I16, DType.I32)


@dataclass(frozen=True)
class IntVal:
    """An integer value with per-tensor affine parameters: real = scale * (q - zp)."""

    name: str
    scale: float
    zp: int
    dtype: DType

    @property
    def quant(self) -> QuantParams:
        return QuantParams((self.scale,), (self.zp,))


@dataclass(frozen=True)
class QOut:
    """What a `quantize` node asks for: scale, zero point, clamp range and integer type."""

    scale: float
    zp: int
    qmin: int
    qmax: int
    dtype: DType

    @classmethod
    def of(cls, q: Node) -> QOut:
        a = q.attr_map
        return cls(float(a["scale"]), int(a["zero_point"]), int(a["qmin"]), int(a["qmax"]),
                   a["dtype"])

    @property
    def quant(self) -> QuantParams:
        return QuantParams((self.scale,), (self.zp,))

    def act_range(self, lo: float = -math.inf, hi: float = math.inf) -> tuple[int, int]:
        """[act_min, act_max]: qmin / qmax narrowed by a fused clamp of the real value."""
        amin, amax = self.qmin, self.qmax
        if math.isfinite(lo):
            amin = max(amin, min(amax, self.zp + int(np.rint(lo / self.scale))))
        if math.isfinite(hi):
            amax = min(amax, max(amin, self.zp + int(np.rint(hi / self.scale))))
        return amin, amax

    def out_attrs(self, lo: float = -math.inf, hi: float = math.inf) -> dict[str, Any]:
        amin, amax = self.act_range(lo, hi)
        return {"out_zp": self.zp, "act_min": amin, "act_max": amax, "dtype": self.dtype}


def deq(rw: Rewriter, name: str) -> IntVal | None:
    """The integer value that float value `name` dequantises, or None (a float value)."""
    node = rw.producer(name)
    if node is None or node.op is not Op.DEQUANTIZE:
        return None
    t = rw.type_of(node.inputs[0])
    if t.dtype not in INT_DTYPES or (t.quant is not None and t.quant.per_channel):
        return None
    return IntVal(node.inputs[0], float(node.attr("scale")), int(node.attr("zero_point")), t.dtype)


def int_weight(rw: Rewriter, name: str) -> tuple[str, np.ndarray, QuantParams] | None:
    """(constant name, integer array, QuantParams) of a weight / bias the importer wrote as
    `mul(cast(C), scales)` (per channel) or `dequantize(C)` (per tensor); else None."""
    node = rw.producer(name)
    if node is None:
        return None
    if node.op is Op.DEQUANTIZE:
        src = node.inputs[0]
        arr = rw.const(src)
        if arr is None:
            return None
        return src, arr, QuantParams((float(node.attr("scale")),), (int(node.attr("zero_point")),))
    if node.op is not Op.MUL:
        return None
    cast = rw.producer_op(node.inputs[0], Op.CAST)
    if cast is None:
        return None
    src = cast.inputs[0]
    arr, quant = rw.const(src), rw.type_of(src).quant
    if arr is None or quant is None or not quant.per_channel:
        return None
    return src, arr, quant


def channel_scales(quant: QuantParams, channels: int) -> np.ndarray:
    """Per-channel scales (float64), a per-tensor scale repeated."""
    scales = np.asarray(quant.scale, dtype=np.float64)
    return np.full(channels, scales[0]) if scales.size == 1 else scales


def fused_act(rw: Rewriter, name: str) -> tuple[str, float, float]:
    """(inner value, lo, hi): looks through one relu / clamp in front of a quantize."""
    node = rw.producer(name)
    if node is not None and node.op is Op.RELU:
        return node.inputs[0], 0.0, math.inf
    if node is not None and node.op is Op.CLAMP:
        return node.inputs[0], float(node.attr("min")), float(node.attr("max"))
    return name, -math.inf, math.inf


def multiplier(real: float) -> tuple[int, int]:
    """(q31, shift) of a real multiplier (fixedpoint.quantize_multiplier)."""
    return quantize_multiplier(float(real))


def multiplier_vectors(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q31, shift = quantize_multipliers(np.asarray(reals, dtype=np.float64))
    return q31.astype(np.int32), shift.astype(np.int32)


def emit(rw: Rewriter, op: Op, inputs: Sequence[str], attrs: Mapping[str, Any],
         quant: QuantParams | None, *, hint: str, loc: SourceLoc = UNKNOWN_LOC) -> str:
    """Emit an integer op; its result type is the inferred one plus `quant`."""
    t = infer_type(op, [rw.type_of(i) for i in inputs], canonical_attrs(op, attrs))
    type_ = TensorType(t.shape, t.dtype, t.layout, quant)
    return rw.add(op, inputs, attrs, hint=hint, loc=loc, type_=type_)


def requantize(rw: Rewriter, x: IntVal, out: QOut, *, hint: str, loc: SourceLoc = UNKNOWN_LOC,
               lo: float = -math.inf, hi: float = math.inf) -> str:
    """x re-expressed with `out`'s parameters (and clamp); x itself if nothing changes."""
    amin, amax = out.act_range(lo, hi)
    same = (x.dtype is out.dtype and math.isclose(x.scale, out.scale, rel_tol=1e-9)
            and x.zp == out.zp and (amin, amax) == x.dtype.bounds)
    if same:
        return x.name
    q31, shift = ONE_Q31 if math.isclose(x.scale, out.scale, rel_tol=1e-9) else multiplier(
        x.scale / out.scale)
    attrs = {"in_zp": x.zp, "multiplier": q31, "shift": shift, "out_zp": out.zp,
             "act_min": amin, "act_max": amax, "dtype": out.dtype}
    return emit(rw, Op.REQUANTIZE, [x.name], attrs, out.quant, hint=hint, loc=loc)


def quantize_constant(rw: Rewriter, name: str, dtype: DType = DType.I8) -> IntVal | None:
    """A float constant as a symmetric per-tensor integer constant (scale max|c| / qmax)."""
    arr = rw.const(name)
    if arr is None or not rw.type_of(name).dtype.is_float:
        return None
    arr = np.asarray(arr, dtype=np.float64)
    qmax = dtype.bounds[1]
    peak = float(np.max(np.abs(arr))) if arr.size else 0.0
    scale = peak / qmax if peak > 0 and math.isfinite(peak) else 1.0
    q = np.clip(np.rint(arr / scale), -qmax, qmax).astype(dtype.numpy)
    quant = QuantParams((scale,), (0,))
    type_ = TensorType(tuple(q.shape), dtype, quant=quant)
    cname = rw.constant(q, hint=f"{name}_q", type_=type_)
    return IntVal(cname, scale, 0, dtype)


def int_operand(rw: Rewriter, name: str, dtype: DType = DType.I8) -> IntVal | None:
    """`name` as an integer value: dequantised, or a quantised float constant."""
    return deq(rw, name) or quantize_constant(rw, name, dtype)


# ---------------------------------------------------------------- MAC ops (conv, linear)


def mac_bias(rw: Rewriter, name: str | None, acc_scales: np.ndarray,
             dtype: DType = DType.I32) -> np.ndarray | None:
    """Bias at scale s_in * s_w[c], int32 (an int8 input) or int64 (`dtype` I64: an int16
    input's wide accumulator): pt2e's int32 bias (rescaled if its scale differs), a float
    constant quantised, zeros if absent; None if the bias is a runtime value."""
    np_type = dtype.numpy
    bound = 2**31 if dtype is DType.I32 else 2**47  # an int64 bias is added to a 48-bit sum
    if name is None:
        return np.zeros(acc_scales.size, np_type)
    w = int_weight(rw, name)
    if w is not None:
        _, arr, quant = w
        real = (arr.astype(np.float64) - np.asarray(quant.zero_point)) * channel_scales(
            quant, acc_scales.size)
        if w[2].zero_point == (0,) * len(w[2].zero_point) and np.allclose(
                channel_scales(quant, acc_scales.size), acc_scales, rtol=1e-6, atol=0):
            return arr.astype(np_type)
    else:
        real = rw.const(name)
        if real is None:
            return None
        real = np.asarray(real, np.float64)
    return np.clip(np.rint(real / acc_scales), -bound, bound - 1).astype(np_type)


def mac_operands(rw: Rewriter, node: Node, x: IntVal | None = None,
                 w: tuple[str, np.ndarray, object] | None = None
                 ) -> tuple[IntVal, str, np.ndarray, np.ndarray] | None:
    """(int8 input, int8 weight constant, per-channel weight scales, int32 bias) or None; an
    int16 input (zero point 0) comes with an int64 bias (the wide MAC path, docs/numerics.md);
    `x` / `w` replace the node's own first two operands when a rule has looked through them."""
    x = x if x is not None else deq(rw, node.inputs[0])
    w = w if w is not None else int_weight(rw, node.inputs[1])
    if x is None or w is None:
        return None
    if x.dtype is not DType.I8 and not (x.dtype is DType.I16 and x.zp == 0):
        return None
    wname, warr, wquant = w
    if warr.dtype != np.int8 or any(wquant.zero_point):
        return None
    out_channels = warr.shape[0]
    w_scales = channel_scales(wquant, out_channels)
    bias = mac_bias(rw, node.inputs[2] if len(node.inputs) > 2 else None, x.scale * w_scales,
                    DType.I64 if x.dtype is DType.I16 else DType.I32)
    if bias is None:
        return None
    return x, wname, w_scales, bias


def requant_params(rw: Rewriter, hint: str, x: IntVal, w_scales: np.ndarray, bias: np.ndarray,
                    out: QOut) -> list[str]:
    """Constant operands bias, multiplier, shift of a per-channel requantisation."""
    q31, shift = multiplier_vectors(x.scale * w_scales / out.scale)
    return [rw.constant(bias, hint=f"{hint}_bias"), rw.constant(q31, hint=f"{hint}_mult"),
            rw.constant(shift, hint=f"{hint}_shift")]


# ---------------------------------------------------------------- integer ops' IR specs

INT_OUT_DTYPES = (DType.I8, DType.I16, DType.I32)
OUT_ATTRS = {"out_zp": AttrSpec(AttrKind.INT), "act_min": AttrSpec(AttrKind.INT),
             "act_max": AttrSpec(AttrKind.INT), "dtype": AttrSpec(AttrKind.DTYPE)}
OUT_FIELDS = frozenset({"out_zp", "act_min", "act_max"})  # the output's zero point and clamp
REQUANT_ATTRS = {"multiplier": AttrSpec(AttrKind.INT), "shift": AttrSpec(AttrKind.INT)}
# how the requantisation rounds (a Rounding value); absent: DOUBLE (TFLite's rule)
ROUNDING_ATTR = {"rounding": AttrSpec(AttrKind.INT, optional=True)}


def rounding_of(attrs: Mapping[str, Any]) -> Rounding:
    """The node's requantisation rounding (``rounding`` attribute, DOUBLE when absent)."""
    return Rounding(attrs.get("rounding") or Rounding.DOUBLE)


def int_result(t: TensorType, attrs: Mapping[str, Any]) -> TensorType:
    """An integer op's result: `t`'s shape and layout, the `dtype` attribute, whose range holds
    [act_min, act_max]. The QuantParams are set by the lowering (the verifier compares shape
    and dtype)."""
    dtype = attrs["dtype"]
    if dtype not in INT_OUT_DTYPES:
        raise InferError(f"integer op output dtype must be i8, i16 or i32, got {dtype.value}")
    lo, hi = dtype.bounds
    if not lo <= attrs["act_min"] <= attrs["act_max"] <= hi:
        raise InferError(f"act_min/act_max [{attrs['act_min']}, {attrs['act_max']}] outside "
                         f"{dtype.value}")
    return TensorType(t.shape, dtype, t.layout)


def require_int(ts: Sequence[TensorType], n: int) -> None:
    """The first `n` operands are integer tensors."""
    for i, t in enumerate(ts[:n]):
        if not t.dtype.is_int:
            raise InferError(f"operand {i} must be an integer tensor, got {t.dtype.value}")


def require_per_channel(ts: Sequence[TensorType], first: int, channels: int,
                        bias: DType = DType.I32) -> None:
    """Operands first.. first+2 are the per-channel bias (``bias``: i32, or i64 for a wide
    accumulator), multiplier and shift (i32[channels])."""
    names = ("bias", "multiplier", "shift")
    wide = ts[0].dtype is DType.I16
    for name, t in zip(names, ts[first:first + 3], strict=True):
        want = bias if name == "bias" else DType.I32
        if t.shape != (channels,) or t.dtype is not want:
            raise InferError(f"{name} must be {want.value}[{channels}], got {t.text()}"
                             + (" (an int16-input MAC)" if wide else ""))


def mac_bias_dtype(x: TensorType) -> DType:
    """A MAC's bias type: i64 beside an int16 activation input (the wide accumulator), else
    i32."""
    return DType.I64 if x.dtype is DType.I16 else DType.I32
