"""`qsoftmax_tosa` / `qsoftmax16_tosa`: the int8 and int16 softmax as the TOSA legalisation of
TFLite computes them, ops of imported TOSA graphs that run on the host (their golden kernels).

`tosa-converter-for-tflite` writes TFLite's int8 softmax as about forty int32 TOSA operators:
`d = x - max(x)` scaled to int16 by 128; four int16 TABLEs (the four bytes of a 32-bit
exponential) shifted and added into `e`; `s = sum(e >> 12)` (rounding shifts); CLZ and a
normalising shift of `s`; three Newton-Raphson steps (gemmlowp's `one_over_one_plus_x`, MULs
with shift 31) for the reciprocal `r`; `y = (e r >> 30) >> (35 - clz(s))` (rounding); plus the
output zero point. `e` depends on `d` alone, 256 values for int8, so the importer evaluates the
TABLE part once into `exp_table` (int32[256], entry `d + 255`); the per-row reciprocal and the
data-dependent shift have no NPU instruction, so the op has no NPU form and runs on the host
between NPU regions. Every step below follows the TOSA 1.0 pseudocode (MUL with shift,
ARITHMETIC_RIGHT_SHIFT with round, CLZ, TABLE on int16) in exact int64 arithmetic.

The int16 softmax is another chain: `d = x - max(x)` RESCALEd (the input scale's multiplier)
and moved by 32767 into int16 by CAST (which wraps, as TOSA's CAST between integers does); one
int16 TABLE for `e = exp(d)`; `s = sum(e)`, CLZ and a normalising shift of `s` into
[2^30, 2^31), its top 16 bits (less 2^30, rounded) moved into int16 by CAST and read from a
reciprocal TABLE for `r`; `y = (r e) >> (31 - clz(s))` (rounding), RESCALEd by one to int16.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.ops import InferError, Op, OpSpec, axis_index
from tessel.ir.types import DType, TensorType
from tessel.isa.fields import INTERPOLATION_BITS, LutMode
from tessel.isa.fixedpoint import Rounding
from tessel.ops.base import LayoutRule, OpDef, Trait, register
from tessel.ops.quantise import int_result, require_int

I64 = np.int64
EXP_ENTRIES = 256  # x - max(x) of int8 values: -255 .. 0
SUM_SHIFT = 12  # e >> 12 before the sum
ONE_S2_29 = 1 << 29  # 1.0 in s2.29
NR_A, NR_B = 1515870810, -1010580540  # 48/17 and -32/17 in s2.29 (gemmlowp)
NR_STEPS = 3
OUT_SHIFT_BASE = 35  # y = (e r >> 30) >> (35 - clz(s)) for an int8 output


def mul_shift(a: np.ndarray, b: np.ndarray | int, shift: int) -> np.ndarray:
    """TOSA MUL of int32 with `shift > 0`: `(a b + 2^(shift - 1)) >> shift` (floor)."""
    return (np.asarray(a, I64) * np.asarray(b, I64) + (I64(1) << (shift - 1))) >> shift


def rshift_round(v: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """TOSA ARITHMETIC_RIGHT_SHIFT with `round`: `v >> s`, plus bit `s - 1` of `v` when s > 0."""
    v, s = np.asarray(v, I64), np.asarray(shift, I64)
    bit = np.where(s > 0, (v >> np.maximum(s - 1, 0)) & 1, 0)
    return (v >> s) + bit


def clz32(v: np.ndarray) -> np.ndarray:
    """TOSA CLZ of int32: leading zero bits (32 for 0, 0 for a negative value)."""
    u = np.asarray(v, I64) & 0xFFFFFFFF
    bits = sum(((u >> k) > 0).astype(I64) for k in range(32))  # the bit length, exactly
    return 32 - bits


def table_i16(v: np.ndarray, table: np.ndarray) -> np.ndarray:
    """TOSA TABLE of int16 (513 entries, segments of 128 inputs: the shape of the I16_513 LUT
    mode): `(base << 7) + slope * frac`, int32."""
    idx = np.asarray(v, I64) + 32768
    t = np.asarray(table, I64)
    seg = idx >> INTERPOLATION_BITS
    base, nxt = t[seg], t[np.minimum(seg + 1, t.size - 1)]
    return (base << INTERPOLATION_BITS) + (nxt - base) * (idx & (LutMode.I16_513.step - 1))


def exp_table(tables: Sequence[np.ndarray], shifts: Sequence[int]) -> np.ndarray:
    """int32[256] `e` of each `d = -255 .. 0`: the four TABLEs of `128 d`, the first three
    shifted left by `shifts[:3]`, the fourth right by `shifts[3]` (rounding), added."""
    d16 = np.arange(-(EXP_ENTRIES - 1), 1, dtype=I64) * 128
    parts = [table_i16(d16, t) for t in tables]
    e = sum((p << s for p, s in zip(parts[:3], shifts[:3], strict=True)),
            start=rshift_round(parts[3], shifts[3]))
    return np.asarray(e, I64)


def exp_tables(e: np.ndarray) -> list[np.ndarray]:
    """Four int16 tables (513 entries) that `exp_table` turns back into `e` (int32[256], not
    negative): TABLE of `128 d` reads entry `d + 256` exactly (no interpolation), so entry
    `d + 256` of the tables holds the bytes of `e[d + 255]`, high byte first; the unread
    entries repeat their neighbour (slope 0)."""
    v = np.asarray(e, I64)
    if v.shape != (EXP_ENTRIES,) or v.min() < 0 or v.max() > np.iinfo(np.int32).max:
        raise ValueError(f"exp table must be int32[{EXP_ENTRIES}] of non-negative values")
    n = LutMode.I16_513.entries
    tables = []
    for k in range(4):
        byte = (v >> (8 * (3 - k))) & 0xFF
        t = np.empty(n, I64)
        t[1:EXP_ENTRIES + 1] = byte
        t[0], t[EXP_ENTRIES + 1:] = byte[0], byte[-1]
        tables.append(t.astype(np.int16))
    return tables


def reciprocal(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(clz(s), r): `s` normalised to s1.30 by `clz - 1`, then Newton-Raphson in s2.29."""
    clz = clz32(s)
    half = np.asarray(s, I64) << (clz - 1)
    r = mul_shift(half, NR_B, 31) + NR_A
    for _ in range(NR_STEPS):
        err = ONE_S2_29 - mul_shift(r, half, 31)
        r = r + mul_shift(r, err, 31) * 4
    return clz, r


