"""The integer arithmetic of each Tessel NPU instruction, numpy-vectorised: the golden kernels.

One function per ISA instruction (docs/isa.md section 4), computing exactly what its
pseudocode computes, over whole tensors instead of strided SRAM tiles (numpy broadcasting plays
the part of stride-0 operands). The golden model's integer kernels and the integer softmax /
layer norm / LUT chains are compositions of these functions, so that the simulator running the
compiled program equals the golden model bit for bit. All rounding and requantisation goes
through :mod:`tessel.isa.fixedpoint`; nothing here rounds on its own. Intermediates are int64
and exact; where the pseudocode's unbounded integers could exceed int64, operands are clipped
first in a way that provably leaves the saturated result unchanged (noted at each clip).

Public API (stable; the QDQ lowering and the golden model call it):

* ``requant(x, bias, multiplier, shift, out_zp, act_min, act_max, out_dtype)`` -- REQUANT
  (``src`` ACC or SRAM: same arithmetic); per-channel parameters along the last axis;
* ``eltwise(op, a, b, *, a_zp, b_zp, left_shift, a_mult, a_shift, b_mult, b_shift, out_mult,
  out_shift, out_zp, act_min, act_max, out_dtype)`` -- ELTWISE ADD/SUB/MUL/MAX/MIN;
* ``lut_i8(x, table)`` -- LUT I8_256; ``lut_i16(x, table)`` -- LUT I16_513;
* ``pool(x, op, kernel, *, stride, dilation, pad, out_hw, act_min, act_max)`` -- POOL, NHWC;
* ``reduce(x, op, axis, in_zp=0)`` -- REDUCE SUM/SUMSQ/MAX/MIN;
* ``unary(x, op, frac_bits)`` -- UNARY RECIP/RSQRT;
* ``conv_acc(x, w, in_zp, w_zp=0, *, stride, dilation, pad, out_hw, acc=None)`` -- CONV;
* ``dwconv_acc(x, w, in_zp, *, stride, dilation, pad, out_hw, acc=None)`` -- DWCONV;
* ``matmul_acc(a, b, a_zp=0, b_zp=0, acc=None)`` -- MATMUL.

The MAC functions take an int8 activation operand into the 32-bit accumulator (int32 result,
wrapping), or an **int16** numpy array (zero point 0) into the wide 48-bit accumulator (int64
result, wrapping at 48 bits); their other operand (weights) is int8. ``requant(..., wide=True)``
requantises a wide accumulator (:func:`tessel.isa.fixedpoint.requantize_wide`).

``op`` arguments are the ISA enums (``EltOp``, ``PoolOp``, ``ReduceOp``, ``UnaryOp``);
``out_dtype`` is an ISA ``DType`` or a numpy integer dtype. ``acc`` (the accumulator's previous
contents) selects ``mode=ACCUMULATE``; ``None`` is ``OVERWRITE``. Bad arguments raise
``TesselConfigError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tessel.errors import TesselConfigError
from tessel.isa.fields import INTERPOLATION_BITS, DType, EltOp, LutMode, PoolOp, ReduceOp, UnaryOp
from tessel.isa.fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    MAX_SHIFT,
    MIN_SHIFT,
    Rounding,
    multiply_by_quantized_multiplier,
    requantize,
    requantize_wide,
    rounding_div,
    single_round_scale,
)
from tessel.isa.limits import (
    MAX_CENTRED_INT8,
    MAX_FRAC_BITS,
    MAX_LEFT_SHIFT,
    MAX_MATRIX_ZP,
    MAX_REDUCTION,
    MIN_MATRIX_ZP,
)

I64 = np.int64
_NP = {DType.I8: np.dtype(np.int8), DType.I16: np.dtype(np.int16), DType.I32: np.dtype(np.int32)}
Pair = tuple[int, int]


def np_dtype(dtype: DType | npt.DTypeLike) -> np.dtype:
    """The numpy dtype of an ISA ``DType`` (or a numpy int8/int16/int32 dtype, checked)."""
    if isinstance(dtype, DType):
        return _NP[dtype]
    dt = np.dtype(dtype)
    if dt not in _NP.values():
        raise TesselConfigError(f"integer NPU types are int8, int16 and int32, got {dt}")
    return dt


def _ints(x: npt.ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TesselConfigError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    return arr.astype(I64)


def _in_type(x: np.ndarray, dtype: np.dtype, name: str) -> None:
    info = np.iinfo(dtype)
    if x.size and (int(x.min()) < info.min or int(x.max()) > info.max):
        raise TesselConfigError(f"{name}: values [{int(x.min())}, {int(x.max())}] outside "
                                f"{dtype}")


def _clamp_bounds(act_min: int, act_max: int, dtype: np.dtype, what: str) -> None:
    info = np.iinfo(dtype)
    if not info.min <= act_min <= act_max <= info.max:
        raise TesselConfigError(f"{what}: act_min/act_max [{act_min}, {act_max}] must satisfy "
                                f"{info.min} <= act_min <= act_max <= {info.max} ({dtype})")


def _sat32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, INT32_MIN, INT32_MAX)


def _wrap48(x: np.ndarray) -> np.ndarray:
    """``x`` modulo 2**48 into [-2**47, 2**47) (the wide accumulator's wrap-around)."""
    t = x.astype(I64) + 2**47
    t &= 2**48 - 1
    t -= 2**47
    return t


def _wrap32(x: np.ndarray) -> np.ndarray:
    """``x`` modulo 2**32 into [-2**31, 2**31) (the 32-bit accumulator's wrap-around): the
    mask is the modulo of two's-complement int64."""
    t = x.astype(I64) + 2**31
    t &= 2**32 - 1
    t -= 2**31
    return t.astype(np.int32)


# --------------------------------------------------------------------------------------------
# REQUANT, ELTWISE
# --------------------------------------------------------------------------------------------


def requant(x: npt.ArrayLike, bias: npt.ArrayLike, multiplier: npt.ArrayLike,
            shift: npt.ArrayLike, out_zp: int, act_min: int, act_max: int,
            out_dtype: DType | npt.DTypeLike,
            rounding: Rounding = Rounding.DOUBLE, wide: bool = False) -> np.ndarray:
    """REQUANT: ``clamp(MBQM(sat32(x + bias), q31, shift) + out_zp, act_min, act_max)``
    (``rounding`` SINGLE: one rounding of the exact product in place of MBQM).

    ``x`` int32 values (accumulator entries or int32 SRAM words); ``bias``, ``multiplier``,
    ``shift`` scalars (PER_TENSOR) or vectors along the last axis of ``x`` (PER_CHANNEL).
    ``wide``: ``x`` is the wide accumulator (48-bit values) and ``bias`` int48; the wide rule
    (:func:`tessel.isa.fixedpoint.requantize_wide`) replaces MBQM and ``rounding``.
    """
    dt = np_dtype(out_dtype)
    _clamp_bounds(act_min, act_max, dt, "requant")
    xs = _ints(x, "requant x")
    if wide:
        return requantize_wide(xs, np.asarray(bias, I64), np.asarray(multiplier, I64),
                               np.asarray(shift, I64), out_zp, act_min, act_max, -1, dt)
    _in_type(xs, np.dtype(np.int32), "requant x")
    return requantize(xs, np.asarray(bias, I64), np.asarray(multiplier, I64),
                      np.asarray(shift, I64), out_zp, act_min, act_max, -1, dt, rounding)


def _scaled(x: np.ndarray, mult: int, shift: int, rounding: Rounding) -> np.ndarray:
    """``x`` (int32 values) times ``mult * 2^(shift - 31)``: MBQM, or SINGLE's one rounding
    saturated to int32 (MBQM's results are inside int32 already)."""
    if rounding == Rounding.SINGLE:
        if not (0 <= mult <= INT32_MAX and MIN_SHIFT <= shift <= MAX_SHIFT):
            raise TesselConfigError(f"eltwise: multiplier {mult} / shift {shift} outside "
                                    f"[0, 2^31) / [{MIN_SHIFT}, {MAX_SHIFT}]")
        return _sat32(single_round_scale(np.asarray(x, I64), np.int64(mult), np.int64(shift)))
    return multiply_by_quantized_multiplier(x, mult, shift)


def _rescaled(v: np.ndarray, zp: int, left_shift: int, mult: int, shift: int,
              rounding: Rounding) -> np.ndarray:
    """``R(sat32((v - zp) * 2^left_shift), mult, shift)`` (ADD/SUB/MAX/MIN inputs; ``R`` MBQM
    or SINGLE's one rounding)."""
    # |v - zp| <= 2^32: clipping to +-2^31 keeps the shift inside int64 and cannot change
    # sat32 of the shifted value (a clipped value saturates with or without the clip)
    centred = np.clip(v - zp, -(2**31), 2**31)
    return _scaled(_sat32(centred << left_shift), mult, shift, rounding)


def eltwise(op: EltOp, a: npt.ArrayLike, b: npt.ArrayLike, *, a_zp: int = 0, b_zp: int = 0,
            left_shift: int = 0, a_mult: int = 0, a_shift: int = 0, b_mult: int = 0,
            b_shift: int = 0, out_mult: int, out_shift: int, out_zp: int = 0,
            act_min: int, act_max: int, out_dtype: DType | npt.DTypeLike,
            rounding: Rounding = Rounding.DOUBLE) -> np.ndarray:
    """ELTWISE: ``a (op) b`` with TFLite rescaling; ``a`` and ``b`` broadcast (stride 0).

    MUL: ``r = sat32((a - a_zp) * (b - b_zp))`` (input multipliers unused); otherwise
    ``ra = MBQM(sat32((a - a_zp) << left_shift), a_mult, a_shift)`` (and ``rb`` likewise) and
    ``r = sat32(ra + rb | ra - rb | max | min)``. Output:
    ``clamp(MBQM(r, out_mult, out_shift) + out_zp, act_min, act_max)`` as ``out_dtype``.
    ``rounding`` SINGLE: each MBQM is one rounding of the exact product (TOSA's SINGLE_ROUND).
    """
    dt = np_dtype(out_dtype)
    _clamp_bounds(act_min, act_max, dt, "eltwise")
    if not 0 <= left_shift <= MAX_LEFT_SHIFT:
        raise TesselConfigError(f"eltwise: left_shift {left_shift} outside [0, {MAX_LEFT_SHIFT}]")
    av, bv = np.broadcast_arrays(_ints(a, "eltwise a"), _ints(b, "eltwise b"))
    op = EltOp(op)
    if op == EltOp.MUL:
        # each factor clipped to +-2^31: the product fits int64 and its sat32 is unchanged
        # (a clipped factor times any non-zero integer saturates either way)
        ra = np.clip(av - a_zp, -(2**31), 2**31)
        rb = np.clip(bv - b_zp, -(2**31), 2**31)
        r = _sat32(ra * rb)
    else:
        ra = _rescaled(av, a_zp, left_shift, a_mult, a_shift, rounding).astype(I64)
        rb = _rescaled(bv, b_zp, left_shift, b_mult, b_shift, rounding).astype(I64)
        fn = {EltOp.ADD: np.add, EltOp.SUB: np.subtract, EltOp.MAX: np.maximum,
              EltOp.MIN: np.minimum}[op]
        r = _sat32(fn(ra, rb))
    y = _scaled(r, out_mult, out_shift, rounding).astype(I64)
    return np.clip(y + out_zp, act_min, act_max).astype(dt)


# --------------------------------------------------------------------------------------------
# LUT
# --------------------------------------------------------------------------------------------


def _table(table: npt.ArrayLike, n: int, what: str) -> np.ndarray:
    t = _ints(table, what)
    if t.shape != (n,):
        raise TesselConfigError(f"{what}: table must have {n} entries, got shape {t.shape}")
    _in_type(t, np.dtype(np.int16), what)  # LUT memory holds int16 entries
    return t


def lut_i8(x: npt.ArrayLike, table: npt.ArrayLike) -> np.ndarray:
    """LUT I8_256: ``y = wrap8(table[x + 128])`` for int8 ``x`` (table: 256 int16-range entries)."""
    mode = LutMode.I8_256
    t = _table(table, mode.entries, "lut_i8")
    xs = _ints(x, "lut_i8 x")
    _in_type(xs, np.dtype(np.int8), "lut_i8 x")
    return t[xs + mode.centre].astype(np.int8)  # astype wraps modulo 2^8 (wrap8)


def lut_i16(x: npt.ArrayLike, table: npt.ArrayLike) -> np.ndarray:
    """LUT I16_513: TFLite ``lut_lookup_with_interpolation`` on int16 ``x`` (table: 513 int16).

    ``idx = 256 + (x >> 7)``, ``off = x & 127``, ``slope = wrap16(t[idx+1] - t[idx])``,
    ``y = wrap16(t[idx] + ((slope * off + 64) >> 7))`` with floor shifts.
    """
    mode, bits = LutMode.I16_513, INTERPOLATION_BITS
    t = _table(table, mode.entries, "lut_i16")
    xs = _ints(x, "lut_i16 x")
    _in_type(xs, np.dtype(np.int16), "lut_i16 x")
    idx = mode.centre + (xs >> bits)
    off = xs & (mode.step - 1)
    base = t[idx]
    slope = (t[idx + 1] - base + 32768) % 65536 - 32768
    return (base + ((slope * off + (mode.step >> 1)) >> bits)).astype(np.int16)  # wrap16


# --------------------------------------------------------------------------------------------
# POOL, REDUCE, UNARY
# --------------------------------------------------------------------------------------------


def _out_hw(h: int, w: int, kernel: Pair, stride: Pair, dilation: Pair, pad: Pair,
            out_hw: Pair | None) -> Pair:
    """Output size; default: bottom / right padding equal to top / left."""
    if out_hw is not None:
        return int(out_hw[0]), int(out_hw[1])
    oh = (h + 2 * pad[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * pad[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise TesselConfigError(f"window {kernel} does not fit a {h}x{w} input")
    return oh, ow


def _taps(n_in: int, n_out: int, k: int, s: int, d: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Input index (clipped) and validity, shape (k, n_out), of each kernel tap and output."""
    idx = np.arange(n_out)[None, :] * s - p + np.arange(k)[:, None] * d
    valid = (idx >= 0) & (idx < n_in)
    return np.clip(idx, 0, n_in - 1), valid


def _windows(x: np.ndarray, kernel: Pair, stride: Pair, dilation: Pair, pad: Pair,
             out: Pair):
    """Yield ``(tap values (..., oh, ow, C), valid mask (oh, ow, 1))`` for each kernel tap."""
    h, w = x.shape[-3], x.shape[-2]
    rows, rvalid = _taps(h, out[0], kernel[0], stride[0], dilation[0], pad[0])
    cols, cvalid = _taps(w, out[1], kernel[1], stride[1], dilation[1], pad[1])
    for ky in range(kernel[0]):
        xr = np.take(x, rows[ky], axis=-3)
        for kx in range(kernel[1]):
            mask = (rvalid[ky][:, None] & cvalid[kx][None, :])[:, :, None]
            yield np.take(xr, cols[kx], axis=-2), mask


def _valid_counts(h: int, w: int, kernel: Pair, stride: Pair, dilation: Pair, pad: Pair,
                  out: Pair, what: str) -> np.ndarray:
    rv = _taps(h, out[0], kernel[0], stride[0], dilation[0], pad[0])[1].sum(axis=0)
    cv = _taps(w, out[1], kernel[1], stride[1], dilation[1], pad[1])[1].sum(axis=0)
    if not rv.all() or not cv.all():
        raise TesselConfigError(f"{what}: some output window has no position inside the "
                                f"{h}x{w} input")
    return (rv[:, None] * cv[None, :])[:, :, None]


def pool(x: npt.ArrayLike, op: PoolOp, kernel: Sequence[int], *, stride: Sequence[int] = (1, 1),
         dilation: Sequence[int] = (1, 1), pad: Sequence[int] = (0, 0),
         out_hw: Sequence[int] | None = None, act_min: int, act_max: int) -> np.ndarray:
    """POOL on NHWC ``x`` (``(..., H, W, C)``, int8 or int16; the dtype is kept).

    Only window positions inside the input count (padding never wins a max and is not counted
    in an average). MAX: ``max``; AVG: ``rounding_div(sum, count)``; then the clamp. ``pad`` is
    ``(pad_top, pad_left)``; ``out_hw`` defaults to equal bottom / right padding.
    """
    arr = np.asarray(x)
    dt = np_dtype(arr.dtype)
    if dt == np.int32:
        raise TesselConfigError("pool: dtype must be int8 or int16")
    _clamp_bounds(act_min, act_max, dt, "pool")
    k, s, d, p = (tuple(int(v) for v in t) for t in (kernel, stride, dilation, pad))
    h, w = arr.shape[-3], arr.shape[-2]
    out = _out_hw(h, w, k, s, d, p, None if out_hw is None else tuple(out_hw))
    count = _valid_counts(h, w, k, s, d, p, out, "pool")
    xs = arr.astype(I64)
    acc = None
    for vals, mask in _windows(xs, k, s, d, p, out):
        if op == PoolOp.MAX:
            v = np.where(mask, vals, I64(INT32_MIN))
            acc = v if acc is None else np.maximum(acc, v)
        else:
            v = np.where(mask, vals, I64(0))
            acc = v if acc is None else acc + v
    y = acc if op == PoolOp.MAX else rounding_div(acc, np.broadcast_to(count, acc.shape))
    return np.clip(y, act_min, act_max).astype(dt)


def reduce(x: npt.ArrayLike, op: ReduceOp, axis: int, in_zp: int = 0) -> np.ndarray:
    """REDUCE along ``axis``: SUM / SUMSQ of ``x - in_zp`` saturated to int32 (int32 result),
    MAX / MIN in ``x``'s own type (``in_zp`` unused)."""
    arr = np.asarray(x)
    dt = np_dtype(arr.dtype)
    op = ReduceOp(op)
    if op in (ReduceOp.MAX, ReduceOp.MIN):
        return (arr.max(axis=axis) if op == ReduceOp.MAX else arr.min(axis=axis)).astype(dt)
    v = arr.astype(I64) - in_zp
    if op == ReduceOp.SUMSQ:
        # |v| >= 2^16 squares to >= 2^32 > INT32_MAX: the (non-negative) sum saturates with or
        # without the clip, and the clip keeps every square and the sum inside int64
        v = np.clip(v, -(2**16), 2**16)
        v = v * v
    return _sat32(v.sum(axis=axis)).astype(np.int32)


def _isqrt(v: np.ndarray) -> np.ndarray:
    """Exact floor square root of int64 values in [0, 2^62] (UNARY RSQRT: 2^(2 fb) / x)."""
    if v.size and (int(v.min()) < 0 or int(v.max()) > 2**62):
        raise TesselConfigError("isqrt: argument outside [0, 2^62]")
    r = np.floor(np.sqrt(v.astype(np.float64))).astype(I64)
    for _ in range(3):  # float sqrt is within one unit of the floor: step to it exactly
        r = r - (r * r > v) + ((r + 1) * (r + 1) <= v)
    return r


def unary(x: npt.ArrayLike, op: UnaryOp, frac_bits: int) -> np.ndarray:
    """UNARY on int32 ``x``: RECIP ``min(rounding_div(2^fb, x), INT32_MAX)``, RSQRT
    ``min(isqrt(floor(2^(2 fb) / x)), INT32_MAX)``; ``x <= 0`` gives ``INT32_MAX``."""
    if not 0 <= frac_bits <= MAX_FRAC_BITS:
        raise TesselConfigError(f"unary: frac_bits {frac_bits} outside [0, {MAX_FRAC_BITS}]")
    xs = _ints(x, "unary x")
    _in_type(xs, np.dtype(np.int32), "unary x")
    pos = xs > 0
    safe = np.where(pos, xs, 1)
    if UnaryOp(op) == UnaryOp.RECIP:
        y = rounding_div(np.full_like(safe, 1 << frac_bits), safe)
    else:
        y = _isqrt((I64(1) << (2 * frac_bits)) // safe)
    return np.where(pos, np.minimum(y, INT32_MAX), INT32_MAX).astype(np.int32)


# --------------------------------------------------------------------------------------------
# CONV, DWCONV, MATMUL (accumulation into the int32 accumulator)
# --------------------------------------------------------------------------------------------
# Products of int8 values minus 9-bit zero points are <= MAX_CENTRED_INT8^2; every reduction
# the ISA allows (K <= MAX_REDUCTION) stays below 2^53, so float64 sums of them are exact
# integers.
assert MAX_CENTRED_INT8**2 * MAX_REDUCTION < 2**53
# int16 activations (zero point 0) times int8 weights: products <= 2^15 * MAX_CENTRED_INT8
assert 2**15 * MAX_CENTRED_INT8 * MAX_REDUCTION < 2**53


def _accumulate(s: np.ndarray, acc: npt.ArrayLike | None, wide: bool = False) -> np.ndarray:
    """OVERWRITE: ``wrap32(s)``; ACCUMULATE: ``wrap32(acc + s)`` (s exact float64 integers);
    ``wide``: the same modulo 2**48, as int64."""
    total = np.rint(s).astype(I64)
    if acc is not None:
        prev = _ints(acc, "accumulator")
        if prev.shape != total.shape:
            raise TesselConfigError(f"accumulator shape {prev.shape} != result {total.shape}")
        total = total + prev
    return _wrap48(total) if wide else _wrap32(total)


def is_wide(x: npt.ArrayLike) -> bool:
    """Whether a MAC's activation operand is int16 (the wide accumulator's input)."""
    return np.asarray(x).dtype == np.int16


def _centred_f64(x: npt.ArrayLike, zp: int, name: str, wide: bool = False) -> np.ndarray:
    """``x - zp`` as exact float64; int8 values, or int16 with zero point 0 when ``wide``."""
    xs = _ints(x, name)
    if wide:
        if zp != 0:
            raise TesselConfigError(f"{name}: an int16 MAC input has zero point 0, got {zp}")
        return xs.astype(np.float64)
    _in_type(xs, np.dtype(np.int8), name)
    if not MIN_MATRIX_ZP <= zp <= MAX_MATRIX_ZP:
        raise TesselConfigError(f"{name}: zero point {zp} outside the 9-bit field "
                                f"[{MIN_MATRIX_ZP}, {MAX_MATRIX_ZP}]")
    return (xs - zp).astype(np.float64)


def _geometry(x: np.ndarray, kernel: Pair, stride, dilation, pad, out_hw):
    s, d, p = (tuple(int(v) for v in t) for t in (stride, dilation, pad))
    out = _out_hw(x.shape[-3], x.shape[-2], kernel, s, d, p,
                  None if out_hw is None else tuple(out_hw))
    return s, d, p, out


def conv_acc(x: npt.ArrayLike, w: npt.ArrayLike, in_zp: int, w_zp: int = 0, *,
             stride: Sequence[int] = (1, 1), dilation: Sequence[int] = (1, 1),
             pad: Sequence[int] = (0, 0), out_hw: Sequence[int] | None = None,
             acc: npt.ArrayLike | None = None) -> np.ndarray:
    """CONV: ``x`` int8 NHWC ``(..., H, W, Cin)``, ``w`` int8 HWIO ``(kh, kw, Cin, Cout)``.

    ``acc[..., oy, ox, co] = wrap32(sum (x - in_zp) * (w - w_zp))`` over the window positions
    inside the input (padding contributes 0). Returns int32 ``(..., oh, ow, Cout)``; an int16
    ``x`` gives the wide accumulator (``wrap48``, int64).
    """
    wide = is_wide(x)
    xf = _centred_f64(x, in_zp, "conv_acc x", wide)
    wf = _centred_f64(w, w_zp, "conv_acc w")
    if wf.ndim != 4 or wf.shape[2] != xf.shape[-1]:
        raise TesselConfigError(f"conv_acc: weight {wf.shape} is not (kh, kw, {xf.shape[-1]}, "
                                "cout)")
    kernel = (wf.shape[0], wf.shape[1])
    s, d, p, out = _geometry(xf, kernel, stride, dilation, pad, out_hw)
    total = np.zeros((*xf.shape[:-3], out[0], out[1], wf.shape[3]))
    taps = _windows(xf, kernel, s, d, p, out)
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            vals, mask = next(taps)
            total += np.where(mask, vals, 0.0) @ wf[ky, kx]
    return _accumulate(total, acc, wide)


def dwconv_acc(x: npt.ArrayLike, w: npt.ArrayLike, in_zp: int, *,
               stride: Sequence[int] = (1, 1), dilation: Sequence[int] = (1, 1),
               pad: Sequence[int] = (0, 0), out_hw: Sequence[int] | None = None,
               acc: npt.ArrayLike | None = None) -> np.ndarray:
    """DWCONV: ``x`` int8 ``(..., H, W, C)``, ``w`` int8 ``(kh, kw, C)`` (depth multiplier 1).

    ``acc[..., oy, ox, c] = wrap32(sum (x - in_zp) * w)`` over valid window positions (an
    int16 ``x``: the wide accumulator, ``wrap48``, int64).
    """
    wide = is_wide(x)
    xf = _centred_f64(x, in_zp, "dwconv_acc x", wide)
    wf = _centred_f64(w, 0, "dwconv_acc w")
    if wf.ndim != 3 or wf.shape[2] != xf.shape[-1]:
        raise TesselConfigError(f"dwconv_acc: weight {wf.shape} is not (kh, kw, {xf.shape[-1]})")
    kernel = (wf.shape[0], wf.shape[1])
    s, d, p, out = _geometry(xf, kernel, stride, dilation, pad, out_hw)
    total = np.zeros((*xf.shape[:-3], out[0], out[1], xf.shape[-1]))
    taps = _windows(xf, kernel, s, d, p, out)
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            vals, mask = next(taps)
            total += np.where(mask, vals, 0.0) * wf[ky, kx]
    return _accumulate(total, acc, wide)


def matmul_acc(a: npt.ArrayLike, b: npt.ArrayLike, a_zp: int = 0, b_zp: int = 0,
               acc: npt.ArrayLike | None = None) -> np.ndarray:
    """MATMUL: int8 ``a (..., m, k)`` x int8 ``b (..., k, n)`` with zero points subtracted:
    ``acc = wrap32(sum_t (a[i, t] - a_zp) * (b[t, j] - b_zp))`` (leading dims broadcast); an
    int16 ``a``: the wide accumulator (``wrap48``, int64)."""
    wide = is_wide(a)
    af = _centred_f64(a, a_zp, "matmul_acc a", wide)
    bf = _centred_f64(b, b_zp, "matmul_acc b")
    if af.ndim < 2 or bf.ndim < 2 or af.shape[-1] != bf.shape[-2]:
        raise TesselConfigError(f"matmul_acc: shapes {af.shape} and {bf.shape} do not multiply")
    return _accumulate(np.matmul(af, bf), acc, wide)
