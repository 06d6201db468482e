"""``tessel.sim.kern_reduce``'s kernels equal their reference handlers bit for bit: REDUCE
against ``vector.exec_reduce`` and UNARY against ``vector.exec_unary``, uncompiled (``.py``)
and compiled, on Hypothesis-drawn instructions: every op and type, dense, strided and stride-0
sources, zero points at their extremes (SUMSQ's clip, saturating sums), values at their types'
extremes, every fractional width, UNARY in place; and through ``build_reduce`` /
``build_unary``'s closures (an overlapping destination: no kernel closure)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessel.isa import Opcode
from tessel.isa.fields import DType, ReduceOp, UnaryOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import kern_reduce
from tessel.sim.fastpath import _eview
from tessel.sim.prepare import Op
from tessel.sim.state import I32, NP_DTYPE, MachineState
from tessel.sim.vector import exec_reduce, exec_unary

W = {DType.I8: 1, DType.I16: 2, DType.I32: 4}
RANGE = {DType.I8: (-128, 127), DType.I16: (-32768, 32767), DType.I32: (INT32_MIN, INT32_MAX)}
SRAM = 8192
DST = 4096  # the destination's region (the sources stay below it)
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
zp = st.one_of(st.sampled_from([0, 1, -1, 127, -128, 255, -256, 32767, -32768, 65536, -65537,
                                INT32_MAX, INT32_MIN]), st.integers(INT32_MIN, INT32_MAX))


def _values(draw, dt: DType, n: int) -> np.ndarray:
    """``n`` values of ``dt``: uniform, a drawn share of them at the type's extremes, 0, +-1
    (from a drawn seed: the examples stay small)."""
    lo, hi = RANGE[dt]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vals = rng.integers(lo, hi + 1, n)
    edge = rng.random(n) < draw(st.sampled_from([0.0, 0.2, 0.7, 1.0]))
    vals[edge] = rng.choice([lo, hi, 0, -1, 1], int(edge.sum()))
    return vals.astype(f"<i{W[dt]}")


def _strides(draw, shape: tuple[int, int, int], w: int, zero: bool = True
             ) -> tuple[int, int, int]:
    """(s2, s1, s0): dense, padded (a gap after each element / row) or (``zero``) stride 0
    per axis."""
    z = [0] if zero else []
    s0 = draw(st.sampled_from([w, 2 * w, *z]))
    s1 = draw(st.sampled_from([shape[2] * max(s0, w), shape[2] * max(s0, w) + w, *z]))
    s2 = draw(st.sampled_from([shape[1] * max(s1, shape[2] * w) + w, *z]))
    return s2, s1, s0


@st.composite
def reduce_case(draw):
    dt = draw(st.sampled_from(list(W)))
    op = draw(st.sampled_from(list(ReduceOp)))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 40)))
    s2, s1, s0 = _strides(draw, shape, W[dt])
    ow = 4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else W[dt]
    f = dict(op=op, dtype=dt, axis=0, d0=shape[2], d1=shape[1], d2=shape[0], src_addr=0,
             src_s0=s0, src_s1=s1, src_s2=s2, in_zp=draw(zp), dst_addr=DST,
             dst_s0=ow, dst_s1=ow * shape[1] + draw(st.sampled_from([0, ow])))
    sram = np.zeros(SRAM, np.uint8)
    raw = _values(draw, dt, SRAM // 2 // W[dt]).view(np.uint8)
    sram[:len(raw)] = raw
    return f, sram


def _state(sram: np.ndarray) -> MachineState:
    s = MachineState.__new__(MachineState)
    s.sram, s.batch, s.pool, s.views = sram.copy(), None, None, None
    return s


def _reduce_kernel(run, f: dict, sram: np.ndarray) -> np.ndarray:
    state = _state(sram)
    dt = NP_DTYPE[f["dtype"]]
    out_dt = I32 if f["op"] in (ReduceOp.SUM, ReduceOp.SUMSQ) else dt
    shape = (f["d2"], f["d1"], f["d0"])
    x = _eview(state.sram, 0, shape, (f["src_s2"], f["src_s1"], f["src_s0"]), dt)
    y = _eview(state.sram, DST, shape[:2], (f["dst_s1"], f["dst_s0"]), out_dt)
    run(x, np.int64(f["op"]), np.int64(f["in_zp"]), y)
    return state.sram


def _reference(handler, f: dict, sram: np.ndarray) -> np.ndarray:
    state = _state(sram)
    handler(state, f)
    return state.sram


@SETTINGS
@given(reduce_case())
def test_reduce_kernel_equals_the_reference(case):
    f, sram = case
    want = _reference(exec_reduce, f, sram)
    for run in (kern_reduce.reduce_rows.py, kern_reduce.reduce_rows.compiled):
        assert np.array_equal(_reduce_kernel(run, f, sram), want)
    step = kern_reduce.build_reduce(Op(None, 0, Opcode.REDUCE, None, f, None), lambda: None)
    state = _state(sram)
    step(state)
    assert np.array_equal(state.sram, want)


def test_reduce_saturates_and_clips():
    """Sums past int32 both ways, and SUMSQ's clip at 2^16 (zero points far outside int16)."""
    for dt, v, zp, op in [(DType.I16, -32768, 0, ReduceOp.SUM), (DType.I16, 32767, -40_000,
                          ReduceOp.SUM), (DType.I32, INT32_MIN, INT32_MAX, ReduceOp.SUM),
                          (DType.I16, 5, 70_000, ReduceOp.SUMSQ),
                          (DType.I32, INT32_MAX, INT32_MIN, ReduceOp.SUMSQ)]:
        n = 700
        f = dict(op=op, dtype=dt, axis=0, d0=n, d1=1, d2=1, src_addr=0, src_s0=W[dt],
                 src_s1=0, src_s2=0, in_zp=zp, dst_addr=DST, dst_s0=4, dst_s1=4)
        sram = np.zeros(SRAM, np.uint8)
        sram[:n * W[dt]] = np.full(n, v, f"<i{W[dt]}").view(np.uint8)
        want = _reference(exec_reduce, f, sram)
        for run in (kern_reduce.reduce_rows.py, kern_reduce.reduce_rows.compiled):
            assert np.array_equal(_reduce_kernel(run, f, sram), want), (dt, v, zp, op)


