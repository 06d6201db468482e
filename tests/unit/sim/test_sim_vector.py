"""Vector-engine instructions against references written element by element in plain ints."""

from __future__ import annotations

import math

import numpy as np
import pytest
from simkit import I, run_raw, sram_read

from fixedpoint_ref import mbqm_ref, requantize_ref, rounding_div_ref
from tessel.isa import (
    AccSrc,
    DType,
    EltOp,
    Engine,
    LutMode,
    Opcode,
    ParamMode,
    PoolOp,
    ReduceOp,
    Rounding,
    UnaryOp,
)
from tessel.ops import intops

RNG = np.random.default_rng(99)
V = Engine.VECTOR


def _params(bias, q31, shift) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.int32).ravel() for v in (bias, q31, shift)])


@pytest.mark.parametrize("src", [AccSrc.ACC, AccSrc.SRAM])
@pytest.mark.parametrize("mode", [ParamMode.PER_CHANNEL, ParamMode.PER_TENSOR])
def test_requant(src, mode):
    rows, ch = 5, 6
    acc = RNG.integers(-(2**31), 2**31, (rows, ch + 2), dtype=np.int64).astype(np.int32)
    acc[0, :3] = [2**31 - 1, -(2**31), 0]
    p = ch if mode == ParamMode.PER_CHANNEL else 1
    bias = RNG.integers(-(2**20), 2**20, p)
    q31 = RNG.integers(2**30, 2**31, p)
    shift = RNG.integers(-31, 5, p)
    state_src = dict(acc=[(0, acc)]) if src == AccSrc.ACC else dict(sram=[(8192, acc)])
    ins = I(Opcode.REQUANT, src=src, src_addr=0 if src == AccSrc.ACC else 8192,
            src_stride=(ch + 2) * (1 if src == AccSrc.ACC else 4), rows=rows, ch=ch,
            out_dtype=DType.I8, dst_addr=100, dst_stride=ch + 1, param_addr=2000,
            param_mode=mode, out_zp=-3, act_min=-100, act_max=127)
    sram = [(2000, _params(bias, q31, shift))] + state_src.get("sram", [])
    st = run_raw({V: [ins]}, sram=sram, acc=state_src.get("acc", []))
    got = sram_read(st, 100, (rows * (ch + 1),), np.int8)
    for r in range(rows):
        for c in range(ch):
            j = c if mode == ParamMode.PER_CHANNEL else 0
            want = requantize_ref(int(acc[r, c]), int(bias[j]), int(q31[j]), int(shift[j]), -3,
                                  -100, 127)
            assert got[r * (ch + 1) + c] == want, (r, c)


def _elt_ref(op, a, b, f):
    if op == EltOp.MUL:
        r = max(min((a - f["a_zp"]) * (b - f["b_zp"]), 2**31 - 1), -(2**31))
    else:
        def sc(x, zp, m, s):
            v = max(min((x - zp) * 2 ** f["left_shift"], 2**31 - 1), -(2**31))
            return mbqm_ref(v, m, s)
        ra = sc(a, f["a_zp"], f["a_mult"], f["a_shift"])
        rb = sc(b, f["b_zp"], f["b_mult"], f["b_shift"])
        r = {EltOp.ADD: ra + rb, EltOp.SUB: ra - rb, EltOp.MAX: max(ra, rb),
             EltOp.MIN: min(ra, rb)}[op]
        r = max(min(r, 2**31 - 1), -(2**31))
    return max(min(mbqm_ref(r, f["out_mult"], f["out_shift"]) + f["out_zp"], f["act_max"]),
               f["act_min"])