def softmax_tosa(x: np.ndarray, table: np.ndarray, axis: int, out_zp: int, act_min: int,
                 act_max: int) -> np.ndarray:
    """The chain on int8 `x` along `axis` (see the module docstring), clamped to int8."""
    xs = np.asarray(x, I64)
    d = xs - np.max(xs, axis=axis, keepdims=True)
    e = np.asarray(table, I64)[d + EXP_ENTRIES - 1]
    s = np.sum(rshift_round(e, SUM_SHIFT), axis=axis, keepdims=True)
    clz, r = reciprocal(s)
    y = rshift_round(mul_shift(e, r, 30), OUT_SHIFT_BASE - clz)
    return np.clip(y + out_zp, act_min, act_max).astype(np.int8)


def rescale32(v: np.ndarray, multiplier: int, shift: int, rounding: Rounding) -> np.ndarray:
    """TOSA RESCALE of int32 to int32 (scale32, zero points 0): `apply_scale_32` with
    `double_round` for DOUBLE (its extra 2^30 applies to shifts beyond 31), saturated."""
    v = np.asarray(v, I64)
    rnd = np.full(v.shape, 1 << (shift - 1), I64)
    if rounding is Rounding.DOUBLE and shift > 31:
        rnd += np.where(v >= 0, 1 << 30, -(1 << 30))
    return np.clip((v * multiplier + rnd) >> shift, -(2**31), 2**31 - 1)


def cast_i16(v: np.ndarray) -> np.ndarray:
    """TOSA CAST of int32 to int16: the low 16 bits, sign-extended."""
    return ((np.asarray(v, I64) + 32768) & 0xFFFF) - 32768


I16_BIAS = 32767  # d scaled, moved into int16 for the exp TABLE
RECIP_SHIFT, RECIP_OFFSET = 14, 32768  # the normalised sum's top bits into the reciprocal TABLE
TABLE_ROUND = 7  # each TABLE's 32-bit result rounded back to its 16-bit scale
OUT16_SHIFT_BASE = 31


