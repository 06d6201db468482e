"""The simulator's unchecked fixed-point path equals the plain-integer references bit for bit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN, mbqm_ref, requantize, requantize_ref
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
    from tessel.sim.fastfix import FUSED, GENERAL, requant_plan

    x = np.array(EDGE_X + [-(2**k) for k in range(31)] + [-(2**k) - 1 for k in range(30)]
                 + [-(3 << k) for k in range(29)], np.int64)
    acc = x.astype(np.int32)[:, None].repeat(6, 1)
    q = np.array([0, 1, 2**30, 1518500250, INT32_MAX, 2**30 + 1], np.int64)
    for s in (-31, -30, -17, -2, -1, 0):
        shift = np.full(6, s, np.int64)
        shift[0] = 0  # a mix of zero and non-zero right shifts
        bias = np.array([0, -1, 5, -(2**20), 2**20, 0], np.int64)
        plan = requant_plan(bias, q, shift, zp, zp, 127)  # the forms that skip the correction
        assert (plan[0] == FUSED and plan[5] is None) or (plan[0] == GENERAL and plan[-1])
        got = requantize_fast(acc, bias, q, shift, zp, zp, 127, np.dtype(np.int8))
        for r, c in itertools.product(range(len(x)), range(6)):
            assert got[r, c] == requantize_ref(int(acc[r, c]), int(bias[c]), int(q[c]),
                                               int(shift[c]), zp, zp, 127), (r, c, s)


@pytest.mark.parametrize("zp", [-128, -1, 0, 5, 127])
@pytest.mark.parametrize("floor", ["relu", "full"])
def test_fused_form_on_edge_accumulators_every_right_shift(zp, floor):
    """The FUSED plan (one floor shift, the sign read from the int32 accumulator) on INT32
    min / max and tie accumulators, extreme biases and multipliers, right shifts 0..31 mixed
    in one call; the GENERAL / LEFT forms where int64 has no room."""
    from tessel.sim.fastfix import FUSED, GENERAL, requant_plan

    x = np.array(EDGE_X + [-(2**k) for k in range(31)] + [2**k for k in range(31)]
                 + [-(3 << k) for k in range(29)] + [(3 << k) - 1 for k in range(29)], np.int64)
    lo, hi = (zp, 127) if floor == "relu" else (-128, 127)
    rng = np.random.default_rng(zp + 200)
    forms = set()
    for rights in ([0, 1, 2, 7, 15, 31], [31, 30, 29, 0, 0, 16], [3, 3, 3, 3, 3, 3],
                   [0, 0, 0, 0, 0, 0]):
        ch = len(rights)
        q = np.array([0, 1, 2**30, 1518500250, INT32_MAX, int(rng.integers(2**30, 2**31))],
                     np.int64)
        for bias in (np.zeros(ch, np.int64),
                     np.array([INT32_MIN, INT32_MAX, -1, 1, -(2**20), 2**20], np.int64),
                     rng.integers(INT32_MIN, INT32_MAX, ch, endpoint=True)):
            shift = -np.array(rights, np.int64)
            plan = requant_plan(bias, q, shift, zp, lo, hi)
            forms.add(plan[0])
            acc = x.astype(np.int32)[:, None].repeat(ch, 1)
            got = requantize_fast(acc, bias, q, shift, zp, lo, hi, np.dtype(np.int8))
            want = requantize(acc, bias, q, shift, zp, lo, hi, -1, np.int8)
            assert np.array_equal(got, want), (rights, bias.tolist())
            for r, c in itertools.product(range(0, len(x), 7), range(ch)):
                assert got[r, c] == requantize_ref(int(acc[r, c]), int(bias[c]), int(q[c]),
                                                   int(shift[c]), zp, lo, hi)
    assert FUSED in forms
    assert forms <= {FUSED, GENERAL}


def test_fused_form_is_refused_when_int64_could_overflow():
    from tessel.sim.fastfix import FUSED, GENERAL, requant_plan

    q = np.array([INT32_MAX], np.int64)
    assert requant_plan(np.array([0]), q, np.array([-3]), 0, -128, 127)[0] == FUSED
    # rounding * 2^31 with a right shift of 31 and a zero point: beyond 2^63
    plan = requant_plan(np.array([INT32_MAX]), q, np.array([-31]), 127, -128, 127)
    assert plan[0] == GENERAL
    acc = np.array([[INT32_MIN], [INT32_MAX], [0], [-1]], np.int32)
    got = requantize_fast(acc, np.array([INT32_MAX]), q, np.array([-31]), 127, -128, 127,
                          np.dtype(np.int8))
    assert np.array_equal(got, requantize(acc, np.array([INT32_MAX]), q, np.array([-31]), 127,
                                          -128, 127, -1, np.int8))


@pytest.mark.parametrize("seed", range(6))
def test_fused_form_random_per_channel(seed):
    """Random parameter blocks (per channel, mixed right shifts) and accumulators of every
    magnitude against the checked reference; negative accumulators near each channel's sign
    threshold included."""
    from tessel.sim.fastfix import requant_plan

    rng = np.random.default_rng(seed)
    ch = 16
    q = rng.integers(0, INT32_MAX, ch, endpoint=True)
    shift = -rng.integers(0, 32, ch)
    bias = rng.integers(-(2**24), 2**24, ch)
    zp = int(rng.integers(-128, 128))
    lo, hi = (-128, 127) if seed % 2 else (max(zp, -128), 127)
    acc = rng.integers(INT32_MIN, INT32_MAX, (200, ch), endpoint=True)
    acc[rng.random(acc.shape) < 0.6] >>= int(rng.integers(1, 31))
    thr = -((bias * q + (1 << 30)) // np.maximum(q, 1))  # X changes sign here
    acc[:20] = np.clip(thr[None, :] + rng.integers(-2, 3, (20, ch)), INT32_MIN, INT32_MAX)
    acc = acc.astype(np.int32)
    requant_plan(bias, q, shift, zp, lo, hi)
    got = requantize_fast(acc, bias, q, shift, zp, lo, hi, np.dtype(np.int8))
    assert np.array_equal(got, requantize(acc, bias, q, shift, zp, lo, hi, -1, np.int8))


def _float_edges(plan: tuple, ch: int) -> np.ndarray:
    """Accumulators at and around each channel's FLOAT clamp bounds, INT32 min / max, zero."""
    _, a_lo, a_hi, _, _ = plan
    cols = []
    for c in range(ch):
        lo, hi = int(a_lo[c]), int(a_hi[c])
        vals = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX,
                (lo + hi) // 2] + [v + d for v in (lo, hi) for d in (-2, -1, 0, 1, 2)]
        cols.append([min(max(v, INT32_MIN), INT32_MAX) for v in vals])
    return np.array(cols, np.int64).T.astype(np.int32)


