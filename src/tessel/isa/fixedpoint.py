"""Fixed-point arithmetic of Tessel's integer requantisation (bit-exact, gemmlowp / TFLite rules).

This module is the single definition of how the golden model and the NPU's vector engine turn an
int32 accumulator into an int8 / int16 activation. docs/numerics.md writes the same rules as
formulas. The numpy-vectorised functions (``saturating_rounding_doubling_high_mul``,
``rounding_divide_by_pot``, ``multiply_by_quantized_multiplier``, ``requantize``,
``rounding_div``, ``saturate``) keep every intermediate in int64 and every result exact, so
they never wrap or lose a bit; the tests hold them against a plain-Python-integer reference
written as literally as possible after gemmlowp's C code (tests/fixedpoint_ref.py), exhaustively
where the domain allows.

The requantisation rounds in one of two modes (:class:`Rounding`): DOUBLE, gemmlowp's SRDHM then
the rounding right shift (the default, TFLite's rule), or SINGLE, one exact 64-bit product and one
rounding shift, ``(t * q31 + 2**(s-1)) >> s`` with ``s = 31 - shift`` (TOSA RESCALE's
``SINGLE_ROUND``). The rounding rules of DOUBLE, with every other division in Tessel's maths:

* SRDHM (Q31 multiply): ``round(a * b / 2**31)`` with halves rounded **up** (towards +inf), and
  ``INT32_MIN * INT32_MIN`` saturating to ``INT32_MAX``;
* every division (the rounding right shift and the pooling / mean division):
  ``round(x / n)`` with halves rounded **away from zero** (:func:`rounding_div` is that rule; the
  shift is the same rule with ``n = 2**exponent``).
"""

from __future__ import annotations

import enum
import math

import numpy as np
import numpy.typing as npt

from tessel.errors import TesselConfigError

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
Q31_ONE = 2**31
# the range of a multiplier's shift, and so of the instructions' `*_shift` fields
# (tessel.isa.groups.multiplier)
MIN_SHIFT = -31  # smallest right shift a multiplier may use (rounding_divide_by_pot exponent 31)
MAX_SHIFT = 30  # largest left shift: multipliers must be < 2**30
# the wide accumulator of int16 x int8 / int4 MACs holds 48-bit values (TOSA's int48)
ACC48_MIN = -(2**47)
ACC48_MAX = 2**47 - 1
MAX_WIDE_SHIFT = 14  # requantize_wide: s = 15 - shift must be >= 1



class Rounding(enum.IntEnum):
    """How the requantisation rounds ``t * q31 * 2**(shift - 31)`` (docs/numerics.md)."""

    DOUBLE = 0  # SRDHM (halves up), then the rounding right shift (halves away from zero)
    SINGLE = 1  # one rounding of the exact product: (t q31 + 2^(s-1)) >> s, s = 31 - shift


IntArray = npt.NDArray[np.integer]
IntLike = int | npt.ArrayLike


# --------------------------------------------------------------------------------------------
# Quantising a real multiplier
# --------------------------------------------------------------------------------------------


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Quantise ``real >= 0`` to ``(q31, shift)`` with ``real ~= q31 * 2**(shift - 31)``.

    TFLite's ``QuantizeMultiplier`` convention: ``q31`` is in ``[2**30, 2**31)`` and the relative
    error is at most ``2**-31``. Limits: ``real == 0`` and reals below ``2**-32`` (that do not round
    up to it) give ``(0, 0)`` (exact: ``|x * real| < 0.5`` for every int32 ``x``, so the rounded
    product is 0 anyway); reals that round to ``2**30`` or more (shift > 30), negative, NaN or
    infinite reals raise ``TesselConfigError``.
    """
    if not math.isfinite(real) or real < 0.0:
        raise TesselConfigError(
            f"quantize_multiplier: multiplier must be finite and >= 0, got {real!r}"
        )
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)  # real = mantissa * 2**shift, mantissa in [0.5, 1)
    q31 = round(mantissa * Q31_ONE)  # exact: mantissa has 53 bits, the product is a float
    if q31 == Q31_ONE:  # mantissa rounded up to 1.0
        q31, shift = q31 // 2, shift + 1
    if shift < MIN_SHIFT:
        return 0, 0
    if shift > MAX_SHIFT:
        raise TesselConfigError(
            f"quantize_multiplier: multiplier {real!r} rounds to >= 2**{MAX_SHIFT}; the "
            f"requantiser's left shift is limited to {MAX_SHIFT} bits"
        )
    return int(q31), int(shift)


def quantize_multipliers(reals: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`quantize_multiplier` (per-channel scales): int64 q31 and shift."""
    flat = np.asarray(reals, dtype=np.float64).reshape(-1)
    pairs = [quantize_multiplier(float(r)) for r in flat]
    q31 = np.array([p[0] for p in pairs], dtype=np.int64).reshape(np.shape(reals))
    shift = np.array([p[1] for p in pairs], dtype=np.int64).reshape(np.shape(reals))
    return q31, shift


