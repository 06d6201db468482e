"""The simulator's hot-loop form of Tessel's fixed-point requantisation (unchecked, in place).

``tessel.quant.fixedpoint`` is the one definition of the rounding rules; its vectorised
functions range-check every array and build several temporaries per step, which made
requantisation half of a simulated ResNet-18. The functions here compute the same values
(tests/unit/sim/test_fastfix.py checks them exhaustively on edge values and randomly against
the ``*_ref`` plain-integer references) with a few in-place int64 passes and no checks on the
data: callers pass int64 arrays whose values are already inside int32, and parameters that
the instruction's static checks have validated (``0 <= q31 < 2^31``, ``-31 <= shift <= 30``).

Two identities make it cheap (both follow from the definitions in docs/numerics.md):

* SRDHM ``round(a * b / 2^31)`` with halves towards +inf is ``(a * b + 2^30) >> 31`` (floor
  shift) for every ``b >= 0``: gemmlowp's nudge of ``1 - 2^30`` for negative products followed
  by C's truncating division lands on the same integer; ``INT32_MIN * INT32_MIN`` cannot occur
  because ``q31 < 2^31``;
* the rounding right shift by ``e >= 1`` (halves away from zero) is
  ``(x + 2^(e-1) - [x < 0]) >> e`` (floor shift); by ``e = 0`` it is ``x``.
"""

from __future__ import annotations

import numpy as np

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
I64 = np.int64


def mbqm_inplace(t: np.ndarray, q31: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """``t = MultiplyByQuantizedMultiplier(t, q31, shift)`` on an int64 array within int32.

    ``q31`` / ``shift`` are scalars or arrays broadcasting against ``t``. Returns ``t``.
    """
    if isinstance(shift, int | np.integer) and isinstance(q31, int | np.integer):
        return _mbqm_scalar(t, int(q31), int(shift))
    shift = np.asarray(shift, I64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    if left.any():
        np.left_shift(t, left, out=t)  # |t| <= 2^31, left <= 30: no int64 overflow
        np.maximum(t, INT32_MIN, out=t)
        np.minimum(t, INT32_MAX, out=t)
    np.multiply(t, np.asarray(q31, I64), out=t)  # |t * q31| < 2^62
    t += 1 << 30
    t >>= 31
    if right.any():
        sign = t >> 63  # -1 where negative
        if not right.all():
            sign *= right > 0
        t += sign
        t += np.left_shift(I64(1), right) >> 1
        np.right_shift(t, right, out=t)
    return t


def _mbqm_scalar(t: np.ndarray, q31: int, shift: int) -> np.ndarray:
    """``mbqm_inplace`` for one multiplier (ELTWISE): the same steps on Python ints."""
    if shift > 0:
        t <<= shift
        np.maximum(t, INT32_MIN, out=t)
        np.minimum(t, INT32_MAX, out=t)
    t *= q31
    t += 1 << 30
    t >>= 31
    if shift < 0:
        t += t >> 63
        t += 1 << (-shift - 1)
        t >>= -shift
    return t


def requantize_fast(acc: np.ndarray, bias: np.ndarray, q31: np.ndarray, shift: np.ndarray,
                    zp: int, lo: int, hi: int, dtype: np.dtype) -> np.ndarray:
    """``clamp(MBQM(sat32(acc + bias), q31, shift) + zp, lo, hi)`` as ``dtype``.

    ``acc`` is int32 with channels last; ``bias`` / ``q31`` / ``shift`` are int64, per channel
    (length ``acc.shape[-1]``) or length 1. Equal to ``tessel.quant.fixedpoint.requantize``.
    ``requant_plan`` + ``requant_apply``: the parameters' part computed once, reusable.
    """
    return requant_apply(acc, requant_plan(bias, q31, shift, zp, lo, hi), dtype)


def requant_plan(bias: np.ndarray, q31: np.ndarray, shift: np.ndarray, zp: int, lo: int,
                 hi: int) -> tuple:
    """Everything of ``requantize_fast`` that depends only on the parameters.

    Without a left shift, ``y(t) = MBQM(t, q31, shift)`` is non-decreasing in ``t``, so
    saturating ``acc + bias`` first equals clamping ``y`` to ``[y(INT32_MIN), y(INT32_MAX)]``
    (``|acc + bias| <= 2^32`` keeps ``t * q31`` inside int64). That lets the bias, the SRDHM
    nudge and the zero point fold into per-channel constants: ten passes over the data.
    """
    if (shift > 0).any():
        return (True, bias, q31, shift, zp, lo, hi)
    right = -shift
    ends = mbqm_inplace(np.array([[INT32_MIN], [INT32_MAX]], I64).repeat(len(q31), 1), q31, shift)
    lo_c = np.maximum(ends[0] + zp, lo)
    hi_c = np.minimum(ends[1] + zp, hi)
    add = bias * q31 + (1 << 30)
    any_right = bool(right.any())
    zero_right = None if not any_right or right.all() else (right == 0).astype(I64)
    rounding = (np.left_shift(I64(1), right) >> 1) + np.left_shift(I64(zp), right)
    # a clamp floor at or above the zero point (a fused ReLU): every negative SRDHM value
    # rounds to <= 0 with or without the away-from-zero correction, so y <= zp <= lo_c
    # either way: the correction's two passes are skipped
    no_sign = bool((lo_c >= zp).all())
    return (False, q31, add, right, any_right, zero_right, rounding, zp, lo_c, hi_c, no_sign)


def requant_apply(acc: np.ndarray, plan: tuple, dtype: np.dtype) -> np.ndarray:
    """``requantize_fast`` with the parameters' part from ``requant_plan``."""
    if plan[0]:
        _, bias, q31, shift, zp, lo, hi = plan
        t = np.add(acc, bias, dtype=I64)
        np.clip(t, INT32_MIN, INT32_MAX, out=t)
        mbqm_inplace(t, q31, shift)
        t += zp
        np.maximum(t, lo, out=t)
        np.minimum(t, hi, out=t)
        return t.astype(dtype)
    return _fast_requant(acc, plan).astype(dtype)


def requant_into(acc: np.ndarray, plan: tuple, dst: np.ndarray) -> None:
    """``dst[...] = requant_apply(acc, plan, dst.dtype)`` without the intermediate output
    array: the clamped int64 values (inside ``dst``'s type) are cast while being stored."""
    if plan[0]:
        dst[...] = requant_apply(acc, plan, dst.dtype)
        return
    np.copyto(dst, _fast_requant(acc, plan), casting="unsafe")


def _fast_requant(acc: np.ndarray, plan: tuple) -> np.ndarray:
    """The clamped int64 result of a non-saturating plan (``requant_plan``'s second form)."""
    _, q31, add, right, any_right, zero_right, rounding, zp, lo_c, hi_c, no_sign = plan
    t = np.multiply(acc, q31, dtype=I64)  # (acc + bias) * q31 + 2^30, |.| < 2^63
    t += add
    t >>= 31  # SRDHM
    if any_right:  # rounding shift (halves away from zero) and the zero point in one floor shift
        if not no_sign:
            sign = t >> 63  # -1 where negative
            t += sign
            if zero_right is not None:
                sign *= zero_right
                t -= sign
        t += rounding
        np.right_shift(t, right, out=t)
    else:
        t += zp
    np.maximum(t, lo_c, out=t)  # np.clip: slower than the two passes
    np.minimum(t, hi_c, out=t)
    return t
