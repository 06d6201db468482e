"""``tessel.sim.kern_mm`` equals the reference handler ``matrix.exec_matmul`` bit for bit:
``zero_point_pass``, uncompiled (``.py``) and compiled, after an exact int64 GEMM, and the
whole one-sample closure (``one_sample``, with ``torch._int_mm`` where it is exact here), on
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
from tessel.sim.fastpath import AccStore, Pool
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
