"""``tessel.sim.kern_vec``'s kernels equal their reference handlers bit for bit. ELTWISE
against ``vector.exec_eltwise``, uncompiled (``.py``) and compiled, on Hypothesis-drawn
instructions: every EltOp, operands dense or stride-0 along any axis (a value per row, per
column, one element), zero points, multipliers and shifts at their extremes, outputs that
saturate, operands overlapping the output (copied first) and operand values at their types'
extremes. The compiled kernel runs a few dtype triples (one signature each, ~0.5-1 s to compile
once; together they put every type in every position); the uncompiled one runs all. LUT
against ``vector.exec_lut`` on random entries (int16 extremes: the wrapped slope and result)
and every input value, through the fast path's closure, in place and not; the int16 closure's
table follows the LUT entries."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessel.isa import Opcode
from tessel.isa.fields import DType, EltOp, LutMode
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import kern_vec
from tessel.sim.prepare import Op
from tessel.sim.state import MachineState
from tessel.sim.vector import exec_eltwise, exec_lut

W = {DType.I8: 1, DType.I16: 2, DType.I32: 4}
RANGE = {DType.I8: (-128, 127), DType.I16: (-32768, 32767), DType.I32: (INT32_MIN, INT32_MAX)}
COMPILED = [(DType.I8, DType.I16, DType.I32), (DType.I16, DType.I32, DType.I8),
            (DType.I32, DType.I8, DType.I16), (DType.I32, DType.I32, DType.I32)]
EVERY = [(a, b, o) for a in W for b in W for o in W]
SRAM = 4096
A, B, OUT = 0, 1200, 2400  # each operand's region (at most 2 x 4 x 9 int32 elements)

# the axes a stride-0 operand repeats along (d2, d1, d0): dense, a value per row, per
# column, one element, one value per plane
BROADCAST = [(), (0,), (1,), (0, 1, 2), (1, 2)]

mult = st.one_of(st.sampled_from([0, 1, 2, 1 << 30, (1 << 30) + 1, 2**31 - 1]),
                 st.integers(0, 2**31 - 1))
shift = st.one_of(st.sampled_from([-31, -30, -1, 0, 1, 29, 30]), st.integers(-31, 30))
zp = st.one_of(st.sampled_from([0, 1, -1, 127, -128, 32767, -32768, INT32_MAX, INT32_MIN]),
               st.integers(INT32_MIN, INT32_MAX))


@st.composite
def eltwise(draw, types):
    """The fields of one ELTWISE and the SRAM bytes it reads."""
    da, db, do = draw(st.sampled_from(types))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 9)))
    f = dict(op=draw(st.sampled_from(list(EltOp))), a_dtype=da, b_dtype=db, out_dtype=do,
             d2=shape[0], d1=shape[1], d0=shape[2], left_shift=draw(st.integers(0, 31)),
             a_zp=draw(zp), b_zp=draw(zp), a_mult=draw(mult), a_shift=draw(shift),
             b_mult=draw(mult), b_shift=draw(shift), out_mult=draw(mult),
             out_shift=draw(shift), out_zp=draw(zp))
    lo, hi = RANGE[do]
    ends = st.one_of(st.sampled_from([lo, hi, 0, lo + 1, hi - 1]), st.integers(lo, hi))
    f["act_min"], f["act_max"] = sorted((draw(ends), draw(ends)))
    out_at = draw(st.sampled_from([OUT, A, B]))  # A / B: in place of an operand's bytes
    for name, addr, dt in (("a", A, da), ("b", B, db), ("out", OUT, do)):
        w = W[dt]
        dense = (shape[1] * shape[2] * w, shape[2] * w, w)
        flat = () if name == "out" else draw(st.sampled_from(BROADCAST))
        f.update({f"{name}_addr": out_at if name == "out" else addr,
                  **{f"{name}_s{2 - k}": 0 if k in flat else dense[k] for k in range(3)}})
    sram = np.zeros(SRAM, np.uint8)
    for addr, dt in ((A, da), (B, db)):
        lo, hi = RANGE[dt]
        n = int(np.prod(shape))
        vals = draw(st.lists(st.one_of(st.sampled_from([lo, hi, 0, -1, 1]),
                                       st.integers(lo, hi)), min_size=n, max_size=n))
        sram[addr:addr + n * W[dt]] = np.array(vals, f"<i{W[dt]}").view(np.uint8)
    return f, sram


def _reference(f: dict, sram: np.ndarray) -> np.ndarray:
    state = MachineState.__new__(MachineState)
    state.sram = sram.copy()
    exec_eltwise(state, f)
    return state.sram


def _kernel(run, f: dict, sram: np.ndarray) -> np.ndarray:
    """``build_eltwise``'s steps with the kernel ``run``: operands copied (C order, apart from
    the output), the output written in place."""
    sram = sram.copy()
    a, b, out = kern_vec.operands(f, sram)
    y = np.empty(out.shape, out.dtype)
    run(a.copy(), b.copy(), y, kern_vec.params(f))
    out[...] = y
    return sram


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(eltwise(EVERY))
def test_uncompiled_kernel_equals_the_reference(case):
    f, sram = case
    assert np.array_equal(_kernel(kern_vec.eltwise.py, f, sram), _reference(f, sram))


@SETTINGS
@given(eltwise(COMPILED))
def test_compiled_kernel_equals_the_reference(case):
    f, sram = case
    assert np.array_equal(_kernel(kern_vec.eltwise.compiled, f, sram), _reference(f, sram))


@pytest.mark.parametrize("op", list(EltOp))
def test_extremes_every_op(op):
    """int32 operands at the extremes against every other, zero points at theirs (``x - zp``
    up to +-2^32: the clip to +-2^31), the largest multipliers and left shift, output stages
    that tell ``r`` next to INT32_MIN from it: every clip and sat32 of the reference shows."""
    vals = np.array([INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX], "<i4")
    n = len(vals)
    sram = np.zeros(SRAM, np.uint8)
    sram[A:A + 4 * n] = vals.view(np.uint8)
    sram[B:B + 4 * n] = vals.view(np.uint8)
    cases = [(INT32_MIN, INT32_MAX, 31, 2**31 - 1, 30), (INT32_MAX, INT32_MIN, 0, 1, -31),
             (0, 0, 0, 1 << 30, 1), (-5, 7, 20, 2**31 - 1, -1), (-1, 1, 1, 0, 0)]
    stages = [(2**31 - 1, 0), (2**31 - 1, -31), (1 << 30, 30), (1, 0), (0, 0)]
    for (a_zp, b_zp, left, m, sh), (out_mult, out_shift) in itertools.product(cases, stages):
        f = dict(op=op, a_dtype=DType.I32, b_dtype=DType.I32, out_dtype=DType.I32, d2=1, d1=n,
                 d0=n, a_addr=A, a_s2=0, a_s1=0, a_s0=4, b_addr=B, b_s2=0, b_s1=4, b_s0=0,
                 out_addr=OUT, out_s2=0, out_s1=4 * n, out_s0=4, left_shift=left, a_zp=a_zp,
                 b_zp=b_zp, a_mult=m, a_shift=sh, b_mult=m, b_shift=sh, out_mult=out_mult,
                 out_shift=out_shift, out_zp=0, act_min=INT32_MIN, act_max=INT32_MAX)
        want = _reference(f, sram)
        for run in (kern_vec.eltwise.py, kern_vec.eltwise.compiled):
            assert np.array_equal(_kernel(run, f, sram), want), (a_zp, b_zp, left, m, sh)


@settings(max_examples=40, deadline=None)
@given(wide=st.booleans(), base=st.integers(0, 200), in_place=st.booleans(),
       entries=st.lists(st.one_of(st.sampled_from([-32768, 32767, 0, -1]),
                                  st.integers(-32768, 32767)), min_size=513, max_size=513))
def test_lut_kernels_equal_the_reference(wide, base, in_place, entries):
    """Every input value of the type (int8: 256 as 16 x 16; int16: 65536 as 4 x 128 x 128)
    through ``build_lut``'s closure (compiled); the uncompiled kernel on int8's every value,
    int16's every entry at offsets 0, 1, 63, 64 and 127."""
    dt, n = (np.dtype("<i2"), 1 << 16) if wide else (np.dtype("<i1"), 1 << 8)
    shape = (4, 128, 128) if wide else (1, 16, 16)
    w = dt.itemsize
    f = dict(lut_mode=LutMode.I16_513 if wide else LutMode.I8_256, lut_base=base,
             d2=shape[0], d1=shape[1], d0=shape[2], src_addr=0, src_s2=shape[1] * shape[2] * w,
             src_s1=shape[2] * w, src_s0=w, dst_addr=0 if in_place else n * w,
             dst_s2=shape[1] * shape[2] * w, dst_s1=shape[2] * w, dst_s0=w)

    def state() -> MachineState:
        s = MachineState.__new__(MachineState)
        s.sram = np.zeros(2 * n * w, np.uint8)
        s.sram[:n * w] = np.arange(n, dtype=f"<u{w}").view(np.uint8)
        s.lut_bytes = np.zeros(2 * (base + 513), np.uint8)
        s.lut = s.lut_bytes.view("<i2")
        s.lut[base:] = entries
        return s
    ref, fast = state(), state()
    exec_lut(ref, f)
    kern_vec.build_lut(Op(None, 0, Opcode.LUT, None, f, None), lambda: None)(fast)
    assert np.array_equal(fast.sram, ref.sram)
    every = np.arange(n, dtype=f"<u{w}").view(dt)  # the reference's output for x: want[x]
    want = ref.sram[f["dst_addr"]:][:n * w].view(dt)
    x = every.reshape(1, 16, 16) if not wide else \
        (every.reshape(512, 128)[:, [0, 1, 63, 64, 127]]).reshape(1, 512, 5).copy()
    out = np.empty(x.shape, dt)
    (kern_vec.lut_i16 if wide else kern_vec.lut_i8).py(x, ref.lut, np.int64(base), out)
    assert np.array_equal(out, want[x.view(f"<u{w}")])


