"""``tessel.sim.kern_mm`` equals the reference handler ``matrix.exec_matmul`` bit for bit:
``zero_point_pass``, uncompiled (``.py``) and compiled, after an exact int64 GEMM, and the
whole one-sample closure (``one_sample``, with ``torch._int_mm`` where it is exact here) and
the float32 one (``float_sample``, its pack kernels and kept packs), on
Hypothesis-drawn MATMULs: odd sizes, dense and padded A, B and accumulator, zero points at the
9-bit fields' extremes (the int32 sums wrap), OVERWRITE / ACCUMULATE over a non-zero
accumulator, operand bytes at -128 / 127."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessel.isa.fields import AccMode
from tessel.sim import fastmatmul, kern_mm
from tessel.sim.fastpath import PACK_MIN_VALUES, AccStore, Pool
from tessel.sim.matrix import exec_matmul
from tessel.sim.state import MachineState, acc_view, nd

SRAM, ACC = 1 << 16, 1 << 14  # bytes
B_AT = 1 << 15
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
zp = st.one_of(st.sampled_from([0, 0, 1, -1, 255, -256, 127, -128]), st.integers(-256, 255))


@st.composite
def matmul(draw):
    m, k, n = draw(st.integers(1, 40)), draw(st.integers(1, 200)), draw(st.integers(1, 24))
    f = dict(m=m, n=n, k=k, a_addr=draw(st.sampled_from([0, 3])),
             a_stride_m=k + draw(st.sampled_from([0, 0, 5])), a_stride_k=1, b_addr=B_AT,
             b_stride_k=n + draw(st.sampled_from([0, 0, 3])), b_stride_n=1,
             acc_addr=draw(st.sampled_from([0, 4])),
             acc_stride=n + draw(st.sampled_from([0, 0, 2])),
             mode=draw(st.sampled_from(list(AccMode))))
    # which zero points are non-zero: each combination as likely (both 0: no pass, alone)
    which = draw(st.sampled_from([(0, 0), (0, 1), (1, 0), (1, 1)]))
    f["a_zp"], f["b_zp"] = (draw(zp) if w else 0 for w in which)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    extreme = draw(st.booleans())
    sram = (rng.choice(np.array([-128, 127], np.int8), SRAM) if extreme
            else rng.integers(-128, 128, SRAM).astype(np.int8)).view(np.uint8)
    acc = rng.integers(-(2**31), 2**31, ACC // 4).astype(np.int32).view(np.uint8)
    return f, sram, acc


def _state(sram: np.ndarray, acc: np.ndarray) -> MachineState:
    s = MachineState.__new__(MachineState)
    s.sram, s.acc_bytes = sram.copy(), acc.copy()
    s.batch, s.pool, s.views = None, Pool(), None
    return s


def _reference(f: dict, sram: np.ndarray, acc: np.ndarray) -> np.ndarray:
    state = _state(sram, acc)
    exec_matmul(state, f)
    return state.acc_bytes


@SETTINGS
@given(matmul())
def test_zero_point_pass_equals_the_reference(case):
    """``p = a @ b`` exactly (int64, wrapped to int32), then the pass into the accumulator."""
    f, sram, acc = case
    want = _reference(f, sram, acc)
    m, n, k = f["m"], f["n"], f["k"]
    for run in (kern_mm.zero_point_pass.py, kern_mm.zero_point_pass.compiled):
        state = _state(sram, acc)
        a = nd(state.sram, f["a_addr"], (m, k), (f["a_stride_m"], 1), np.int8)
        b = nd(state.sram, f["b_addr"], (k, n), (f["b_stride_k"], 1), np.int8)
        p = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
        run(p, a, b, np.int64(f["a_zp"]), np.int64(f["b_zp"]),
            kern_mm.kab_term(k, f["a_zp"], f["b_zp"]),
            acc_view(state, f["acc_addr"], m, n, f["acc_stride"]),
            f["mode"] == AccMode.ACCUMULATE)
        assert np.array_equal(state.acc_bytes, want)


@SETTINGS
@given(matmul())
def test_one_sample_closure_equals_the_reference(case):
    mm = fastmatmul.int_mm_out()
    if mm is None:
        pytest.skip("torch._int_mm is not exact / not available on this host")
    f, sram, acc = case
    step = kern_mm.one_sample(f, mm, AccStore(f, f["m"], f["n"]))
    state = _state(sram, acc)
    step(state)
    step(state) if f["mode"] == AccMode.OVERWRITE else None  # kept views: the same result
    assert np.array_equal(state.acc_bytes, _reference(f, sram, acc))


# ---- the float32 closure (no fast exact int8 GEMM on the host) -----------------------------
@SETTINGS
@given(matmul())
def test_float_sample_closure_equals_the_reference(case):
    """``float_sample`` (what this AVX2 host runs) on the same drawn MATMULs: k up to 200
    passes ``chunk_len`` for zero points at the extremes, so extreme bytes take the chunked
    GEMMs and the others the bound's single GEMM."""
    f, sram, acc = case
    step = kern_mm.float_sample(f, AccStore(f, f["m"], f["n"]), _no_batch)
    state = _state(sram, acc)
    step(state)
    step(state) if f["mode"] == AccMode.OVERWRITE else None  # kept views: the same result
    assert np.array_equal(state.acc_bytes, _reference(f, sram, acc))