@pytest.mark.parametrize("zp", [-128, -5, 0, 17])
@pytest.mark.parametrize("floor", ["relu", "zero-shift"])
def test_float_form_equals_the_reference_at_its_bounds(zp, floor):
    """The FLOAT form (int32 clamp, float64 multiply-add, floor) on INT32 min / max and on
    every accumulator next to its clamp bounds, where the saturated and unsaturated outputs
    meet, for every right shift (relu floors) or no right shift (the floor at -128)."""
    from tessel.sim.fastfix import FLOAT, float_plan, requant_apply, requant_plan

    rng = np.random.default_rng(zp + 200)
    forms = []
    for r in range(0, 32):
        rights = [r, r, r, 0, min(r + 1, 31), max(r - 1, 0)] if floor == "relu" else [0] * 6
        q = np.array([1, 2**30, 1518500250, INT32_MAX, int(rng.integers(2**30, 2**31)),
                      int(rng.integers(1, 2**31))], np.int64)
        bias = np.array([0, -1, 5, -(2**20), 2**20, int(rng.integers(-(2**20), 2**20))],
                        np.int64)
        shift = -np.array(rights, np.int64)
        lo = zp if floor == "relu" else -128
        plan = requant_plan(bias, q, shift, zp, lo, 127)
        fplan = float_plan(plan)
        forms.append(fplan is not None)
        if fplan is None:
            continue
        assert fplan[0] == FLOAT
        acc = _float_edges(fplan, len(q))
        got = requant_apply(acc, fplan, np.dtype(np.int8))
        want = requantize(acc, bias, q, shift, zp, lo, 127, -1, np.int8)
        assert np.array_equal(got, want), (r, rights)
        for i, c in itertools.product(range(acc.shape[0]), range(len(q))):
            assert got[i, c] == requantize_ref(int(acc[i, c]), int(bias[c]), int(q[c]),
                                               int(shift[c]), zp, lo, 127)
    assert all(forms[:12])  # taken up to a right shift of 12 (not a vacuous test)