def multiplier_value(q31: int, shift: int) -> float:
    """The real number ``q31 * 2**(shift - 31)`` that a quantised multiplier stands for."""
    return math.ldexp(q31, shift - 31)


# --------------------------------------------------------------------------------------------
# Vectorised (numpy, int64 intermediates, exact)
# --------------------------------------------------------------------------------------------


def _int64(x: IntLike, name: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """``x`` as an int64 array; raises if it is not integral or falls outside ``[lo, hi]``."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iub":
        raise TesselConfigError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and lo is not None and hi is not None:
        amin, amax = int(arr.min()), int(arr.max())
        if amin < lo or amax > hi:
            raise TesselConfigError(f"{name}: values [{amin}, {amax}] outside [{lo}, {hi}]")
    return arr


def _int32_range(x: IntLike, name: str) -> np.ndarray:
    return _int64(x, name, INT32_MIN, INT32_MAX)


def saturate(x: IntLike, dtype: npt.DTypeLike) -> np.ndarray:
    """Clamp ``x`` to the range of integer ``dtype`` and cast to it (saturating, never wrapping)."""
    info = np.iinfo(dtype)
    return np.clip(_int64(x, "saturate"), info.min, info.max).astype(dtype)


def rounding_div(x: IntLike, n: IntLike) -> np.ndarray:
    """``round(x / n)`` for integers, ``n >= 1``, halves rounded away from zero (int64 result).

    THE division rule of Tessel: ``sign(x) * floor((|x| + floor(n / 2)) / n)``. Used by pooling
    and mean (``n`` = element count) and, with ``n = 2**exponent``, by the rounding right shift.
    """
    xs = _int64(x, "rounding_div x", -(2**62), 2**62)
    ns = _int64(n, "rounding_div n", 1, 2**62)
    mag = (np.abs(xs) + ns // 2) // ns
    return np.where(xs < 0, -mag, mag)


def rounding_divide_by_pot(x: IntLike, exponent: IntLike) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded half away from zero.

    ``x`` int32 values, ``0 <= exponent <= 31`` (scalar or broadcastable array). Returns int32.
    """
    xs = _int32_range(x, "rounding_divide_by_pot x")
    es = _int64(exponent, "rounding_divide_by_pot exponent", 0, 31)
    return _rdbpot(xs, es).astype(np.int32)


def _rdbpot(xs: np.ndarray, es: np.ndarray) -> np.ndarray:
    """``rounding_div(xs, 2**es)`` (int64 ``xs`` within int32, ``0 <= es <= 31``) by floor
    shifts: ``(x + 2**(e-1) - [x < 0]) >> e`` for ``e >= 1`` (halves away from zero: for
    ``x = -m``, ``floor((2**(e-1) - 1 - m) / 2**e) = -floor((m + 2**(e-1)) / 2**e)``) and
    ``x`` for ``e = 0``. A new int64 array."""
    t = np.asarray(xs + (np.left_shift(np.int64(1), es) >> 1))  # 0-d stays an array
    if es.ndim == 0:
        if es:
            t += xs >> 63  # -1 where x < 0
    elif es.any():
        t += (xs >> 63) * (es > 0) if not es.all() else xs >> 63
    t >>= es
    return t


def saturating_rounding_doubling_high_mul(a: IntLike, b: IntLike) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: ``round(a * b / 2**31)`` for int32 a, b.

    Halves round towards +inf (the nudge is ``2**30`` for ``a*b >= 0`` and ``1 - 2**30`` otherwise,
    then C division truncates). The one overflow, ``INT32_MIN * INT32_MIN``, saturates to
    ``INT32_MAX``. Returns int32.
    """
    return _srdhm(_int32_range(a, "srdhm a"), _int32_range(b, "srdhm b")).astype(np.int32)


def _srdhm(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    """SRDHM of int64 arrays within int32, as a new int64 array: ``(a*b + 2**30) >> 31``.

    That is gemmlowp's rule for either sign of ``a*b`` (|ab| <= 2**62: exact in int64): for
    ``ab >= 0`` it is the nudge of ``2**30`` and the division; for ``ab < 0``, C's truncation of
    ``(ab + 1 - 2**30) / 2**31`` (a negative numerator) is its ceiling, ``floor((ab + 2**30) /
    2**31)``. The one result above INT32_MAX, ``2**31`` from ``INT32_MIN * INT32_MIN``, is
    saturated."""
    t = np.asarray(a64 * b64)  # 0-d stays an array (for the in-place steps)
    t += 1 << 30
    t >>= 31
    np.minimum(t, INT32_MAX, out=t)
    return t


def multiply_by_quantized_multiplier(x: IntLike, q31: IntLike, shift: IntLike) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier``: ``x * q31 * 2**(shift - 31)``, rounded (int32).

    ``x << max(shift, 0)`` (saturated to int32, where TFLite's C code would overflow), then SRDHM
    by ``q31``, then the rounding right shift by ``max(-shift, 0)``. ``q31`` in ``[0, 2**31)``,
    ``shift`` in ``[-31, 30]``; all three broadcast against each other.
    """
    xs = _int32_range(x, "multiply_by_quantized_multiplier x")
    return _mbqm(xs, _int64(q31, "multiply_by_quantized_multiplier q31", 0, INT32_MAX),
                 _int64(shift, "multiply_by_quantized_multiplier shift", MIN_SHIFT, MAX_SHIFT)
                 ).astype(np.int32)


def _mbqm(xs: np.ndarray, qs: np.ndarray, ss: np.ndarray) -> np.ndarray:
    """``multiply_by_quantized_multiplier`` of checked int64 arrays, as a new int64 array."""
    left = np.maximum(ss, 0)
    if left.any():  # |x| < 2**31, left <= 30: the shift stays inside int64
        xs = np.clip(np.left_shift(xs, left), INT32_MIN, INT32_MAX)
    return _rdbpot(_srdhm(xs, qs), np.maximum(-ss, 0))


def single_round_scale(xs: np.ndarray, qs: np.ndarray, ss: np.ndarray) -> np.ndarray:
    """SINGLE rounding of checked int64 arrays: ``(t q31 + 2^(s-1)) >> s``, ``s = 31 - shift``.

    ``|t| <= 2^31``, ``q31 < 2^31`` and ``1 <= s <= 62``, so the product and its rounding half
    stay inside int64 (``2^62 + 2^61``); halves round up (towards +inf), as TOSA's
    ``apply_scale_32`` with ``double_round = false`` does. A new int64 array."""
    s = 31 - ss
    t = np.asarray(xs * qs)
    t += np.left_shift(np.int64(1), s - 1)
    t >>= s
    return t


def _along_axis(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """Reshape a per-channel vector so that it broadcasts along ``axis`` of an ``ndim`` array."""
    if v.ndim == 0:
        return v
    if v.ndim != 1:
        raise TesselConfigError(f"per-channel parameter must be scalar or 1-D, not {v.shape}")
    if not -ndim <= axis < ndim:
        raise TesselConfigError(f"channel axis {axis} out of range for a {ndim}-D tensor")
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return v.reshape(shape)


def requantize(
    acc_int32: IntLike,
    bias: IntLike | None,
    q31: IntLike,
    shift: IntLike,
    zero_point: int,
    qmin: int,
    qmax: int,
    axis: int = -1,
    out_dtype: npt.DTypeLike = np.int32,
    rounding: Rounding = Rounding.DOUBLE,
) -> np.ndarray:
    """int32 accumulator -> activation: ``clamp(MBQM(sat32(acc + bias), q31, shift) + zp)``.

    ``rounding`` SINGLE replaces MBQM by :func:`single_round_scale` (one rounding, no saturation
    of a left-shifted value: the product is exact).

    ``bias``, ``q31`` and ``shift`` are scalars or per-channel vectors along ``axis`` of ``acc``.
    ``acc + bias`` is formed in int64 and saturated to int32 (the NPU's accumulator adder
    saturates); the result is clamped to ``[qmin, qmax]`` and returned as ``out_dtype``.
    """
    if qmin > qmax:
        raise TesselConfigError(f"requantize: qmin {qmin} > qmax {qmax}")
    acc = _int32_range(acc_int32, "requantize acc")
    if bias is not None:
        acc = acc + _along_axis(_int32_range(bias, "requantize bias"), acc.ndim, axis)
        np.clip(acc, INT32_MIN, INT32_MAX, out=acc)
    qs = _int64(_along_axis(np.asarray(q31), acc.ndim, axis),
                "multiply_by_quantized_multiplier q31", 0, INT32_MAX)
    ss = _int64(_along_axis(np.asarray(shift), acc.ndim, axis),
                "multiply_by_quantized_multiplier shift", MIN_SHIFT, MAX_SHIFT)
    scaled = single_round_scale(acc, qs, ss) if rounding == Rounding.SINGLE else _mbqm(acc, qs, ss)
    scaled += int(zero_point)
    return np.clip(scaled, qmin, qmax, out=scaled).astype(out_dtype)


# --------------------------------------------------------------------------------------------
# The wide accumulator (int16 activations x int8 / int4 weights)
# --------------------------------------------------------------------------------------------


def reduce_multiplier(q31: IntLike) -> np.ndarray:
    """A Q31 multiplier rounded to the 16-bit multiplier of the wide requantisation:
    ``(q31 + 2**15) >> 16``, or ``0x7FFF`` for ``q31 >= 0x7FFF0000`` (where that would reach
    ``2**15``); TFLite's rule for its 64-bit accumulators. An int64 array."""
    qs = _int64(q31, "reduce_multiplier q31", 0, INT32_MAX)
    return np.where(qs < 0x7FFF0000, (qs + 2**15) >> 16, 0x7FFF)


def requantize_wide(
    acc: IntLike,
    bias: IntLike | None,
    q31: IntLike,
    shift: IntLike,
    zero_point: int,
    qmin: int,
    qmax: int,
    axis: int = -1,
    out_dtype: npt.DTypeLike = np.int32,
) -> np.ndarray:
    """Wide (48-bit) accumulator -> activation, one rounding:
    ``clamp(sat32((sat48(acc + bias) * q15 + 2**(s-1)) >> s) + zp, qmin, qmax)`` with
    ``q15 = reduce_multiplier(q31)`` and ``s = 15 - shift`` (``shift <= MAX_WIDE_SHIFT``).

    ``|sat48(.)| <= 2**47`` and ``q15 <= 2**15``, so the product and its rounding half stay
    inside int64; the arithmetic shift rounds halves up (towards +inf). ``bias``, ``q31`` and
    ``shift`` are scalars or per-channel vectors along ``axis`` of ``acc``.
    """
    if qmin > qmax:
        raise TesselConfigError(f"requantize_wide: qmin {qmin} > qmax {qmax}")
    v = _int64(acc, "requantize_wide acc", ACC48_MIN, ACC48_MAX)
    if bias is not None:
        v = v + _along_axis(_int64(bias, "requantize_wide bias", ACC48_MIN, ACC48_MAX),
                            v.ndim, axis)
        np.clip(v, ACC48_MIN, ACC48_MAX, out=v)
    q15 = _along_axis(reduce_multiplier(np.asarray(q31)), v.ndim, axis)
    ss = _int64(_along_axis(np.asarray(shift), v.ndim, axis), "requantize_wide shift",
                MIN_SHIFT, MAX_WIDE_SHIFT)
    s = 15 - ss
    t = v * q15
    t += np.left_shift(np.int64(1), s - 1)
    t >>= s
    np.clip(t, INT32_MIN, INT32_MAX, out=t)
    t += int(zero_point)
    return np.clip(t, qmin, qmax, out=t).astype(out_dtype)
