"""Integer softmax: the parameters of its NPU instruction chain, and its bit-exact golden value.

The chain (per row along ``axis``; docs/numerics.md "Integer softmax, layer norm and LUTs"
gives the formulas and bounds):

1. ``m = REDUCE MAX(x)``                                   (in dtype)
2. ``d = ELTWISE SUB(x, m)`` -> int16 exponent argument   (``d = 32767 + (x - m) * s_in/s_d``)
3. ``e = LUT I16_513(d, exp_table)``                      (``e ~ K exp((d - 32767) s_d)``)
4. ``s = REDUCE SUM(e)``                                   (int32, never saturates)
5. ``r = UNARY RECIP(s, frac_bits=30)``                    (``r = round(2^30 / s)``)
6. ``y = ELTWISE MUL(e, r)`` -> out dtype                 (``y = e r 2^-22 - 128`` / ``e r 2^-15``)

Public API (stable):

* ``plan_softmax(in_scale, in_zp, in_dtype, out_dtype, axis_len) -> SoftmaxPlan``;
* ``softmax_int(x, plan, axis=-1) -> np.ndarray`` (only :mod:`tessel.ops.intops` calls);
  ``softmax_steps(x, plan, axis=-1) -> dict`` returns every intermediate (``m d e s r y``);
* ``SoftmaxPlan.to_attrs() -> dict[str, int]`` and ``SoftmaxPlan.from_attrs(attrs, exp_table)``;
  ``to_steps()`` / ``from_steps(steps, exp_table)`` give the same values as a flat int tuple in
  ``SoftmaxPlan.attr_names()`` order (the IR's ``steps`` attribute);
* ``output_qparams(out_dtype) -> (scale, zero_point)``: the fixed output quantisation,
  1/256 and -128 for int8, 1/32768 and 0 for int16.

Attribute names (all ints; dtypes are ``tessel.isa.DType`` values): ``axis_len``, ``in_dtype``,
``in_zp``, ``sub_mult`` / ``sub_shift`` / ``sub_zp`` (step 2's output multiplier, shift and zero
point), ``recip_frac_bits`` (step 5), ``mul_mult`` / ``mul_shift`` (step 6's output multiplier),
``out_dtype``, ``out_zp``, ``act_min``, ``act_max``. The exp table (int16[513]) is a constant
operand. Fixed parameters (not attributes): step 2 has ``left_shift = 0``, ``a_zp = b_zp =
in_zp`` and both input multipliers ``(2^30, 1)`` (exactly 1.0), int16 output clamped to int16;
step 4 ``in_zp = 0``; step 6 ``a_zp = b_zp = 0``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from tessel.errors import TesselConfigError
from tessel.isa.fields import DType, EltOp, ReduceOp, UnaryOp
from tessel.isa.fixedpoint import INT32_MAX, quantize_multiplier
from tessel.isa.limits import MAX_EXTENT
from tessel.ops import intops
from tessel.ops.lut import I16_ENTRIES, make_lut_i16

EXP_RANGE = 12.0  # exponent arguments kept: [-12, 0]; 32767 exp(-11.1) < 0.5 rounds to 0
D_ZP = 32767  # the int16 exponent argument d = 32767 means x == max(x)
RECIP_FRAC_BITS = 30
ONE_MULT, ONE_SHIFT = 1 << 30, 1  # the multiplier (2^30, 1) is exactly 1.0
_OUT = {DType.I8: (1.0 / 256.0, -128, 8), DType.I16: (1.0 / 32768.0, 0, 15)}


class PlanAttrs:
    """Mixin: a frozen dataclass plan <-> named int attributes (array fields excluded)."""

    ARRAYS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def attr_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in cls.ARRAYS)

    def to_attrs(self) -> dict[str, int]:
        return {n: int(getattr(self, n)) for n in self.attr_names()}

    def to_steps(self) -> tuple[int, ...]:
        return tuple(self.to_attrs().values())

    @classmethod
    def _build(cls, attrs: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Any:
        missing = [n for n in cls.attr_names() if n not in attrs]
        if missing:
            raise TesselConfigError(f"{cls.__name__}: missing attributes {missing}")
        kw: dict[str, Any] = {n: int(attrs[n]) for n in cls.attr_names()}
        for n in cls.attr_names():
            if n.endswith("dtype"):
                kw[n] = DType(kw[n])
        return cls(**kw, **arrays)

    @classmethod
    def _from_steps(cls, steps: Sequence[int], arrays: Mapping[str, np.ndarray]) -> Any:
        names = cls.attr_names()
        if len(steps) != len(names):
            raise TesselConfigError(f"{cls.__name__}: expected {len(names)} steps "
                                    f"({', '.join(names)}), got {len(steps)}")
        return cls._build(dict(zip(names, steps, strict=True)), arrays)


def frozen_array(a: npt.ArrayLike, dtype: npt.DTypeLike, shape: tuple[int, ...],
                 what: str) -> np.ndarray:
    """A read-only copy of ``a`` as ``dtype`` with the given ``shape`` (checked)."""
    arr = np.array(a)
    if arr.shape != shape:
        raise TesselConfigError(f"{what}: expected shape {shape}, got {arr.shape}")
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise TesselConfigError(f"{what}: values outside {np.dtype(dtype)}")
    out = arr.astype(dtype)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class SoftmaxPlan(PlanAttrs):
    """Every parameter of the integer softmax chain (see the module docstring)."""

    ARRAYS: ClassVar[tuple[str, ...]] = ("exp_table",)

    axis_len: int
    in_dtype: DType
    in_zp: int
    sub_mult: int
    sub_shift: int
    sub_zp: int
    recip_frac_bits: int
    mul_mult: int
    mul_shift: int
    out_dtype: DType
    out_zp: int
    act_min: int
    act_max: int
    exp_table: np.ndarray = field(compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "exp_table",
                           frozen_array(self.exp_table, np.int16, (I16_ENTRIES,), "exp_table"))

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any], exp_table: npt.ArrayLike) -> SoftmaxPlan:
        return cls._build(attrs, {"exp_table": exp_table})

    @classmethod
    def from_steps(cls, steps: Sequence[int], exp_table: npt.ArrayLike) -> SoftmaxPlan:
        return cls._from_steps(steps, {"exp_table": exp_table})


def output_qparams(out_dtype: DType) -> tuple[float, int]:
    """The fixed output quantisation of integer softmax: (scale, zero point)."""
    if out_dtype not in _OUT:
        raise TesselConfigError(f"softmax output must be I8 or I16, got {out_dtype!r}")
    scale, zp, _ = _OUT[out_dtype]
    return scale, zp


def exp_table(d_scale: float) -> np.ndarray:
    """The int16[513] table of ``K exp((v - 32767) d_scale)`` for int16 ``v``.

    ``K = 32767 exp(-d_scale)`` puts the entry at ``v = 32768`` (index 512, the end point of
    the last segment) exactly at 32767, so no entry is clipped and the top segment
    interpolates the true curve (clipping it would bend the segment containing ``x == max``).
    """
    k = 32767.0 * math.exp(-d_scale)
    return make_lut_i16(lambda z: k * np.exp(z), d_scale, D_ZP, 1.0, 0)


def plan_softmax(in_scale: float, in_zp: int, in_dtype: DType, out_dtype: DType,
                 axis_len: int) -> SoftmaxPlan:
    """Parameters of the integer softmax of an ``in_dtype`` tensor (scale, zero point) over an
    axis of ``axis_len`` elements, producing ``out_dtype`` at the fixed output quantisation."""
    if in_dtype not in (DType.I8, DType.I16):
        raise TesselConfigError(f"softmax input must be I8 or I16, got {in_dtype!r}")
    output_qparams(out_dtype)  # checks out_dtype
    _, out_zp, out_bits = _OUT[out_dtype]
    if not 1 <= axis_len <= MAX_EXTENT:
        raise TesselConfigError(f"softmax axis length {axis_len} outside the REDUCE extent "
                                f"[1, {MAX_EXTENT}]")
    if not (math.isfinite(in_scale) and in_scale > 0):
        raise TesselConfigError(f"softmax in_scale must be finite and > 0, got {in_scale!r}")
    lo, hi = in_dtype.lo, in_dtype.hi
    if not lo <= in_zp <= hi:
        raise TesselConfigError(f"softmax in_zp {in_zp} outside {in_dtype.name}")
    d_scale = EXP_RANGE / (DType.I16.hi - DType.I16.lo)
    sub_mult, sub_shift = quantize_multiplier(in_scale / d_scale)
    table = exp_table(d_scale)
    e_max = int(intops.lut_i16(np.array([D_ZP], np.int16), table)[0])
    if axis_len * e_max > INT32_MAX:  # cannot happen for axis_len <= MAX_EXTENT; kept as a proof
        raise TesselConfigError("softmax: REDUCE SUM of the exponentials would saturate")
    mul_mult, mul_shift = quantize_multiplier(2.0 ** (out_bits - RECIP_FRAC_BITS))
    return SoftmaxPlan(axis_len, in_dtype, in_zp, sub_mult, sub_shift, D_ZP, RECIP_FRAC_BITS,
                       mul_mult, mul_shift, out_dtype, out_zp, out_dtype.lo, out_dtype.hi,
                       table)


def softmax_int(x: npt.ArrayLike, plan: SoftmaxPlan, axis: int = -1) -> np.ndarray:
    """Integer softmax of ``x`` along ``axis``: the six NPU steps, bit-exact."""
    return softmax_steps(x, plan, axis)["y"]


def softmax_steps(x: npt.ArrayLike, plan: SoftmaxPlan, axis: int = -1) -> dict[str, np.ndarray]:
    """Every intermediate of :func:`softmax_int`: ``m, d, e, s, r, y`` (reduced ones keep
    ``axis`` with size 1)."""
    xs = np.asarray(x)
    if xs.dtype != intops.np_dtype(plan.in_dtype):
        raise TesselConfigError(f"softmax_int: input dtype {xs.dtype} != plan's "
                                f"{plan.in_dtype.name}")
    if xs.shape[axis] != plan.axis_len:
        raise TesselConfigError(f"softmax_int: axis {axis} has {xs.shape[axis]} elements, the "
                                f"plan was made for {plan.axis_len}")
    m = np.expand_dims(intops.reduce(xs, ReduceOp.MAX, axis), axis)
    d = intops.eltwise(EltOp.SUB, xs, m, a_zp=plan.in_zp, b_zp=plan.in_zp, left_shift=0,
                       a_mult=ONE_MULT, a_shift=ONE_SHIFT, b_mult=ONE_MULT, b_shift=ONE_SHIFT,
                       out_mult=plan.sub_mult, out_shift=plan.sub_shift, out_zp=plan.sub_zp,
                       act_min=DType.I16.lo, act_max=DType.I16.hi, out_dtype=DType.I16)
    e = intops.lut_i16(d, plan.exp_table)
    s = np.expand_dims(intops.reduce(e, ReduceOp.SUM, axis, 0), axis)
    r = intops.unary(s, UnaryOp.RECIP, plan.recip_frac_bits)
    y = intops.eltwise(EltOp.MUL, e, r, a_zp=0, b_zp=0, out_mult=plan.mul_mult,
                       out_shift=plan.mul_shift, out_zp=plan.out_zp, act_min=plan.act_min,
                       act_max=plan.act_max, out_dtype=plan.out_dtype)
    return {"m": m, "d": d, "e": e, "s": s, "r": r, "y": y}