def test_lut_i16_table_follows_the_entries():
    """The int16 closure's table (``i16_table``) is the current entries': new entries (a
    LUT_LOAD between two runs) give a new table, the old entries their old one again."""
    base = 7
    f = dict(lut_mode=LutMode.I16_513, lut_base=base, d2=1, d1=3, d0=100, src_addr=0,
             src_s2=600, src_s1=200, src_s0=2, dst_addr=4096, dst_s2=600, dst_s1=200,
             dst_s0=2)
    rng = np.random.default_rng(3)
    step = kern_vec.build_lut(Op(None, 0, Opcode.LUT, None, f, None), lambda: None)
    state = MachineState.__new__(MachineState)
    state.sram = rng.integers(0, 256, 8192).astype(np.uint8)
    state.lut_bytes = np.zeros(2 * (base + 513), np.uint8)
    state.lut = state.lut_bytes.view("<i2")
    state.batch, state.views, state.pool = None, None, None
    contents = [rng.integers(-32768, 32768, 513) for _ in range(2)]
    for entries in (*contents, contents[0]):
        state.lut[base:] = entries
        ref = MachineState.__new__(MachineState)
        ref.sram, ref.lut = state.sram.copy(), state.lut.copy()
        exec_lut(ref, f)
        step(state)
        assert np.array_equal(state.sram, ref.sram)
