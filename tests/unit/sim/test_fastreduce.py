"""REDUCE and UNARY closures (``tessel.sim.fastreduce``) equal the reference handlers bit for
bit: the exact float sums at the edge of their exactness bound and past it (int64), extreme
values and zero points, saturating sums; UNARY's numpy form (more than RSQRT_SCALAR_MAX
elements) on edge values for every fractional width; each with compiled kernels (``kern_reduce``)
and without."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import I
from test_fastpath import V, _batch_same_both_ways, _kinds, _same_both_ways

from tessel.isa import DType, Opcode
from tessel.isa.fields import ReduceOp, UnaryOp
from tessel.sim import fastreduce

W = {DType.I8: 1, DType.I16: 2, DType.I32: 4}


def _reduce(op, dt, d0, d1, zp, axis=0):
    w = W[dt]
    ow = 4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else w
    kept = d1 if axis == 0 else d0
    return {V: [I(Opcode.REDUCE, op=op, dtype=dt, axis=axis, d0=d0, d1=d1, d2=2, src_addr=0,
                  src_s0=w, src_s1=w * d0, src_s2=w * d0 * d1, in_zp=zp, dst_addr=40_000,
                  dst_s0=ow, dst_s1=ow * kept)]}


def _fill(dt, n, value) -> list[tuple[int, bytes]]:
    return [(0, np.full(n, value, f"<i{W[dt]}").tobytes())]


@pytest.mark.parametrize(("op", "dt", "d0", "zp", "kind"), [
    (ReduceOp.SUM, DType.I16, 192, 0, "step_float"),
    (ReduceOp.SUM, DType.I16, 511, 0, "step_float"),  # 511 * 32768 < 2^24
    (ReduceOp.SUM, DType.I16, 512, 0, "step"),  # 512 * 32768 = 2^24: int64
    (ReduceOp.SUM, DType.I16, 300, -255, "step_float"),
    (ReduceOp.SUM, DType.I8, 2000, 255, "step_float"),
    (ReduceOp.SUM, DType.I16, 100, -(2**31), "step"),  # a zero point far outside int16
    (ReduceOp.SUMSQ, DType.I16, 192, 0, "step_float"),  # saturates on all -32768
    (ReduceOp.SUMSQ, DType.I16, 2, 0, "step_float"),  # 2 * 2^30 > INT32_MAX: clamped
    (ReduceOp.SUMSQ, DType.I8, 40, -200, "step_float"),
    (ReduceOp.SUMSQ, DType.I16, 50, 40_000, "step"),  # |x - zp| > 2^16: the reference's clip
    (ReduceOp.SUM, DType.I32, 30, 7, "step"),
    (ReduceOp.MAX, DType.I16, 30, 0, "step"),
])
def test_reduce_forms(op, dt, d0, zp, kind, kernels):
    d1 = max(1, min(7, 60_000 // (2 * W[dt] * d0)))
    streams = _reduce(op, dt, d0, d1, zp)
    assert _kinds(streams) == ({"step_kernel"} if kernels else {kind})  # kernels: kern_reduce
    n = 2 * d0 * d1
    lo, hi = np.iinfo(f"<i{W[dt]}").min, np.iinfo(f"<i{W[dt]}").max
    _same_both_ways(streams, seeds=(0, 1))
    for v in (lo, hi, -1):
        _same_both_ways(streams, seeds=(0,), extra=_fill(dt, n, v))
    _batch_same_both_ways(streams)


def test_reduce_float_sums_along_d0_only():
    assert _kinds(_reduce(ReduceOp.SUM, DType.I16, 30, 5, 0, axis=1)) == {"step"}
    _same_both_ways(_reduce(ReduceOp.SUM, DType.I16, 30, 5, 0, axis=1), seeds=(0,))


@pytest.mark.parametrize("fb", [0, 1, 15, 20, 30, 31])
@pytest.mark.parametrize("op", list(UnaryOp))
def test_unary_numpy_form_edge_values(op, fb, kernels):
    vals = np.array([-(2**31), -5, -1, 0, 1, 2, 3, 4, 5, 7, 1000, 2**20 + 1, 2**30,
                     2**31 - 1, 2**31 - 2, 65535, 65536, 999_999_937], np.int32)
    squares = np.array([k * k for k in (3, 1000, 46340)] + [k * k - 1 for k in (3, 1000, 46340)]
                       + [k * k + 1 for k in (3, 1000, 46340)], np.int32)
    rng = np.random.default_rng(fb)
    vals = np.concatenate([vals, squares, rng.integers(-(2**31), 2**31, 80).astype(np.int32)])
    assert len(vals) > fastreduce.RSQRT_SCALAR_MAX
    un = I(Opcode.UNARY, op=op, frac_bits=fb, d0=len(vals), src_addr=40_000, src_s0=4,
           dst_addr=9000, dst_s0=4)
    assert _kinds({V: [un]}) == ({"step_kernel"} if kernels else {"step"})
    _same_both_ways({V: [un]}, seeds=(0,), extra=[(40_000, vals.tobytes())])


def test_isqrt64_near_squares():
    """Around the squares of large roots (where float64 rounds ``v``): exact."""
    from math import isqrt

    rng = np.random.default_rng(0)
    ks = [*rng.integers(2**26, 2**31, 3000).tolist(), 2**31 - 1, 2**31, 2**30 + 1, 1, 0]
    v = [k * k + d for k in ks for d in (-2, -1, 0, 1, 2) if 0 <= k * k + d <= 2**62]
    v += rng.integers(0, 2**62, 3000, endpoint=True).tolist() + [2**62]
    got = fastreduce.isqrt64(np.array(v, np.int64))
    assert got.tolist() == [isqrt(x) for x in v]
