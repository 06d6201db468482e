"""Exhaustive tests of fixedpoint: all int8 / int16 inputs vs the plain-int reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fixedpoint_ref as ref
from tessel.errors import TesselConfigError
from tessel.isa import fixedpoint as fp

ALL_INT8 = np.arange(-128, 128, dtype=np.int64)
ALL_INT16 = np.arange(-32768, 32768, dtype=np.int64)

# A spread of real multipliers: flushed, tiny, exact powers of two, typical conv scales, > 1.
REALS = [1e-10, 2.0**-31.5, 3.3e-7, 1.7e-4, 2.0**-8, 0.0123, 0.25, 0.4999999, 0.5, 0.75,
         0.99999999, 1.0, 1.5, math.pi, 255.0, 1000.5, 2.0**20 + 0.7, 2.0**29.9]
RAW = [(0, 0), (1, 0), (12345, 5), (2**30, -31), (2**31 - 1, -31), (2**30, 0),
       (2**31 - 1, 0), (2**31 - 1, 30), (1518500250, -7), (1073741824, 12)]
PAIRS = sorted({fp.quantize_multiplier(r) for r in REALS} | set(RAW))


def _ref_mbqm(xs: np.ndarray, q31: int, shift: int) -> list[int]:
    return [ref.mbqm_ref(int(x), q31, shift) for x in xs]


@pytest.mark.parametrize("q31,shift", PAIRS)
def test_mbqm_all_int8_and_int16_match_reference(q31: int, shift: int) -> None:
    for xs in (ALL_INT8, ALL_INT16):
        got = fp.multiply_by_quantized_multiplier(xs, q31, shift)
        assert got.dtype == np.int32
        assert got.tolist() == _ref_mbqm(xs, q31, shift)


@pytest.mark.parametrize("q31,shift", PAIRS)
def test_mbqm_int16_error_is_at_most_one(q31: int, shift: int) -> None:
    """Double rounding costs at most one unit against the exact product (when not saturating)."""
    real = fp.multiplier_value(q31, shift)
    exact = ALL_INT16.astype(np.float64) * real
    got = fp.multiply_by_quantized_multiplier(ALL_INT16, q31, shift).astype(np.float64)
    ok = np.abs(ALL_INT16 << max(shift, 0)) <= fp.INT32_MAX  # else the left shift saturates
    assert np.all(np.abs(got[ok] - exact[ok]) <= 1.0)


def test_rdbpot_all_int16_every_exponent() -> None:
    for e in range(32):
        got = fp.rounding_divide_by_pot(ALL_INT16, e)
        assert got.tolist() == [ref.rdbpot_ref(int(x), e) for x in ALL_INT16], e


def test_rdbpot_rounds_half_away_from_zero() -> None:
    x = np.array([-7, -6, -5, -3, -2, -1, 0, 1, 2, 3, 5, 6, 7])
    assert fp.rounding_divide_by_pot(x, 1).tolist() == [-4, -3, -3, -2, -1, -1, 0, 1, 1, 2, 3, 3, 4]
    assert fp.rounding_divide_by_pot(x, 2).tolist() == [-2, -2, -1, -1, -1, 0, 0, 0, 1, 1, 1, 2, 2]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 9, 16, 49, 196, 1000])
def test_rounding_div_all_int16(n: int) -> None:
    got = fp.rounding_div(ALL_INT16, n)
    assert got.tolist() == [ref.rounding_div_ref(int(x), n) for x in ALL_INT16]


def test_rounding_div_equals_shift_for_powers_of_two() -> None:
    for e in range(16):
        by_pot = fp.rounding_divide_by_pot(ALL_INT16, e)
        assert np.array_equal(fp.rounding_div(ALL_INT16, 1 << e), by_pot)


def test_srdhm_all_int16_pairs_with_fixed_multipliers() -> None:
    for b in (fp.INT32_MIN, -(2**30), -1, 0, 1, 2**30, 1518500250, fp.INT32_MAX):
        got = fp.saturating_rounding_doubling_high_mul(ALL_INT16, b)
        assert got.tolist() == [ref.srdhm_ref(int(a), b) for a in ALL_INT16]


def test_srdhm_saturation_case() -> None:
    m = fp.INT32_MIN
    got = fp.saturating_rounding_doubling_high_mul(np.array([m, m, m + 1]), np.array([m, m + 1, m]))
    assert got.tolist() == [fp.INT32_MAX, fp.INT32_MAX, fp.INT32_MAX]
    assert ref.srdhm_ref(m, m) == fp.INT32_MAX


def test_requantize_per_channel_all_int16_accumulators() -> None:
    acc = ALL_INT16.reshape(4, -1)
    q31, shift = fp.quantize_multipliers([0.0123, 0.5, 1.75, 3e-4])
    bias = np.array([-1000, 0, 77, 2**31 - 1])
    got = fp.requantize(acc, bias, q31, shift, zero_point=-5, qmin=-128, qmax=127, axis=0,
                        out_dtype=np.int8)
    assert got.dtype == np.int8
    for c in range(4):
        want = [ref.requantize_ref(int(a), int(bias[c]), int(q31[c]), int(shift[c]), -5, -128,
                                   127) for a in acc[c]]
        assert got[c].tolist() == want


def test_requantize_without_bias_and_scalar_multiplier() -> None:
    q31, shift = fp.quantize_multiplier(0.02)
    got = fp.requantize(ALL_INT8, None, q31, shift, 3, -32768, 32767)
    want = [ref.requantize_ref(int(a), 0, q31, shift, 3, -32768, 32767) for a in ALL_INT8]
    assert got.tolist() == want


def test_saturate_clamps_and_casts() -> None:
    got = fp.saturate(np.array([-(2**40), -129, -128, 0, 127, 128, 2**40]), np.int8)
    assert got.dtype == np.int8
    assert got.tolist() == [-128, -128, -128, 0, 127, 127, 127]
    assert fp.saturate(np.array([2**40]), np.int16).tolist() == [32767]


def test_quantize_multiplier_known_values() -> None:
    assert fp.quantize_multiplier(0.0) == (0, 0)
    assert fp.quantize_multiplier(0.5) == (2**30, 0)
    assert fp.quantize_multiplier(1.0) == (2**30, 1)
    assert fp.quantize_multiplier(0.25) == (2**30, -1)
    assert fp.quantize_multiplier(2.0**-33) == (0, 0)
    q31, shift = fp.quantize_multiplier(1.0 - 2.0**-40)  # mantissa rounds up to 1.0
    assert (q31, shift) == (2**30, 1)


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), 2.0**30, 1e12])
def test_quantize_multiplier_rejects_out_of_range(bad: float) -> None:
    with pytest.raises(TesselConfigError, match="quantize_multiplier"):
        fp.quantize_multiplier(bad)


def test_inputs_out_of_range_are_rejected() -> None:
    with pytest.raises(TesselConfigError, match="outside"):
        fp.saturating_rounding_doubling_high_mul(np.array([2**31]), 1)
    with pytest.raises(TesselConfigError, match="exponent"):
        fp.rounding_divide_by_pot(np.array([1]), 32)
    with pytest.raises(TesselConfigError, match="integer"):
        fp.multiply_by_quantized_multiplier(np.array([1.5]), 2**30, 0)
    with pytest.raises(TesselConfigError, match="shift"):
        fp.multiply_by_quantized_multiplier(np.array([1]), 2**30, 31)
    with pytest.raises(TesselConfigError, match="axis"):
        fp.requantize(np.zeros((2, 3), np.int32), None, np.array([1, 2]), np.array([0, 0]), 0,
                      -128, 127, axis=2)


@pytest.mark.parametrize("real", [2.0**30 - 0.25, 2.0**30, 7.3e31, 3.4e38 / 127])
def test_product_multiplier_saturates_every_nonzero_product(real: float) -> None:
    # above the requantiser's largest multiplier (refused by quantize_multiplier), every
    # non-zero integer product is out of the int16 range either way: the largest one is exact
    with pytest.raises(TesselConfigError):
        fp.quantize_multiplier(real)
    q31, shift = fp.quantize_product_multiplier(real)
    x = np.arange(-(2**16), 2**16 + 1, dtype=np.int64)
    for rounding in fp.Rounding:
        got = fp.requantize(x, None, q31, shift, 5, -32768, 32767, rounding=rounding)
        want = np.where(x == 0, 5, np.where(x > 0, 32767, -32768))
        np.testing.assert_array_equal(got, want)
    assert fp.quantize_product_multiplier(0.75) == fp.quantize_multiplier(0.75)