def reciprocal16(s: np.ndarray, recip_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(clz(s), r) of the int16 chain: `s` normalised into [2^30, 2^31) by `clz - 1`, its top
    bits less 2^30 (rounded, 0 .. 65536) moved into int16 by CAST (65536 wraps to -32768) and
    read from the reciprocal TABLE."""
    clz = clz32(s)
    top = rshift_round((np.asarray(s, I64) << (clz - 1)) - 2 * ONE_S2_29, RECIP_SHIFT)
    r = rshift_round(table_i16(cast_i16(top - RECIP_OFFSET), recip_t), TABLE_ROUND)
    return clz, r


def softmax16_tosa(x: np.ndarray, exp_t: np.ndarray, recip_t: np.ndarray, a: Mapping[str, Any]
                   ) -> np.ndarray:
    """The int16 chain on `x` along `a["axis"]` (see the module docstring), clamped."""
    axis = a["axis"]
    xs = np.asarray(x, I64)
    d = xs - np.max(xs, axis=axis, keepdims=True)
    t = cast_i16(rescale32(d, a["d_multiplier"], a["d_shift"], Rounding(a["d_rounding"]))
                 + I16_BIAS)
    e = rshift_round(table_i16(t, exp_t), TABLE_ROUND)
    clz, r = reciprocal16(np.sum(e, axis=axis, keepdims=True), recip_t)
    y = rshift_round(r * e, OUT16_SHIFT_BASE - clz)
    return np.clip(y + a["out_zp"], a["act_min"], a["act_max"]).astype(np.int16)


def _type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    if ts[0].dtype is not DType.I8 or attrs["dtype"] is not DType.I8:
        raise InferError("qsoftmax_tosa takes and gives int8")
    if ts[1].shape != (EXP_ENTRIES,) or ts[1].dtype is not DType.I32:
        raise InferError(f"qsoftmax_tosa exp table must be i32[{EXP_ENTRIES}], got "
                         f"{ts[1].text()}")
    axis_index(attrs["axis"], ts[0].rank)
    return int_result(ts[0], attrs)


def _golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return softmax_tosa(xs[0], xs[1], a["axis"], a["out_zp"], a["act_min"], a["act_max"])


def _type16(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    if ts[0].dtype is not DType.I16 or attrs["dtype"] is not DType.I16:
        raise InferError("qsoftmax16_tosa takes and gives int16")
    n = LutMode.I16_513.entries
    for t, what in zip(ts[1:], ("exp", "reciprocal"), strict=True):
        if t.shape != (n,) or t.dtype is not DType.I16:
            raise InferError(f"qsoftmax16_tosa {what} table must be i16[{n}], got {t.text()}")
    if not 2 <= attrs["d_shift"] <= 62 or attrs["d_multiplier"] < 0:
        raise InferError("qsoftmax16_tosa d_shift must be in [2, 62], d_multiplier >= 0")
    axis_index(attrs["axis"], ts[0].rank)
    return int_result(ts[0], attrs)


def _golden16(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return softmax16_tosa(xs[0], xs[1], xs[2], a)


_I = AttrKind.INT

register(
    OpDef(Op.QSOFTMAX_TOSA, OpSpec(("x", "exp_table"), _type, {
        "axis": AttrSpec(_I, -1), "dtype": AttrSpec(AttrKind.DTYPE), "out_zp": AttrSpec(_I),
        "act_min": AttrSpec(_I), "act_max": AttrSpec(_I)}),
        golden=_golden, layout=LayoutRule.AXES, traits=frozenset({Trait.INTEGER,
                                                                  Trait.HOST_INTEGER})),
)
register(
    OpDef(Op.QSOFTMAX16_TOSA, OpSpec(("x", "exp_table", "recip_table"), _type16, {
        "axis": AttrSpec(_I, -1), "dtype": AttrSpec(AttrKind.DTYPE), "d_multiplier": AttrSpec(_I),
        "d_shift": AttrSpec(_I), "d_rounding": AttrSpec(_I), "out_zp": AttrSpec(_I),
        "act_min": AttrSpec(_I), "act_max": AttrSpec(_I)}),
        golden=_golden16, layout=LayoutRule.AXES, traits=frozenset({Trait.INTEGER,
                                                                    Trait.HOST_INTEGER})),
)
