"""The simulator's hot-loop form of Tessel's fixed-point requantisation (unchecked, in place).

``tessel.isa.fixedpoint`` is the one definition of the rounding rules; its vectorised
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

The simulator's fast path adds a float64 form of a FUSED plan (``float_plan``): the
accumulator clamped in int32 to the range whose outputs are not saturated, then one float64
multiply-add and a floor, exact by a bound proved per channel from the parameters alone (the
reference handler keeps the integer forms, so the fast path is tested against them).
"""

from __future__ import annotations

from typing import NamedTuple

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
    (length ``acc.shape[-1]``) or length 1. Equal to ``tessel.isa.fixedpoint.requantize``.
    ``requant_plan`` + ``requant_apply``: the parameters' part computed once, reusable.
    """
    return requant_apply(acc, requant_plan(bias, q31, shift, zp, lo, hi), dtype)


GENERAL, LEFT, FUSED, FLOAT = 0, 1, 2, 3  # the forms of a plan (its first element)
_I64_LIMIT = 2**63


def requant_plan(bias: np.ndarray, q31: np.ndarray, shift: np.ndarray, zp: int, lo: int,
                 hi: int) -> tuple:
    """Everything of ``requantize_fast`` that depends only on the parameters.

    Without a left shift, ``y(t) = MBQM(t, q31, shift)`` is non-decreasing in ``t``, so
    saturating ``acc + bias`` first equals clamping ``y`` to ``[y(INT32_MIN), y(INT32_MAX)]``
    (``|acc + bias| <= 2^32`` keeps ``t * q31`` inside int64). That lets the bias, the SRDHM
    nudge and the zero point fold into per-channel constants (the GENERAL form, ten passes
    over the data), and, where int64 has the room (``_fused``), the two floor shifts into one
    (the FUSED form, six to eight passes). LEFT: a left shift, the reference steps.
    """
    if (shift > 0).any():
        return (LEFT, bias, q31, shift, zp, lo, hi)
    right = -shift
    ends = mbqm_inplace(np.array([[INT32_MIN], [INT32_MAX]], I64).repeat(len(q31), 1), q31, shift)
    # each end inside [lo, hi]: when [y(INT32_MIN), y(INT32_MAX)] + zp misses the clamp range
    # the output is the nearer clamp bound (lo_c = hi_c), never outside [lo, hi]
    lo_c = np.minimum(np.maximum(ends[0] + zp, lo), hi)
    hi_c = np.maximum(np.minimum(ends[1] + zp, hi), lo)
    add = bias * q31 + (1 << 30)
    any_right = bool(right.any())
    zero_right = None if not any_right or right.all() else (right == 0).astype(I64)
    rounding = (np.left_shift(I64(1), right) >> 1) + np.left_shift(I64(zp), right)
    # a clamp floor at or above the zero point (a fused ReLU): every negative SRDHM value
    # rounds to <= 0 with or without the away-from-zero correction, so y <= zp <= lo_c
    # either way: the correction's two passes are skipped
    no_sign = bool((lo_c >= zp).all())
    fused = _fused(q31, add, right, rounding, no_sign or not any_right, lo_c, hi_c)
    if fused is not None:
        return fused
    return (GENERAL, q31, add, right, any_right, zero_right, rounding, zp, lo_c, hi_c, no_sign)


def _fused(q31: np.ndarray, add: np.ndarray, right: np.ndarray, rounding: np.ndarray,
           no_sign: bool, lo_c: np.ndarray, hi_c: np.ndarray) -> tuple | None:
    """The FUSED form of a GENERAL plan, or None when int64 could overflow.

    With ``X = acc * q31 + add`` the GENERAL form computes ``t = X >> 31`` and then (for a
    right shift ``r >= 1``) ``(t + rounding - [t < 0]) >> r``, or ``t + zp`` (``r = 0``,
    where ``rounding = zp``). Floor shifts compose, ``(floor(X / 2^31) + k) >> r =
    (X + k 2^31) >> (31 + r)``, and ``t < 0`` exactly when ``X < 0``, so
    ``y = (X + rounding 2^31 + ((X >> 63) & K)) >> (31 + r)`` with ``K = -2^31`` where
    ``r > 0`` (else 0). Needs ``|X + rounding 2^31| + 2^31 < 2^63`` for every int32 ``acc``
    (checked here in Python integers, per channel). ``no_sign``: no correction (the plan's
    ``K`` is None and the rounding term is folded into ``add``).
    """
    for q, a, c in zip(q31.tolist(), add.tolist(), rounding.tolist(), strict=True):
        a2 = a + (c << 31)
        if max(abs(INT32_MIN * q + a2), abs(INT32_MAX * q + a2)) + (1 << 31) >= _I64_LIMIT:
            return None
    c2 = np.left_shift(rounding, 31)
    total = right + 31
    if no_sign:
        return (FUSED, q31, add + c2, None, total, None, lo_c, hi_c)
    kmask = np.where(right > 0, I64(-(1 << 31)), I64(0))
    return (FUSED, q31, add, c2, total, kmask, lo_c, hi_c)


_F64_EXACT = 2**53


def float_plan(plan: tuple) -> tuple | None:
    """The FLOAT form of a FUSED plan without the sign correction (a fused ReLU floor, or no
    right shift), or None where it is not proven exact (any other form or a correction, a
    zero multiplier, an output step that jumps over a clamp bound, no room in float64).

    Such a plan computes ``clamp(y(acc), lo_c, hi_c)`` with ``y(acc) = floor((acc q31 + B) /
    2^T)`` (``B`` = its ``add``), non-decreasing in ``acc`` (``q31 > 0``). With ``a_lo`` the
    smallest int32 with ``y >= lo_c`` and ``a_hi`` the largest with ``y <= hi_c`` (binary
    searches on the exact int64 steps), ``clamp(y(acc)) = y(clamp(acc, a_lo, a_hi))`` when
    ``y(a_lo) = lo_c`` (or ``a_lo = INT32_MIN``) and ``y(a_hi) = hi_c`` (or ``a_hi =
    INT32_MAX``): a clamped accumulator gets its bound's output, any other keeps its own. On
    ``[a_lo, a_hi]`` the float64 steps ``floor(acc Q + A)``, ``Q = q31 2^-T``, ``A = B 2^-T``
    are exact when ``|B|``, ``|acc q31|`` and ``|acc q31 + B|`` are below ``2^53`` there
    (checked at ``a_lo`` and ``a_hi``: the product's magnitude and the affine sum take their
    extremes at the ends): ``A``, the product and the sum are integer multiples of ``2^-T``
    below ``2^(53 - T)`` in magnitude (scaling by a power of two is exact), so nothing rounds
    before the floor (a bias of the other sign no longer counts twice, as it did in the
    bound ``max |acc| q31 + |B|``); the outputs lie in ``[lo_c, hi_c]``, inside
    the output type, so the final clamp is gone as well. (The correction as a masked float64
    pass cost more than the FUSED form's four int64 passes: not done.)
    """
    if plan[0] != FUSED or plan[5] is not None:
        return None
    _, q31, add, _, total, _, lo_c, hi_c = plan
    if (q31 <= 0).any() or (lo_c > hi_c).any():
        return None
    a_lo = _first_at_least(plan, lo_c)
    a_hi = _first_at_least(plan, hi_c + 1) - 1
    at_lo = _unclamped(plan, np.clip(a_lo, INT32_MIN, INT32_MAX))
    at_hi = _unclamped(plan, np.clip(a_hi, INT32_MIN, INT32_MAX))
    if ((a_lo > a_hi).any() or ((a_lo > INT32_MIN) & (at_lo != lo_c)).any()
            or ((a_hi < INT32_MAX) & (at_hi != hi_c)).any()):
        return None
    for lo, hi, q, b in zip(a_lo.tolist(), a_hi.tolist(), q31.tolist(), add.tolist(),
                            strict=True):
        ends = (abs(lo) * q, abs(hi) * q, abs(lo * q + b), abs(hi * q + b), abs(b))
        if max(ends) >= _F64_EXACT:
            return None
    scale = np.ldexp(1.0, -total)  # 2^-T per channel, exact
    i32 = np.dtype(np.int32)
    # q31 < 2^31 and |B| < 2^53 fit the significand: Q and A are exact
    return (FLOAT, a_lo.astype(i32), a_hi.astype(i32), q31 * scale,
            add.astype(np.float64) * scale)


def _unclamped(plan: tuple, acc: np.ndarray) -> np.ndarray:
    """``y(acc)`` of a FUSED plan without the sign correction, before its clamp: int64
    accumulators inside int32, one per channel (the plan's proof: no int64 overflow)."""
    _, q31, add, _, total, _, _, _ = plan
    return (acc * q31 + add) >> total


def _first_at_least(plan: tuple, target: np.ndarray) -> np.ndarray:
    """Per channel, the smallest int32 ``acc`` with ``_unclamped(acc) >= target``
    (``INT32_MAX + 1`` when none), by a binary search (``_unclamped`` is non-decreasing)."""
    lo = np.full(target.shape, INT32_MIN, I64)
    hi = np.full(target.shape, INT32_MAX + 1, I64)
    while (lo < hi).any():
        mid = (lo + hi) >> 1  # < hi <= INT32_MAX + 1 where lo < hi
        ok = _unclamped(plan, np.minimum(mid, INT32_MAX)) >= target
        open_ = lo < hi
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid + 1, lo)
    return lo


class Work(NamedTuple):
    """Work buffers of one accumulator shape (contiguous): two int64 ones (``_fast_requant``)
    and the FLOAT form's float64 (the first one's bytes) and int32 (the second's)."""

    i64: np.ndarray
    i64b: np.ndarray
    f64: np.ndarray
    i32: np.ndarray


def work_buffers(a: np.ndarray, b: np.ndarray) -> Work:
    """``Work`` over two C-contiguous int64 arrays of the accumulator's shape."""
    raw = b.reshape(-1).view(np.int32)
    return Work(a, b, a.view(np.float64), raw[:a.size].reshape(a.shape))


def requant_apply(acc: np.ndarray, plan: tuple, dtype: np.dtype) -> np.ndarray:
    """``requantize_fast`` with the parameters' part from ``requant_plan`` (or
    ``float_plan``)."""
    if plan[0] == LEFT:
        _, bias, q31, shift, zp, lo, hi = plan
        t = np.add(acc, bias, dtype=I64)
        np.clip(t, INT32_MIN, INT32_MAX, out=t)
        mbqm_inplace(t, q31, shift)
        t += zp
        np.maximum(t, lo, out=t)
        np.minimum(t, hi, out=t)
        return t.astype(dtype)
    if plan[0] == FLOAT:
        return _float_requant(acc, plan).astype(dtype)
    return _fast_requant(acc, plan).astype(dtype)


def requant_into(acc: np.ndarray, dst: np.ndarray, work: Work | None, plan: tuple) -> None:
    """``dst[...] = requant_apply(acc, plan, dst.dtype)`` without the intermediate output
    array: the clamped values (integers inside ``dst``'s type) are cast while being stored.
    ``work``: buffers of ``acc``'s shape, or None (new arrays)."""
    if plan[0] == LEFT:  # its arrays per channel: acc in dst's shape
        dst[...] = requant_apply(acc.reshape(dst.shape), plan, dst.dtype)
        return
    if plan[0] == FLOAT:
        y = _float_requant(acc, plan, work)
    elif work is None:
        y = _fast_requant(acc, plan)
    else:
        y = _fast_requant(acc, plan, work.i64, work.i64b)
    np.copyto(dst, y.reshape(dst.shape), casting="unsafe")


def _float_requant(acc: np.ndarray, plan: tuple, work: Work | None = None) -> np.ndarray:
    """The float64 result (integers in ``[lo_c, hi_c]``) of a FLOAT plan (``float_plan``):
    ``acc`` clamped in int32, converted, one multiply-add and a floor (an int32 x float64
    multiply costs more than the conversion and a float64 one); in ``work.f64`` (None: new
    arrays). With ``work`` the passes run in its shape (e.g. rows of several tile rows, the
    plan's arrays tiled to match): ``acc`` of another shape is copied there first."""
    _, a_lo, a_hi, q, a = plan
    if work is None:
        c = np.maximum(acc, a_lo)
    else:
        c = work.i32
        if acc.shape != c.shape:
            np.copyto(c.reshape(acc.shape), acc)
            acc = c
        np.maximum(acc, a_lo, out=c)
    np.minimum(c, a_hi, out=c)
    if work is None:
        v = c.astype(np.float64)
    else:
        v = work.f64
        np.copyto(v, c)
    v *= q
    v += a
    return np.floor(v, out=v)


def _fast_requant(acc: np.ndarray, plan: tuple, buf: np.ndarray | None = None,
                  tmp: np.ndarray | None = None) -> np.ndarray:
    """The clamped int64 result of a FUSED or GENERAL plan (``requant_plan``), in ``buf``
    (None: a new array): a contiguous int64 array of ``acc``'s size, any shape the plan's
    arrays broadcast against (e.g. rows of several tile rows); ``tmp``: a second such buffer
    or None.
    (Every step is int64 with int64: numpy's mixed int32 / int64 loops cost 3-4x more.)"""
    if buf is None:
        t = acc.astype(I64)
    else:
        np.copyto(buf.reshape(acc.shape), acc)
        t = buf
    if plan[0] == FUSED:
        _, q31, add, c2, total, kmask, lo_c, hi_c = plan
        t *= q31
        t += add
        if kmask is not None:  # the away-from-zero correction where X < 0 (and r > 0)
            u = np.right_shift(t, 63, out=tmp)
            u &= kmask
            t += u
            t += c2
        np.right_shift(t, total, out=t)
        np.maximum(t, lo_c, out=t)
        np.minimum(t, hi_c, out=t)
        return t
    _, q31, add, right, any_right, zero_right, rounding, zp, lo_c, hi_c, no_sign = plan
    t *= q31  # (acc + bias) * q31 + 2^30, |.| < 2^63
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