@pytest.mark.parametrize("op", list(EltOp))
def test_eltwise_with_broadcast(op):
    d0, d1 = 8, 3
    a = RNG.integers(-128, 128, (d1, d0), dtype=np.int8)
    b = RNG.integers(-128, 128, (d0,), dtype=np.int8)  # broadcast over i1 (stride 0)
    f = dict(a_zp=5, b_zp=-7, left_shift=20, a_mult=1_500_000_000, a_shift=-1,
             b_mult=1_200_000_000, b_shift=0, out_mult=1_900_000_000, out_shift=-18,
             out_zp=2, act_min=-128, act_max=127)
    if op == EltOp.MUL:
        f.update(left_shift=0, out_mult=1_400_000_000, out_shift=-7)
    ins = I(Opcode.ELTWISE, op=op, a_dtype=DType.I8, b_dtype=DType.I8, out_dtype=DType.I8,
            d0=d0, d1=d1, a_addr=0, a_s0=1, a_s1=d0, b_addr=100, b_s0=1, b_s1=0,
            out_addr=200, out_s0=1, out_s1=d0, **f)
    st = run_raw({V: [ins]}, sram=[(0, a), (100, b)])
    got = sram_read(st, 200, (d1, d0), np.int8)
    want = [[_elt_ref(op, int(a[j, i]), int(b[i]), f) for i in range(d0)] for j in range(d1)]
    assert np.array_equal(got, np.array(want))


@pytest.mark.parametrize("dtype,n,both", [(DType.I16, 1500, False), (DType.I8, 2048, False),
                                           (DType.I8, 2048, True)])
def test_eltwise_in_place_matches_a_separate_output(dtype, n, both):
    """An operand that is the output's very pattern (in place) is not copied first: every
    element is read before it is written (a row longer than a chunk, and the int8 pair table)."""
    dt = np.dtype(f"<i{dtype.nbytes}")
    a = RNG.integers(dtype.lo, dtype.hi + 1, n).astype(dt)
    b = RNG.integers(dtype.lo, dtype.hi + 1, n).astype(dt)
    f = dict(op=EltOp.ADD, a_dtype=dtype, b_dtype=dtype, out_dtype=dtype, d0=n, a_s0=dt.itemsize,
             b_s0=dt.itemsize, out_s0=dt.itemsize, a_zp=3, b_zp=-2, left_shift=20,
             a_mult=1_500_000_000, a_shift=-1, b_mult=1_200_000_000, b_shift=0,
             out_mult=1_900_000_000, out_shift=-19, out_zp=1, act_min=dtype.lo, act_max=dtype.hi)
    b_at = 0 if both else 8192
    apart = I(Opcode.ELTWISE, a_addr=0, b_addr=b_at, out_addr=16384, **f)
    in_place = I(Opcode.ELTWISE, a_addr=0, b_addr=b_at, out_addr=0, **f)
    sram = [(0, a)] if both else [(0, a), (8192, b)]
    want = sram_read(run_raw({V: [apart]}, sram=sram), 16384, (n,), dt)
    assert np.array_equal(sram_read(run_raw({V: [in_place]}, sram=sram), 0, (n,), dt), want)
    assert not np.array_equal(want, a)


def test_eltwise_int32_extremes_saturate():
    a = np.array([2**31 - 1, -(2**31), 70000, -70000], np.int32)
    b = np.array([2**31 - 1, 2**31 - 1, 70000, 3], np.int32)
    f = dict(a_zp=-(2**31), b_zp=2**31 - 1, out_mult=1 << 30, out_shift=1, act_min=-(2**31),
             act_max=2**31 - 1, out_zp=0, left_shift=0)
    ins = I(Opcode.ELTWISE, op=EltOp.MUL, a_dtype=DType.I32, b_dtype=DType.I32,
            out_dtype=DType.I32, d0=4, a_addr=0, a_s0=4, b_addr=16, b_s0=4, out_addr=32,
            out_s0=4, **f)
    st = run_raw({V: [ins]}, sram=[(0, a), (16, b)])
    want = [_elt_ref(EltOp.MUL, int(x), int(y), dict(f, a_zp=-(2**31), b_zp=2**31 - 1))
            for x, y in zip(a, b, strict=True)]
    assert sram_read(st, 32, (4,), np.int32).tolist() == want