@pytest.mark.parametrize("seed", range(8))
def test_float_form_random(seed):
    """Random per-channel parameters (relu floors, int8 and int16 outputs) and accumulators
    of every magnitude: the FLOAT form equals the checked reference wherever it is taken."""
    from tessel.sim.fastfix import float_plan, requant_apply, requant_plan

    rng = np.random.default_rng(100 + seed)
    ch, taken = 24, 0
    for _ in range(20):
        q = rng.integers(2**29, INT32_MAX, ch, endpoint=True)
        wide = seed % 2 == 1  # int16: 2^15 outputs, a range 128x wider
        shift = -rng.integers(0, 4 if wide else 10, ch)
        bias = rng.integers(-(2**16), 2**16, ch)
        zp = int(rng.integers(-1000, 1000)) if wide else int(rng.integers(-128, 128))
        hi = 32767 if wide else 127
        lo = max(zp, -32768 if wide else -128)
        fplan = float_plan(requant_plan(bias, q, shift, zp, lo, hi))
        if fplan is None:
            continue
        taken += 1
        acc = rng.integers(INT32_MIN, INT32_MAX, (300, ch), endpoint=True)
        acc[rng.random(acc.shape) < 0.7] >>= int(rng.integers(1, 31))
        acc = np.vstack([acc, _float_edges(fplan, ch)]).astype(np.int32)
        dt = np.dtype(np.int16 if wide else np.int8)
        got = requant_apply(acc, fplan, dt)
        assert np.array_equal(got, requantize(acc, bias, q, shift, zp, lo, hi, -1, dt))
    assert taken >= 10


def test_float_form_refused_without_proof():
    """The sign correction (no relu floor, a right shift), a zero multiplier and ranges too
    wide for float64 (a long right shift; a large bias) keep the integer forms."""
    from tessel.sim.fastfix import FUSED, float_plan, requant_plan

    one = np.array([2**30], np.int64)
    assert float_plan(requant_plan(np.array([0]), one, np.array([-8]), 0, 0, 127)) is not None
    corrected = requant_plan(np.array([0]), one, np.array([-8]), 0, -128, 127)
    assert corrected[0] == FUSED and corrected[5] is not None
    assert float_plan(corrected) is None
    assert float_plan(requant_plan(np.array([0]), np.array([0]), np.array([-8]), 0, 0,
                                   127)) is None
    assert float_plan(requant_plan(np.array([0]), np.array([3]), np.array([-31]), 0, 0,
                                   127)) is None
    # |acc| near 2^24 (a large bias) times a multiplier near 2^31: beyond 2^53
    assert float_plan(requant_plan(np.array([2**24]), np.array([2**31 - 1]), np.array([-2]),
                                   0, 0, 127)) is None


@pytest.mark.parametrize("sign", [1, -1])
def test_float_form_bound_counts_a_bias_of_the_other_sign_once(sign):
    """A ResNet-18 channel (bias -652178, a multiplier near 2^31, a right shift of 13, the
    floor at -128) whose accumulators near 2.9M times the multiplier come within 2^52.4 of
    2^53 while ``max |acc| q + |B|`` exceeds it: exact, since the bias pulls the sum back; the
    FLOAT form is taken and equals the reference on every accumulator of its range and a few
    beyond. With the bias's sign flipped the range moves towards zero: taken as well."""
    from tessel.sim.fastfix import FLOAT, float_plan, requant_apply, requant_plan

    bias, q, shift = np.array([sign * -652178]), np.array([2007207985]), np.array([-13])
    plan = requant_plan(bias, q, shift, -128, -128, 127)
    fplan = float_plan(plan)
    assert fplan is not None and fplan[0] == FLOAT
    a_lo, a_hi = int(fplan[1][0]), int(fplan[2][0])
    if sign == 1:  # the looser bound would have refused it
        assert max(abs(a_lo), abs(a_hi)) * int(q[0]) + abs(int(plan[2][0])) >= 2**53
    acc = np.arange(a_lo - 5, a_hi + 6, dtype=np.int32)[:, None]
    got = requant_apply(acc, fplan, np.dtype(np.int8))
    assert np.array_equal(got, requantize(acc, bias, q, shift, -128, -128, 127, -1, np.int8))