def test_reduce_overlap_and_other_axes_are_not_kernels():
    f = dict(op=ReduceOp.SUM, dtype=DType.I16, axis=0, d0=8, d1=2, d2=1, src_addr=0, src_s0=2,
             src_s1=16, src_s2=0, in_zp=0, dst_addr=8, dst_s0=4, dst_s1=4)
    op = Op(None, 0, Opcode.REDUCE, None, f, None)
    assert kern_reduce.build_reduce(op, lambda: None) is None
    op = Op(None, 0, Opcode.REDUCE, None, dict(f, dst_addr=DST, axis=1), None)
    assert kern_reduce.build_reduce(op, lambda: None) is None


@st.composite
def unary_case(draw):
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 30)))
    in_place = draw(st.booleans())  # a destination never writes a byte twice (prepare)
    s2, s1, s0 = _strides(draw, shape, 4, zero=not in_place)
    dense = (shape[1] * shape[2] * 4, shape[2] * 4, 4)
    f = dict(op=draw(st.sampled_from(list(UnaryOp))), frac_bits=draw(st.integers(0, 31)),
             d0=shape[2], d1=shape[1], d2=shape[0], src_addr=0, src_s0=s0, src_s1=s1,
             src_s2=s2, dst_addr=0 if in_place else DST,
             dst_s0=s0 if in_place else dense[2], dst_s1=s1 if in_place else dense[1],
             dst_s2=s2 if in_place else dense[0])
    sram = np.zeros(SRAM, np.uint8)
    vals = _values(draw, DType.I32, 400)
    small = np.random.default_rng(int(vals[0]) & 0xFFFF).integers(1, 1 << 20, 400)
    vals = np.where(np.arange(400) % 3 == 0, small, vals)  # small positives: large results
    sram[:1600] = vals.astype("<i4").view(np.uint8)
    return f, sram


@SETTINGS
@given(unary_case())
def test_unary_kernel_equals_the_reference(case):
    f, sram = case
    want = _reference(exec_unary, f, sram)
    shape = (f["d2"], f["d1"], f["d0"])
    for run in (kern_reduce.unary.py, kern_reduce.unary.compiled):
        state = _state(sram)
        x = _eview(state.sram, 0, shape, (f["src_s2"], f["src_s1"], f["src_s0"]), I32)
        y = _eview(state.sram, f["dst_addr"], shape, (f["dst_s2"], f["dst_s1"], f["dst_s0"]),
                   I32)
        run(x, f["op"] == UnaryOp.RECIP, np.int64(f["frac_bits"]), y)
        assert np.array_equal(state.sram, want)
    step = kern_reduce.build_unary(Op(None, 0, Opcode.UNARY, None, f, None), lambda: None)
    if step is not None:  # in place or disjoint: always
        state = _state(sram)
        step(state)
        assert np.array_equal(state.sram, want)


def test_unary_every_fraction_width_at_the_edges():
    vals = np.array([INT32_MIN, -1, 0, 1, 2, 3, 4, 5, 7, 1 << 15, (1 << 30) - 1, 1 << 30,
                     INT32_MAX], "<i4")
    for op in UnaryOp:
        for fb in range(32):
            f = dict(op=op, frac_bits=fb, d0=len(vals), d1=1, d2=1, src_addr=0, src_s0=4,
                     src_s1=0, src_s2=0, dst_addr=DST, dst_s0=4, dst_s1=0, dst_s2=0)
            sram = np.zeros(SRAM, np.uint8)
            sram[:4 * len(vals)] = vals.view(np.uint8)
            want = _reference(exec_unary, f, sram)
            step = kern_reduce.build_unary(Op(None, 0, Opcode.UNARY, None, f, None),
                                           lambda: None)
            state = _state(sram)
            step(state)
            assert np.array_equal(state.sram, want), (op, fb)
