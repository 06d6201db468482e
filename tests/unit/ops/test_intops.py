"""tessel.ops.intops against the simulator: one hand-assembled instruction per case.

Each test writes random operands (and edge values) into a fresh simulated SRAM / accumulator,
runs ONE instruction of the ISA on the functional simulator and checks that the intops function
of that instruction returns exactly the same integers. This is what makes golden == simulator.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simkit import I, acc_read, run_raw, sram_read  # noqa: E402

from tessel.errors import TesselConfigError  # noqa: E402
from tessel.isa import (  # noqa: E402
    AccMode,
    AccSrc,
    DType,
    EltOp,
    Engine,
    LutMode,
    Opcode,
    ParamMode,
    PoolOp,
    ReduceOp,
    UnaryOp,
)
from tessel.ops import intops  # noqa: E402

RNG = np.random.default_rng(2024)
V, M = Engine.VECTOR, Engine.MATRIX
NP = {DType.I8: np.int8, DType.I16: np.int16, DType.I32: np.int32}
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def rand(dtype: DType, shape, edges: bool = True) -> np.ndarray:
    """Random values of ``dtype`` with its extremes (and 0, +-1) written into the first slots."""
    x = RNG.integers(dtype.lo, dtype.hi, shape, endpoint=True, dtype=np.int64)
    if edges:
        flat = x.reshape(-1)
        e = [dtype.lo, dtype.hi, 0, 1, -1, dtype.lo + 1, dtype.hi - 1][: flat.size]
        flat[: len(e)] = e
    return x.astype(NP[dtype])


def strides(shape, nbytes: int) -> list[int]:
    """Contiguous byte strides of a C-order array, innermost first (ISA s0, s1, ...)."""
    out, step = [], nbytes
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out


# --------------------------------------------------------------------------------------------
# REQUANT
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", list(AccSrc))
@pytest.mark.parametrize("mode", list(ParamMode))
@pytest.mark.parametrize("out", list(DType))
def test_requant(src, mode, out):
    rows, ch = 6, 7
    x = rand(DType.I32, (rows, ch))
    p = ch if mode == ParamMode.PER_CHANNEL else 1
    bias = RNG.integers(-(2**30), 2**30, p)
    bias[0] = INT32_MAX  # saturating acc + bias
    q31 = RNG.integers(0, 2**31, p)
    shift = RNG.integers(-31, 31, p)
    lo, hi = out.lo + 3, out.hi - 5
    params = np.concatenate([bias, q31, shift]).astype(np.int32)
    on_acc = src == AccSrc.ACC
    ins = I(Opcode.REQUANT, src=src, src_addr=0 if on_acc else 4096,
            src_stride=ch if on_acc else 4 * ch, rows=rows, ch=ch, out_dtype=out,
            dst_addr=1024, dst_stride=ch * out.nbytes, param_addr=2048, param_mode=mode,
            out_zp=-7, act_min=lo, act_max=hi)
    st = run_raw({V: [ins]}, sram=[(2048, params)] + ([] if on_acc else [(4096, x)]),
                 acc=[(0, x)] if on_acc else [])
    want = sram_read(st, 1024, (rows, ch), NP[out])
    args = (bias, q31, shift) if p > 1 else (bias[0], q31[0], shift[0])
    got = intops.requant(x, *args, -7, lo, hi, out)
    assert got.dtype == NP[out]
    assert np.array_equal(got, want)


# --------------------------------------------------------------------------------------------
# ELTWISE
# --------------------------------------------------------------------------------------------


def run_eltwise(op, a, b, ad, bd, od, f):
    """a: (d2, d1, d0); b: (d2, 1, d0), broadcast over d1 by a zero stride."""
    d2, d1, d0 = a.shape
    sa, sb, so = strides(a.shape, ad.nbytes), strides(b.shape, bd.nbytes), strides(a.shape,
                                                                                   od.nbytes)
    ins = I(Opcode.ELTWISE, op=op, a_dtype=ad, b_dtype=bd, out_dtype=od, d0=d0, d1=d1, d2=d2,
            a_addr=0, a_s0=sa[0], a_s1=sa[1], a_s2=sa[2], b_addr=20000, b_s0=sb[0], b_s1=0,
            b_s2=sb[2], out_addr=40000, out_s0=so[0], out_s1=so[1], out_s2=so[2], **f)
    st = run_raw({V: [ins]}, sram=[(0, a), (20000, b)])
    return sram_read(st, 40000, a.shape, NP[od])


ELT_CASES = [  # (a, b, out) dtypes, fields
    ((DType.I8, DType.I8, DType.I8),
     dict(a_zp=5, b_zp=-7, left_shift=20, a_mult=1_500_000_000, a_shift=-1,
          b_mult=1_200_000_000, b_shift=0, out_mult=1_900_000_000, out_shift=-18, out_zp=2)),
    ((DType.I16, DType.I16, DType.I16),
     dict(a_zp=0, b_zp=0, left_shift=15, a_mult=1_100_000_000, a_shift=0,
          b_mult=2_000_000_000, b_shift=-2, out_mult=1_300_000_000, out_shift=-14, out_zp=0)),
    ((DType.I16, DType.I32, DType.I16),  # softmax-style: unit input multipliers
     dict(a_zp=-3, b_zp=11, left_shift=0, a_mult=1 << 30, a_shift=1, b_mult=1 << 30,
          b_shift=1, out_mult=1_600_000_000, out_shift=3, out_zp=32767)),
    ((DType.I32, DType.I32, DType.I32),  # extreme zero points: saturation everywhere
     dict(a_zp=INT32_MIN, b_zp=INT32_MAX, left_shift=31, a_mult=2**31 - 1, a_shift=30,
          b_mult=12345, b_shift=-31, out_mult=2**31 - 1, out_shift=30, out_zp=-5)),
    ((DType.I8, DType.I16, DType.I32),
     dict(a_zp=-128, b_zp=100, left_shift=7, a_mult=0, a_shift=0, b_mult=1 << 30,
          b_shift=-3, out_mult=1_000_000_000, out_shift=-20, out_zp=INT32_MAX)),
    ((DType.I8, DType.I8, DType.I16),  # left_shift 31: every non-zero input saturates
     dict(a_zp=0, b_zp=3, left_shift=31, a_mult=1 << 30, a_shift=-20, b_mult=1_500_000_000,
          b_shift=-25, out_mult=1 << 30, out_shift=0, out_zp=0)),
]


@pytest.mark.parametrize("op", list(EltOp))
@pytest.mark.parametrize("case", range(len(ELT_CASES)))
def test_eltwise(op, case):
    (ad, bd, od), f = ELT_CASES[case]
    a = rand(ad, (3, 4, 9))
    b = rand(bd, (3, 1, 9))
    lo, hi = od.lo + 1, od.hi - 2
    f = dict(f, act_min=lo, act_max=hi)
    if op == EltOp.MUL:
        f = dict(f, out_mult=f["out_mult"] // 3, out_shift=min(f["out_shift"], 0) - 9)
    want = run_eltwise(op, a, b, ad, bd, od, f)
    got = intops.eltwise(op, a, b, out_dtype=od, **f)
    assert got.dtype == NP[od]
    assert np.array_equal(got, want)


def test_eltwise_rejects_bad_clamp():
    with pytest.raises(TesselConfigError, match="act_min"):
        intops.eltwise(EltOp.ADD, np.int8([1]), np.int8([1]), out_mult=1, out_shift=0,
                       act_min=-200, act_max=0, out_dtype=DType.I8)


# --------------------------------------------------------------------------------------------
# LUT
# --------------------------------------------------------------------------------------------


def test_lut_i8_every_input():
    table = RNG.integers(-32768, 32768, 256).astype(np.int16)  # wrap8 of int16 entries
    x = np.arange(-128, 128, dtype=np.int8)
    prog = [I(Opcode.LUT_LOAD, lut_base=3, count=256, src_addr=1000),
            I(Opcode.LUT, lut_mode=LutMode.I8_256, lut_base=3, d0=256, src_addr=0, src_s0=1,
              dst_addr=2000, dst_s0=1)]
    st = run_raw({V: prog}, sram=[(0, x), (1000, table)])
    assert np.array_equal(intops.lut_i8(x, table), sram_read(st, 2000, (256,), np.int8))


@pytest.mark.parametrize("kind", ["random", "smooth"])
def test_lut_i16_every_input(kind):
    if kind == "random":  # slopes wrap: the worst case for the wrap16 arithmetic
        table = RNG.integers(-32768, 32768, 513).astype(np.int16)
    else:
        table = np.round(32767 * np.sin(np.linspace(-3, 3, 513))).astype(np.int16)
    x = np.arange(-32768, 32768).astype(np.int16).reshape(256, 256)
    prog = [I(Opcode.LUT_LOAD, lut_base=100, count=513, src_addr=200000),
            I(Opcode.LUT, lut_mode=LutMode.I16_513, lut_base=100, d0=256, d1=256, src_addr=0,
              src_s0=2, src_s1=512, dst_addr=300000, dst_s0=2, dst_s1=512)]
    st = run_raw({V: prog}, sram=[(0, x), (200000, table)])
    want = sram_read(st, 300000, (256, 256), np.int16)
    assert np.array_equal(intops.lut_i16(x, table), want)


# --------------------------------------------------------------------------------------------
# POOL
# --------------------------------------------------------------------------------------------

POOL_GEOMS = [  # kernel, stride, dilation, pad (top, left), out (h, w), input (h, w)
    ((3, 3), (2, 2), (1, 1), (1, 1), (3, 4), (5, 7)),
    ((2, 3), (1, 2), (2, 1), (0, 2), (4, 4), (6, 5)),
    ((5, 6), (1, 1), (1, 1), (0, 0), (1, 1), (5, 6)),  # global pooling
]


@pytest.mark.parametrize("op", list(PoolOp))
@pytest.mark.parametrize("dt", [DType.I8, DType.I16])
@pytest.mark.parametrize("geom", range(len(POOL_GEOMS)))
def test_pool(op, dt, geom):
    k, s, d, p, o, (h, w) = POOL_GEOMS[geom]
    c = 3
    x = rand(dt, (h, w, c))
    nb = dt.nbytes
    lo, hi = dt.lo + 9, dt.hi - 1
    ins = I(Opcode.POOL, op=op, dtype=dt, in_addr=0, in_h=h, in_w=w, in_stride_h=w * c * nb,
            in_stride_w=c * nb, ch=c, kh=k[0], kw=k[1], stride_h=s[0], stride_w=s[1],
            dil_h=d[0], dil_w=d[1], pad_top=p[0], pad_left=p[1], out_h=o[0], out_w=o[1],
            out_addr=4000, out_stride_h=o[1] * c * nb, out_stride_w=c * nb, act_min=lo,
            act_max=hi)
    st = run_raw({V: [ins]}, sram=[(0, x)])
    got = intops.pool(x, op, k, stride=s, dilation=d, pad=p, out_hw=o, act_min=lo, act_max=hi)
    assert np.array_equal(got, sram_read(st, 4000, (o[0], o[1], c), NP[dt]))


def test_pool_batched_and_empty_window():
    x = rand(DType.I8, (2, 4, 4, 3))
    got = intops.pool(x, PoolOp.MAX, (2, 2), stride=(2, 2), act_min=-128, act_max=127)
    want = x.reshape(2, 2, 2, 2, 2, 3).max(axis=(2, 4))
    assert np.array_equal(got, want)
    with pytest.raises(TesselConfigError, match="no position"):
        intops.pool(x, PoolOp.AVG, (1, 1), pad=(2, 0), out_hw=(1, 4), act_min=-128,
                    act_max=127)


# --------------------------------------------------------------------------------------------
# REDUCE
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(ReduceOp))
@pytest.mark.parametrize("dt", list(DType))
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduce(op, dt, axis):
    shape = (3, 4, 5)  # (d2, d1, d0)
    x = rand(dt, shape)
    dims = shape[::-1]
    kept = [n for k, n in enumerate(dims) if k != axis]  # (lo, hi) extents
    w = 4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else dt.nbytes
    st_ = strides(shape, dt.nbytes)
    zp = {DType.I8: -100, DType.I16: 20000, DType.I32: -7}[dt]
    ins = I(Opcode.REDUCE, op=op, dtype=dt, axis=axis, d0=dims[0], d1=dims[1], d2=dims[2],
            src_addr=0, src_s0=st_[0], src_s1=st_[1], src_s2=st_[2], in_zp=zp,
            dst_addr=1000, dst_s0=w, dst_s1=w * kept[0])
    st = run_raw({V: [ins]}, sram=[(0, x)])
    out_dt = np.int32 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else NP[dt]
    want = sram_read(st, 1000, (kept[1], kept[0]), out_dt)
    got = intops.reduce(x, op, 2 - axis, zp)
    assert np.array_equal(got, want)


def test_reduce_sumsq_saturates_like_the_simulator():
    x = np.full((1, 1, 4000), -32768, np.int16)  # 4000 * 2^30 saturates
    x[0, 0, :3] = [0, 5, 32767]
    ins = I(Opcode.REDUCE, op=ReduceOp.SUMSQ, dtype=DType.I16, axis=0, d0=4000, src_addr=0,
            src_s0=2, in_zp=0, dst_addr=10000)
    st = run_raw({V: [ins]}, sram=[(0, x)])
    got = intops.reduce(x, ReduceOp.SUMSQ, -1, 0)
    assert int(got.reshape(-1)[0]) == INT32_MAX == int(sram_read(st, 10000, (1,), np.int32)[0])


# --------------------------------------------------------------------------------------------
# UNARY
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(UnaryOp))
@pytest.mark.parametrize("fb", [0, 1, 15, 30, 31])
def test_unary(op, fb):
    x = np.concatenate([np.array([INT32_MIN, -1, 0, 1, 2, 3, 4, 7, 2**30, INT32_MAX]),
                        RNG.integers(1, 2**31, 40), RNG.integers(1, 2**12, 30)]).astype(np.int32)
    ins = I(Opcode.UNARY, op=op, frac_bits=fb, d0=x.size, src_addr=0, src_s0=4,
            dst_addr=1000, dst_s0=4)
    st = run_raw({V: [ins]}, sram=[(0, x)])
    assert np.array_equal(intops.unary(x, op, fb), sram_read(st, 1000, (x.size,), np.int32))


def test_isqrt_exact_where_float_sqrt_rounds_up():
    k = np.array([2**26 + 3, 2**30 + 1, 2**31 - 1], np.int64)
    v = np.concatenate([k * k - 1, k * k, [0, 1, 2**62]])
    assert intops._isqrt(v).tolist() == [math.isqrt(int(t)) for t in v]


def test_unary_values():
    assert intops.unary(np.int32([3, 4, 0]), UnaryOp.RECIP, 4).tolist() == [5, 4, INT32_MAX]
    assert intops.unary(np.int32([4, 2**20]), UnaryOp.RSQRT, 30).tolist() == [2**29, 2**20]


# --------------------------------------------------------------------------------------------
# CONV, DWCONV, MATMUL
# --------------------------------------------------------------------------------------------

CONV_GEOMS = [  # kernel, stride, dilation, pad, out, input (h, w)
    ((3, 3), (1, 1), (1, 1), (1, 1), (5, 6), (5, 6)),
    ((3, 2), (2, 1), (1, 2), (2, 0), (4, 3), (6, 5)),
    ((1, 1), (2, 2), (1, 1), (0, 0), (3, 3), (6, 6)),
]


def _acc_init(shape) -> np.ndarray:
    return RNG.integers(INT32_MIN, INT32_MAX, shape, endpoint=True).astype(np.int32)


@pytest.mark.parametrize("geom", range(len(CONV_GEOMS)))
@pytest.mark.parametrize("mode", list(AccMode))
def test_conv(geom, mode):
    k, s, d, p, o, (h, w) = CONV_GEOMS[geom]
    cin, cout = 5, 4
    x = rand(DType.I8, (h, w, cin))
    wt = rand(DType.I8, (k[0], k[1], cin, cout))
    in_zp, w_zp = -77, 200
    prev = _acc_init((o[0] * o[1], cout))
    ins = I(Opcode.CONV, in_addr=0, in_h=h, in_w=w, in_stride_h=w * cin, in_stride_w=cin,
            cin=cin, in_zp=in_zp, kh=k[0], kw=k[1], stride_h=s[0], stride_w=s[1], dil_h=d[0],
            dil_w=d[1], pad_top=p[0], pad_left=p[1], out_h=o[0], out_w=o[1], cout=cout,
            w_addr=2000, w_stride_k=cin * cout, w_stride_ci=cout, w_stride_co=1, w_zp=w_zp,
            acc_addr=10, acc_stride=cout, mode=mode)
    st = run_raw({M: [ins]}, sram=[(0, x), (2000, wt)], acc=[(10, prev)])
    want = acc_read(st, 10, (o[0], o[1], cout))
    acc = prev.reshape(o[0], o[1], cout) if mode == AccMode.ACCUMULATE else None
    got = intops.conv_acc(x, wt, in_zp, w_zp, stride=s, dilation=d, pad=p, out_hw=o, acc=acc)
    assert got.dtype == np.int32
    assert np.array_equal(got, want)


@pytest.mark.parametrize("geom", range(len(CONV_GEOMS)))
@pytest.mark.parametrize("mode", list(AccMode))
def test_dwconv(geom, mode):
    k, s, d, p, o, (h, w) = CONV_GEOMS[geom]
    ch = 6
    x = rand(DType.I8, (h, w, ch))
    wt = rand(DType.I8, (k[0], k[1], ch))
    prev = _acc_init((o[0] * o[1], ch))
    ins = I(Opcode.DWCONV, in_addr=0, in_h=h, in_w=w, in_stride_h=w * ch, in_stride_w=ch,
            ch=ch, in_zp=255, kh=k[0], kw=k[1], stride_h=s[0], stride_w=s[1], dil_h=d[0],
            dil_w=d[1], pad_top=p[0], pad_left=p[1], out_h=o[0], out_w=o[1], w_addr=2000,
            w_stride_k=ch, acc_addr=0, acc_stride=ch, mode=mode)
    st = run_raw({V: [ins]}, sram=[(0, x), (2000, wt)], acc=[(0, prev)])
    acc = prev.reshape(o[0], o[1], ch) if mode == AccMode.ACCUMULATE else None
    got = intops.dwconv_acc(x, wt, 255, stride=s, dilation=d, pad=p, out_hw=o, acc=acc)
    assert np.array_equal(got, acc_read(st, 0, (o[0], o[1], ch)))


@pytest.mark.parametrize("mode", list(AccMode))
def test_matmul(mode):
    m, n, k = 7, 9, 300
    a = rand(DType.I8, (m, k))
    b = rand(DType.I8, (k, n))
    prev = _acc_init((m, n))
    ins = I(Opcode.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=k, a_stride_k=1, a_zp=-256,
            b_addr=5000, b_stride_k=n, b_stride_n=1, b_zp=255, acc_addr=0, acc_stride=n,
            mode=mode)
    st = run_raw({M: [ins]}, sram=[(0, a), (5000, b)], acc=[(0, prev)])
    acc = prev if mode == AccMode.ACCUMULATE else None
    got = intops.matmul_acc(a, b, -256, 255, acc=acc)
    assert np.array_equal(got, acc_read(st, 0, (m, n)))


def test_matmul_batched_broadcast_and_wrap():
    a = np.full((2, 1, 65535), -128, np.int8)
    b = np.full((65535, 1), -128, np.int8)
    got = intops.matmul_acc(a, b, 255, -256)  # 65535 * 383 * 128 wraps past 2^31
    exact = 65535 * (-128 - 255) * (-128 + 256)
    assert got.shape == (2, 1, 1)
    assert int(got[0, 0, 0]) == (exact + 2**31) % 2**32 - 2**31


def test_host_quantize_clamps_quotients_past_float32_without_a_warning():
    # a mask of float32's minimum over a scale below 1 is -inf before the clamp
    import warnings

    from tessel.ir.types import DType
    from tessel.ops.boundary import _quantize_kernel

    attrs = {"scale": 0.25, "zero_point": 3, "qmin": -128, "qmax": 127, "dtype": DType.I8}
    x = np.array([-3.4e38, 3.4e38, 1.0, np.nan], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = _quantize_kernel(attrs, [x])
    assert q.tolist() == [-128, 127, 7, 3]