def _no_batch(state):
    raise AssertionError("one sample only")


@pytest.mark.parametrize("zps", [(0, 0), (-113, 0), (-256, 255)])
@pytest.mark.parametrize("strided", [False, True])
def test_pack_kernels_equal_numpy_uncompiled_and_compiled(zps, strided):
    rng = np.random.default_rng(5)
    src = rng.choice(np.array([-128, 127, 0, 3], np.int8), (9, 40))
    src = src[:, :33] if strided else src
    for zp, pack in zip(zps, (kern_mm.pack_rows, kern_mm.pack_cols), strict=True):
        want = src.astype(np.int64) - zp
        bound = np.abs(want).sum(axis=1).max() if pack is kern_mm.pack_rows else \
            np.abs(want).max()
        for run in (pack.py, pack.compiled):
            out = np.full(src.shape, np.nan, np.float32)
            assert run(src, np.int64(zp), out) == bound
            assert np.array_equal(out, want.astype(np.float32))


@pytest.mark.parametrize("k", [96, 700], ids=["one_gemm", "chunked"])
def test_float_sample_keeps_large_packs_until_their_bytes_change(k):
    """A and B of at least PACK_MIN_VALUES values are kept with their bytes: a second run
    reuses both entries, a changed byte of A, then of B, is packed again (results equal the
    reference each time). k = 700 with zero points -128 / 127 and bytes -128 / 127: the bound
    fails, chunks of ``chunk_len``."""
    m, n = PACK_MIN_VALUES // k + 1, PACK_MIN_VALUES // k + 1
    f = dict(m=m, n=n, k=k, a_addr=0, a_stride_m=k, a_stride_k=1, b_addr=1 << 17,
             b_stride_k=n, b_stride_n=1, acc_addr=0, acc_stride=n, mode=AccMode.OVERWRITE,
             a_zp=-128, b_zp=127)
    rng = np.random.default_rng(k)
    sram = np.zeros(1 << 18, np.uint8)
    sram[:m * k] = rng.choice(np.array([-128, 127], np.int8), m * k).view(np.uint8)
    sram[1 << 17:(1 << 17) + k * n] = rng.choice(np.array([-128, 127], np.int8),
                                                 k * n).view(np.uint8)
    acc = np.zeros(4 * m * n, np.uint8)
    step = kern_mm.float_sample(f, AccStore(f, m, n), _no_batch)
    state = _state(sram, acc)
    packs = state.pool.packs
    step(state)
    entries = {key: entry[1] for key, entry in packs.entries.items()}
    assert len(entries) == 2
    assert np.array_equal(state.acc_bytes, _reference(f, state.sram, acc))
    step(state)
    assert all(packs.entries[key][1] is buf for key, buf in entries.items())  # reused
    for at in (5, (1 << 17) + 7):  # one byte of A, then of B
        state.sram[at] ^= 0x80
        state.acc_bytes[:] = 0
        step(state)
        assert np.array_equal(state.acc_bytes, _reference(f, state.sram, acc))
        assert all(packs.entries[key][1] is buf for key, buf in entries.items())  # in place