def test_lut_i8_and_lut_load():
    table = RNG.integers(-32768, 32768, 256, dtype=np.int16)
    x = np.arange(-128, 128, dtype=np.int8)
    prog = [I(Opcode.LUT_LOAD, lut_base=7, count=256, src_addr=1000),
            I(Opcode.LUT, lut_mode=LutMode.I8_256, lut_base=7, d0=256, src_addr=0, src_s0=1,
              dst_addr=4000, dst_s0=1)]
    st = run_raw({V: prog}, sram=[(0, x), (1000, table)])
    assert np.array_equal(st.lut[7:263], table)
    want = [((int(table[v + 128]) + 128) % 256) - 128 for v in x.tolist()]  # wrap8
    assert sram_read(st, 4000, (256,), np.int8).tolist() == want


def test_lut_i16_interpolated():
    table = RNG.integers(-32768, 32768, 513, dtype=np.int16)
    x = np.concatenate([np.array([-32768, -1, 0, 1, 127, 128, 32767], np.int16),
                        RNG.integers(-32768, 32768, 57, dtype=np.int16)])
    prog = [I(Opcode.LUT_LOAD, lut_base=100, count=513, src_addr=1000),
            I(Opcode.LUT, lut_mode=LutMode.I16_513, lut_base=100, d0=8, d1=8, src_addr=0,
              src_s0=2, src_s1=16, dst_addr=4000, dst_s0=2, dst_s1=16)]
    st = run_raw({V: prog}, sram=[(0, x), (1000, table)])

    def w16(v):
        return ((v + 32768) % 65536) - 32768

    want = []
    for v in x.tolist():
        idx, off = 256 + (v >> 7), v & 0x7F
        base = int(table[idx])
        slope = w16(int(table[idx + 1]) - base)
        want.append(w16(base + ((slope * off + 64) >> 7)))
    assert sram_read(st, 4000, (64,), np.int16).tolist() == want


def _pool_ref(x, op, k, s, p, o, lo, hi):
    h, w, c = x.shape
    out = np.zeros((o[0], o[1], c), np.int64)
    for oy in range(o[0]):
        for ox in range(o[1]):
            for ch in range(c):
                vals = [int(x[iy, ix, ch]) for ky in range(k[0]) for kx in range(k[1])
                        for iy in [oy * s[0] - p[0] + ky] for ix in [ox * s[1] - p[1] + kx]
                        if 0 <= iy < h and 0 <= ix < w]
                y = max(vals) if op == PoolOp.MAX else rounding_div_ref(sum(vals), len(vals))
                out[oy, ox, ch] = min(max(y, lo), hi)
    return out


@pytest.mark.parametrize("op", list(PoolOp))
@pytest.mark.parametrize("dtype", [DType.I8, DType.I16])
def test_pool(op, dtype):
    npdt = np.int8 if dtype == DType.I8 else np.int16
    info = np.iinfo(npdt)
    h, w, c = 5, 6, 3
    x = RNG.integers(info.min, info.max + 1, (h, w, c)).astype(npdt)
    nb = np.dtype(npdt).itemsize
    ins = I(Opcode.POOL, op=op, dtype=dtype, in_addr=0, in_h=h, in_w=w, in_stride_h=w * c * nb,
            in_stride_w=c * nb, ch=c, kh=3, kw=3, stride_h=2, stride_w=2, pad_top=1,
            pad_left=1, out_h=3, out_w=3, out_addr=1000, out_stride_h=3 * c * nb,
            out_stride_w=c * nb, act_min=info.min + 10, act_max=info.max)
    st = run_raw({V: [ins]}, sram=[(0, x)])
    want = _pool_ref(x, op, (3, 3), (2, 2), (1, 1), (3, 3), int(info.min) + 10, int(info.max))
    assert np.array_equal(sram_read(st, 1000, (3, 3, c), npdt), want)


