"""The simulator's unchecked fixed-point path equals the plain-integer references bit for bit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tessel.quant.fixedpoint import INT32_MAX, INT32_MIN, mbqm_ref, requantize, requantize_ref
from tessel.sim.fastfix import mbqm_inplace, requantize_fast

EDGE_X = [INT32_MIN, INT32_MIN + 1, -(2**30) - 1, -(2**30), -65537, -3, -2, -1, 0, 1, 2, 3,
          65535, 2**30, 2**30 + 1, INT32_MAX - 1, INT32_MAX]
EDGE_Q = [0, 1, 2**30 - 1, 2**30, 2**30 + 1, 1518500250, INT32_MAX]
SHIFTS = list(range(-31, 31))


def test_mbqm_edges_every_shift():
    x = np.array(EDGE_X, np.int64)
    for q, s in itertools.product(EDGE_Q, SHIFTS):
        want = [mbqm_ref(int(v), q, s) for v in x]
        assert mbqm_inplace(x.copy(), q, s).tolist() == want, (q, s)  # scalar path
        got = mbqm_inplace(x.copy(), np.array([q]), np.array([s]))  # array path
        assert got.tolist() == want, (q, s)


def test_mbqm_random_per_channel():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(INT32_MIN, INT32_MAX, (64, 8), endpoint=True)
        x[rng.random(x.shape) < 0.5] //= 1 << int(rng.integers(0, 31))  # many magnitudes
        q = rng.integers(0, INT32_MAX, 8, endpoint=True)
        s = rng.integers(-31, 30, 8, endpoint=True)
        s[0] = 0  # a mix of shift 0 and non-zero in one call
        got = mbqm_inplace(x.copy(), q, s)
        want = [[mbqm_ref(int(x[r, c]), int(q[c]), int(s[c])) for c in range(8)]
                for r in range(64)]
        assert got.tolist() == want


@pytest.mark.parametrize("shifts", [(-31, 30), (-31, 0), (-12, -1), (0, 0), (1, 30)])
@pytest.mark.parametrize("zp", [-7, 0, 100])
def test_requantize_fast_equals_checked_and_reference(shifts, zp):
    """Right-shift-only (the folded path), left shifts and mixes; sums beyond int32."""
    rng = np.random.default_rng(1)
    for dt, (lo, hi) in ((np.int8, (-128, 127)), (np.int16, (-32768, 32767)), (np.int8, (0, 50))):
        acc = rng.integers(INT32_MIN, INT32_MAX, (33, 5), endpoint=True).astype(np.int32)
        acc[:10] //= 1 << 16
        acc[10:20] //= 1 << 24
        acc[-1] = [INT32_MIN, INT32_MAX, 0, -1, 1]
        bias = rng.integers(INT32_MIN, INT32_MAX, 5, endpoint=True)
        bias[1:3] //= 1 << 20
        q = rng.integers(2**30, INT32_MAX, 5, endpoint=True)
        q[0] = 0 if zp == 0 else q[0]
        s = rng.integers(*shifts, 5, endpoint=True)
        got = requantize_fast(acc, bias, q, s, zp, lo, hi, np.dtype(dt))
        assert got.dtype == dt
        assert np.array_equal(got, requantize(acc, bias, q, s, zp, lo, hi, -1, dt))
        for r, c in itertools.product(list(range(0, 33, 4)) + [32], range(5)):
            assert got[r, c] == requantize_ref(int(acc[r, c]), int(bias[c]), int(q[c]),
                                               int(s[c]), zp, lo, hi)
        one = requantize_fast(acc, bias[:1], q[:1], s[:1], zp, lo, hi, np.dtype(dt))
        assert np.array_equal(one, requantize(acc, bias[0], q[0], s[0], zp, lo, hi, -1, dt))


@pytest.mark.parametrize("zp", [-128, -7, 0, 3, 120])
def test_requantize_fast_relu_floor_skips_the_sign_correction(zp):
    """A clamp floor at the zero point (a fused ReLU, the plan skips the away-from-zero
    correction) on every edge accumulator, multiplier and right shift, incl. ties."""
    from tessel.sim.fastfix import requant_plan

    x = np.array(EDGE_X + [-(2**k) for k in range(31)] + [-(2**k) - 1 for k in range(30)]
                 + [-(3 << k) for k in range(29)], np.int64)
    acc = x.astype(np.int32)[:, None].repeat(6, 1)
    q = np.array([0, 1, 2**30, 1518500250, INT32_MAX, 2**30 + 1], np.int64)
    for s in (-31, -30, -17, -2, -1, 0):
        shift = np.full(6, s, np.int64)
        shift[0] = 0  # a mix of zero and non-zero right shifts
        bias = np.array([0, -1, 5, -(2**20), 2**20, 0], np.int64)
        assert requant_plan(bias, q, shift, zp, zp, 127)[-1]  # the skipping form
        got = requantize_fast(acc, bias, q, shift, zp, zp, 127, np.dtype(np.int8))
        for r, c in itertools.product(range(len(x)), range(6)):
            assert got[r, c] == requantize_ref(int(acc[r, c]), int(bias[c]), int(q[c]),
                                               int(shift[c]), zp, zp, 127), (r, c, s)
