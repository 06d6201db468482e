"""One sample's int8 MATMUL closure (``tessel.sim.fastmatmul``) equals the reference handler
bit for bit: every combination of zero points (none, one, both, at the field's extremes, so
the int32 sums wrap), OVERWRITE / ACCUMULATE, dense and strided A, B and accumulator, and
extreme operand bytes, with compiled kernels (``kern_mm``) and without; the float32 closure
below the size threshold."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import I
from test_fastpath import MX, _batch_same_both_ways, _kinds, _same_both_ways

from tessel.isa import Opcode
from tessel.isa.fields import AccMode
from tessel.sim import fastmatmul, fastpath


@pytest.fixture
def int8_gemm_only(monkeypatch):
    monkeypatch.setattr(fastpath, "FORCE_INT_MM", True)  # where it is exact, also if slow here
    if fastmatmul.int_mm_out() is None:
        pytest.skip("torch._int_mm is not exact / not available on this host")


def _matmul(m, k, n, *, a_dense=True, b_dense=True, acc_dense=True, **kw):
    a_m = k if a_dense else k + 3
    b_k = n if b_dense else n + 5
    return {MX: [I(Opcode.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=a_m, a_stride_k=1,
                   b_addr=30_000, b_stride_k=b_k, b_stride_n=1, acc_addr=8,
                   acc_stride=n if acc_dense else n + 2, **kw)]}


def _extreme_bytes(m, k, n, rng):
    """Operands of -128 / 127 only (the largest products) at A and B."""
    a = rng.choice(np.array([-128, 127], np.int8), (m + 1) * (k + 3))
    b = rng.choice(np.array([-128, 127], np.int8), (k + 1) * (n + 5))
    return [(0, a.tobytes()), (30_000, b.tobytes())]


ZPS = [(0, 0), (5, 0), (0, -7), (-256, 255), (255, -256), (-128, 127)]


@pytest.mark.parametrize("zps", ZPS, ids=[f"{a}_{b}" for a, b in ZPS])
@pytest.mark.parametrize("mode", list(AccMode))
@pytest.mark.parametrize("dense", [(True, True, True), (False, True, True),
                                   (True, False, True), (True, True, False),
                                   (False, False, False)], ids=["dense", "a", "b", "acc", "all"])
@pytest.mark.parametrize("ones_row", [True, False], ids=["ones_row", "colsum_gemm"])
def test_matmul_int8_one_sample(zps, mode, dense, ones_row, int8_gemm_only, monkeypatch,
                                kernels):
    if not ones_row:  # colsum(b) from its own GEMM, as for a large A
        monkeypatch.setattr(fastmatmul, "ONES_ROW_MAX", 0)
    a_zp, b_zp = zps
    a_d, b_d, acc_d = dense
    m, k, n = 37, 300, 13  # above INT_MM_MIN_MACS; odd sizes
    streams = _matmul(m, k, n, a_dense=a_d, b_dense=b_d, acc_dense=acc_d, a_zp=a_zp,
                      b_zp=b_zp, mode=mode)
    assert m * k * n >= fastmatmul.INT_MM_MIN_MACS
    assert _kinds(streams) == {"step_int1"}
    rng = np.random.default_rng(abs(a_zp * 7 + b_zp) + int(mode))
    _same_both_ways(streams, seeds=(0, 1))
    _same_both_ways(streams, seeds=(2,), extra=_extreme_bytes(m, k, n, rng))
    _batch_same_both_ways(streams, same=(0, 60_000))


@pytest.mark.parametrize("b_zp", [0, -7])
def test_matmul_colsum_kept_with_the_weights(b_zp, int8_gemm_only, monkeypatch):
    """The column sums' GEMM kept with b's bytes: the same b with other a's (kept), then
    other b's (remade; test_matmul_int8_one_sample runs a new b on every seed)."""
    monkeypatch.setattr(fastmatmul, "ONES_ROW_MAX", 0)
    m, k, n = 37, 300, 13
    streams = _matmul(m, k, n, a_zp=5, b_zp=b_zp)
    # a second MATMUL of the same shape (the same pooled buffers), its own b and accumulator
    second = _matmul(m, k, n, a_zp=-9, b_zp=b_zp)[MX][0].replace(b_addr=40_000,
                                                                  acc_addr=600)
    streams[MX].append(second)
    rng = np.random.default_rng(7)
    b1, b2 = (rng.integers(-128, 128, k * n, dtype=np.int8).tobytes() for _ in range(2))
    _same_both_ways(streams, seeds=(0, 1, 2), extra=[(30_000, b1), (40_000, b2)])


@pytest.mark.parametrize("shape", [(1, 300, 300), (300, 300, 1), (16, 384, 64)])
def test_matmul_int8_thin_shapes(shape, int8_gemm_only):
    m, k, n = shape
    streams = _matmul(m, k, n, a_zp=-3, b_zp=4, mode=AccMode.ACCUMULATE)
    assert _kinds(streams) == {"step_int1"}
    _same_both_ways(streams, seeds=(0,))


def test_matmul_small_tiles_stay_float(kernels):
    """Kernels off: a small tile's float32 GEMM; on: ``kern_mm`` at every size."""
    streams = _matmul(8, 32, 16, a_zp=9, b_zp=-2)
    if kernels and fastpath.int_mm() is not None and fastmatmul.int_mm_out() is not None:
        assert _kinds(streams) == {"step_int1"}
    else:
        assert _kinds(streams) <= {"step", "step_small"}
    _same_both_ways(streams, seeds=(0,))