@pytest.mark.parametrize("op", list(ReduceOp))
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduce(op, axis):
    x = RNG.integers(-32768, 32768, (3, 4, 5)).astype(np.int16)  # (d2, d1, d0)
    dims = (5, 4, 3)
    kept = [n for k, n in enumerate(dims) if k != axis]
    w = 4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else 2
    ins = I(Opcode.REDUCE, op=op, dtype=DType.I16, axis=axis, d0=5, d1=4, d2=3, src_addr=0,
            src_s0=2, src_s1=10, src_s2=40, in_zp=-1000, dst_addr=500, dst_s0=w,
            dst_s1=w * kept[0])
    st = run_raw({V: [ins]}, sram=[(0, x)])
    v = x.astype(np.int64)
    ax = 2 - axis
    ref = {ReduceOp.SUM: lambda: (v + 1000).sum(ax),
           ReduceOp.SUMSQ: lambda: ((v + 1000) ** 2).sum(ax),
           ReduceOp.MAX: lambda: v.max(ax), ReduceOp.MIN: lambda: v.min(ax)}[op]()
    ref = np.clip(ref, -(2**31), 2**31 - 1)
    got = sram_read(st, 500, (kept[1], kept[0]), np.int32 if w == 4 else np.int16)
    assert np.array_equal(got, ref)


def test_copy_transpose_in_place_reads_first():
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    # transpose (4, 6) -> (6, 4) over the same bytes: every read happens before any write
    ins = I(Opcode.COPY, dtype=DType.I32, d0=6, d1=4, src_addr=0, src_s0=4, src_s1=24,
            dst_addr=0, dst_s0=16, dst_s1=4)
    st = run_raw({V: [ins]}, sram=[(0, x)])
    assert np.array_equal(sram_read(st, 0, (6, 4), np.int32), x.T)


@pytest.mark.parametrize("op", list(UnaryOp))
def test_unary(op):
    x = np.array([-5, 0, 1, 2, 3, 7, 1000, 2**31 - 1, 123456789, 65536], np.int32)
    ins = I(Opcode.UNARY, op=op, frac_bits=30 if op == UnaryOp.RSQRT else 20, d0=10,
            src_addr=0, src_s0=4, dst_addr=64, dst_s0=4)
    st = run_raw({V: [ins]}, sram=[(0, x)])
    fb = ins.frac_bits
    want = []
    for v in x.tolist():
        if v <= 0:
            want.append(2**31 - 1)
        elif op == UnaryOp.RECIP:
            want.append(min(rounding_div_ref(2**fb, v), 2**31 - 1))
        else:
            want.append(min(math.isqrt(2 ** (2 * fb) // v), 2**31 - 1))
    assert sram_read(st, 64, (10,), np.int32).tolist() == want


@pytest.mark.parametrize("dtype,n", [(DType.I8, 4096), (DType.I8, 64), (DType.I16, 2048)])
def test_eltwise_single_rounding_is_the_golden_models(dtype, n):
    """ELTWISE rounding SINGLE (the int8 pair table from 1024 elements, the kernel below and
    for int16) == intops.eltwise's; the sum quartered (multiplier 2^30, shift -1), so that many
    results are halves, which DOUBLE rounds otherwise."""
    dt = np.dtype(f"<i{dtype.nbytes}")
    every = np.arange(dtype.lo, dtype.hi + 1)
    a = RNG.choice(every, n).astype(dt)
    b = RNG.choice(every, n).astype(dt)
    f = dict(a_zp=-3, b_zp=0, left_shift=0, a_mult=1 << 30, a_shift=1, b_mult=1 << 30,
             b_shift=1, out_mult=1 << 30, out_shift=-1, out_zp=-5, act_min=dtype.lo,
             act_max=dtype.hi)
    ins = I(Opcode.ELTWISE, op=EltOp.ADD, a_dtype=dtype, b_dtype=dtype, out_dtype=dtype, d0=n,
            a_addr=0, a_s0=dt.itemsize, b_addr=8192, b_s0=dt.itemsize, out_addr=16384,
            out_s0=dt.itemsize, rounding=Rounding.SINGLE, **f)
    got = sram_read(run_raw({V: [ins]}, sram=[(0, a), (8192, b)]), 16384, (n,), dt)
    want = intops.eltwise(EltOp.ADD, a, b, out_dtype=dt, rounding=Rounding.SINGLE, **f)
    np.testing.assert_array_equal(got, want)
    assert np.any(intops.eltwise(EltOp.ADD, a, b, out_dtype=dt, **f) != want)