def test_float_form_refused_when_the_product_leaves_float64():
    """``|B|`` and ``|acc q + B|`` below 2^53 but ``|acc q|`` above it inside the range (a
    bias of -(2^22 - 2^18), a multiplier of 2^31 - 1, a right shift of 12, a relu
    floor): the product would round, so the FLOAT form is refused."""
    from tessel.sim.fastfix import FUSED, float_plan, requant_plan

    bias, q, shift = np.array([-(2**22 - 2**18)]), np.array([2**31 - 1]), np.array([-12])
    plan = requant_plan(bias, q, shift, 0, 0, 127)
    assert plan[0] == FUSED and plan[5] is None
    acc, b = 2**22 + 1, int(plan[2][0])  # an unsaturated accumulator, the folded constant
    assert 0 < int(requantize(np.array([[acc]], np.int32), bias, q, shift, 0, 0, 127, -1,
                              np.int8)[0, 0]) < 127
    assert abs(b) < 2**53 and abs(acc * int(q[0]) + b) < 2**53 <= acc * int(q[0])
    assert float_plan(plan) is None


@pytest.mark.parametrize("right", [0, 1, 2, 3])
@pytest.mark.parametrize("zp", [-128, -3, 60])
def test_float_form_every_accumulator_of_its_range(right, zp):
    """Every accumulator of each channel's unsaturated range (and a few beyond), multipliers
    with many trailing zeros (the product lands exactly on integers and halves) and odd
    ones: the FLOAT form equals the checked reference on all of them."""
    from tessel.sim.fastfix import float_plan, requant_apply, requant_plan

    q = np.array([2**30, 3 << 29, 5 << 28, 1518500249, INT32_MAX], np.int64)
    bias = np.array([0, -3, 7, 12345, -(2**18)], np.int64)
    shift = np.full(5, -right, np.int64)
    plan = float_plan(requant_plan(bias, q, shift, zp, zp, 127))
    assert plan is not None
    _, a_lo, a_hi, _, _ = plan
    for c in range(5):
        acc = np.arange(int(a_lo[c]) - 3, int(a_hi[c]) + 4, dtype=np.int64)
        acc = np.clip(acc, INT32_MIN, INT32_MAX).astype(np.int32)[:, None]
        one = tuple(v[c:c + 1] if isinstance(v, np.ndarray) else v for v in plan)
        got = requant_apply(acc, one, np.dtype(np.int8))
        want = requantize(acc, bias[c], q[c], shift[c], zp, zp, 127, -1, np.int8)
        assert np.array_equal(got, want), c


@pytest.mark.parametrize(("q", "shift", "zp", "lo", "hi"), [
    (1, -31, 0, 10, 20),  # every MBQM value is 0 or -1: below the clamp range
    (1, -31, 0, -20, -10),  # above it
    (1, -31, 100, -128, 50),  # the zero point alone lifts every output above act_max
    (1, -31, -100, -50, 127),  # ... or below act_min
    (2**30, -31, 0, 1, 1),  # a one-value clamp range
    (2**30, 0, 0, 5, 6),  # no right shift, values on both sides
])
def test_requantize_fast_clamps_when_the_outputs_miss_the_clamp_range(q, shift, zp, lo, hi):
    """Parameters whose MBQM range [y(INT32_MIN), y(INT32_MAX)] + zp lies partly or wholly
    outside [act_min, act_max]: the output is still inside [act_min, act_max], as the golden
    model's clamp gives (the folded bounds must not escape the clamp range)."""
    acc = np.array([[INT32_MIN], [-5], [0], [5], [INT32_MAX]], np.int32)
    bias = np.array([0], np.int64)
    got = requantize_fast(acc, bias, np.array([q]), np.array([shift]), zp, lo, hi,
                          np.dtype(np.int8))
    want = requantize(acc, bias, q, shift, zp, lo, hi, -1, np.int8)
    assert got.tolist() == want.tolist()
    assert all(lo <= int(v) <= hi for v in got.ravel())
