"""Hypothesis tests of fixedpoint over int32, against plain-int and exact-rational maths."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import fixedpoint_ref as ref
from tessel.isa import fixedpoint as fp

INT32 = st.integers(fp.INT32_MIN, fp.INT32_MAX)
INT32_LISTS = st.lists(INT32, min_size=1, max_size=64)
Q31 = st.integers(0, fp.INT32_MAX)
SHIFT = st.integers(fp.MIN_SHIFT, fp.MAX_SHIFT)
FAST = settings(max_examples=300, deadline=None)


def _round_half_up(q: Fraction) -> int:
    return math.floor(q + Fraction(1, 2))


def _round_half_away(q: Fraction) -> int:
    mag = math.floor(abs(q) + Fraction(1, 2))
    return -mag if q < 0 else mag


@FAST
@given(INT32_LISTS, INT32)
def test_srdhm_matches_reference_and_exact_rounding(xs: list[int], b: int) -> None:
    got = fp.saturating_rounding_doubling_high_mul(np.array(xs), b).tolist()
    assert got == [ref.srdhm_ref(a, b) for a in xs]
    for a, g in zip(xs, got, strict=True):
        if not (a == b == fp.INT32_MIN):
            assert g == _round_half_up(Fraction(a * b, 2**31))


@FAST
@given(INT32_LISTS, st.integers(0, 31))
def test_rdbpot_matches_reference_and_exact_rounding(xs: list[int], e: int) -> None:
    got = fp.rounding_divide_by_pot(np.array(xs), e).tolist()
    assert got == [ref.rdbpot_ref(x, e) for x in xs]
    assert got == [_round_half_away(Fraction(x, 2**e)) for x in xs]


@FAST
@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=64), st.integers(1, 2**20))
def test_rounding_div_matches_reference_and_exact_rounding(xs: list[int], n: int) -> None:
    got = fp.rounding_div(np.array(xs, dtype=np.int64), n).tolist()
    assert got == [ref.rounding_div_ref(x, n) for x in xs]
    assert got == [_round_half_away(Fraction(x, n)) for x in xs]


@FAST
@given(INT32_LISTS, Q31, SHIFT)
def test_mbqm_matches_reference(xs: list[int], q31: int, shift: int) -> None:
    got = fp.multiply_by_quantized_multiplier(np.array(xs), q31, shift).tolist()
    assert got == [ref.mbqm_ref(x, q31, shift) for x in xs]


@FAST
@given(INT32_LISTS, st.integers(2**30, fp.INT32_MAX), st.integers(fp.MIN_SHIFT, 0))
def test_mbqm_is_within_one_of_exact_product(xs: list[int], q31: int, shift: int) -> None:
    got = fp.multiply_by_quantized_multiplier(np.array(xs), q31, shift).tolist()
    for x, g in zip(xs, got, strict=True):
        assert abs(Fraction(g) - Fraction(x * q31, 2 ** (31 - shift))) <= 1


@st.composite
def _requant_case(draw):
    channels = draw(st.integers(1, 5))
    per = draw(st.integers(1, 6))
    acc = draw(st.lists(INT32, min_size=channels * per, max_size=channels * per))
    bias = draw(st.lists(INT32, min_size=channels, max_size=channels))
    q31 = draw(st.lists(Q31, min_size=channels, max_size=channels))
    shift = draw(st.lists(SHIFT, min_size=channels, max_size=channels))
    qmin, qmax = draw(st.sampled_from([(-128, 127), (-32768, 32767), (-127, 127), (0, 6)]))
    zp = draw(st.integers(qmin, qmax))
    return channels, per, acc, bias, q31, shift, zp, qmin, qmax


@FAST
@given(_requant_case())
def test_requantize_per_channel_matches_reference(case) -> None:
    channels, per, acc, bias, q31, shift, zp, qmin, qmax = case
    acc_arr = np.array(acc, dtype=np.int32).reshape(per, channels)  # channels last (axis -1)
    got = fp.requantize(acc_arr, np.array(bias), np.array(q31), np.array(shift), zp, qmin, qmax)
    for i in range(per):
        for c in range(channels):
            want = ref.requantize_ref(int(acc_arr[i, c]), bias[c], q31[c], shift[c], zp, qmin, qmax)
            assert int(got[i, c]) == want


@FAST
@given(st.floats(min_value=2.0**-32, max_value=2.0**30 * (1 - 2.0**-31)))
def test_quantize_multiplier_round_trip_error_bound(real: float) -> None:
    q31, shift = fp.quantize_multiplier(real)
    assert 2**30 <= q31 < 2**31
    assert fp.MIN_SHIFT <= shift <= fp.MAX_SHIFT
    err = abs(Fraction(q31) * Fraction(2) ** (shift - 31) - Fraction(real))
    assert err <= Fraction(real) * Fraction(1, 2**31)


@FAST
@given(st.floats(min_value=0.0, max_value=2.0**-32 * (1 - 2.0**-31)))
def test_quantize_multiplier_flushes_tiny_to_zero(real: float) -> None:
    assert fp.quantize_multiplier(real) == (0, 0)
