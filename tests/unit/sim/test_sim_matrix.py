"""CONV, MATMUL and DWCONV against independent references (int64 numpy, torch float64 conv)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from simkit import I, acc_read, run_raw, wrap32

from tessel.isa import AccMode, Engine, Opcode
from tessel.sim.gemm import chunk_len

RNG = np.random.default_rng(1234)


def _i8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("m,n,k,a_zp,b_zp", [(8, 4, 16, 3, -2), (33, 17, 70, -128, 0),
                                             (5, 9, 2048, 255, -256)])
def test_matmul_matches_int64_reference(m, n, k, a_zp, b_zp):
    a = _i8(m, k)
    bt = _i8(n, k)  # B stored transposed: b_stride_k = 1, b_stride_n = k (attention's Q K^T)
    ins = I(Opcode.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=k, a_zp=a_zp, b_addr=100_000,
            b_stride_k=1, b_stride_n=k, b_zp=b_zp, acc_addr=5, acc_stride=n + 3)
    st = run_raw({Engine.MATRIX: [ins]}, sram=[(0, a), (100_000, bt)])
    ref = (a.astype(np.int64) - a_zp) @ (bt.astype(np.int64).T - b_zp)
    got = np.stack([acc_read(st, 5 + r * (n + 3), (n,)) for r in range(m)])
    assert np.array_equal(got, wrap32(ref))


def test_chunk_len_is_the_float32_exactness_bound():
    """The longest reduction of int8 products whose partial sums all stay below 2^24."""
    assert chunk_len(0, 0) == 1023  # 1023 * 128 * 128 < 2^24 <= 1024 * 128 * 128
    assert chunk_len(255, -256) == (2**24 - 1) // (383 * 384)
    for a_zp, b_zp in ((0, 0), (-128, 5), (255, -256)):
        span = max(abs(-128 - a_zp), abs(127 - a_zp)) * max(abs(-128 - b_zp), abs(127 - b_zp))
        assert chunk_len(a_zp, b_zp) * span < 2**24 <= (chunk_len(a_zp, b_zp) + 1) * span


def test_matmul_accumulate_wraps_int32():
    a = np.full((2, 4), 127, np.int8)
    b = np.full((4, 2), 127, np.int8)
    start = np.array([[2**31 - 10, 5], [-(2**31), 0]], np.int32)
    ins = I(Opcode.MATMUL, m=2, n=2, k=4, a_addr=0, a_stride_m=4, b_addr=64, b_stride_k=2,
            acc_addr=0, acc_stride=2, mode=AccMode.ACCUMULATE)
    st = run_raw({Engine.MATRIX: [ins]}, sram=[(0, a), (64, b)], acc=[(0, start)])
    ref = wrap32(start.astype(np.int64) + 4 * 127 * 127)
    assert np.array_equal(acc_read(st, 0, (2, 2)), ref)
    assert acc_read(st, 0, (2, 2))[0, 0] < 0  # really wrapped


def _conv_ref(x, w, in_zp, w_zp, stride, dil, pad, out_hw, groups=1):
    """torch float64 conv of (x - in_zp) with explicit top/left zero padding (exact here)."""
    (oh, ow), (pt, pl) = out_hw, pad
    xc = x.astype(np.float64) - in_zp
    h, wd, c = xc.shape
    need_h = (oh - 1) * stride[0] + (w.shape[0] - 1) * dil[0] + 1
    need_w = (ow - 1) * stride[1] + (w.shape[1] - 1) * dil[1] + 1
    frame = np.zeros((max(need_h, pt + h), max(need_w, pl + wd), c))
    frame[pt:pt + h, pl:pl + wd] = xc
    xt = torch.from_numpy(frame).permute(2, 0, 1)[None]
    wt = torch.from_numpy(w.astype(np.float64) - w_zp).permute(3, 2, 0, 1)  # HWIO -> OIHW
    out = torch.nn.functional.conv2d(xt, wt, stride=stride, dilation=dil, groups=groups)
    return out[0, :, :oh, :ow].permute(1, 2, 0).numpy().astype(np.int64)


@pytest.mark.parametrize("case", [
    dict(h=6, w=7, cin=5, cout=9, k=(3, 3), s=(1, 1), d=(1, 1), p=(1, 1), o=(6, 7), zp=(7, 0)),
    dict(h=9, w=8, cin=3, cout=4, k=(3, 2), s=(2, 3), d=(2, 1), p=(2, 0), o=(4, 3), zp=(-20, 3)),
    dict(h=4, w=4, cin=16, cout=8, k=(1, 1), s=(1, 1), d=(1, 1), p=(0, 0), o=(4, 4), zp=(0, 0)),
    dict(h=5, w=5, cin=40, cout=6, k=(7, 7), s=(1, 1), d=(1, 1), p=(3, 3), o=(5, 5), zp=(127, -5)),
])
def test_conv_matches_torch(case):
    h, wd, cin, cout = case["h"], case["w"], case["cin"], case["cout"]
    (kh, kw), (oh, ow) = case["k"], case["o"]
    in_zp, w_zp = case["zp"]
    x = _i8(h, wd, cin)
    w = _i8(kh, kw, cin, cout)  # HWIO: w_stride_co=1, w_stride_ci=cout, w_stride_k=cin*cout
    ins = I(Opcode.CONV, in_addr=0, in_h=h, in_w=wd, in_stride_h=wd * cin, in_stride_w=cin,
            cin=cin, in_zp=in_zp, kh=kh, kw=kw, stride_h=case["s"][0], stride_w=case["s"][1],
            dil_h=case["d"][0], dil_w=case["d"][1], pad_top=case["p"][0], pad_left=case["p"][1],
            out_h=oh, out_w=ow, cout=cout, w_addr=50_000, w_stride_k=cin * cout,
            w_stride_ci=cout, w_stride_co=1, w_zp=w_zp, acc_addr=0, acc_stride=cout)
    st = run_raw({Engine.MATRIX: [ins]}, sram=[(0, x), (50_000, w)])
    ref = _conv_ref(x, w, in_zp, w_zp, case["s"], case["d"], case["p"], (oh, ow))
    assert np.array_equal(acc_read(st, 0, (oh, ow, cout)), ref)


def test_conv_accumulate_over_channel_tiles_equals_whole():
    x, w = _i8(5, 5, 8), _i8(3, 3, 8, 4)
    common = dict(in_h=5, in_w=5, in_stride_h=40, in_stride_w=8, cin=4, kh=3, kw=3, pad_top=1,
                  pad_left=1, out_h=5, out_w=5, cout=4, w_stride_k=32, w_stride_ci=4,
                  acc_addr=0, acc_stride=4)
    first = I(Opcode.CONV, in_addr=0, w_addr=1000, **common)
    second = I(Opcode.CONV, in_addr=4, w_addr=1016, mode=AccMode.ACCUMULATE, **common)
    st = run_raw({Engine.MATRIX: [first, second]}, sram=[(0, x), (1000, w)])
    ref = _conv_ref(x, w, 0, 0, (1, 1), (1, 1), (1, 1), (5, 5))
    assert np.array_equal(acc_read(st, 0, (5, 5, 4)), ref)


def test_dwconv_matches_torch_grouped_conv():
    h, wd, ch = 7, 6, 12
    x, w = _i8(h, wd, ch), _i8(3, 3, ch)
    ins = I(Opcode.DWCONV, in_addr=0, in_h=h, in_w=wd, in_stride_h=wd * ch, in_stride_w=ch,
            ch=ch, in_zp=-9, kh=3, kw=3, stride_h=2, stride_w=1, pad_top=1, pad_left=1,
            out_h=4, out_w=6, w_addr=4000, w_stride_k=ch, acc_addr=10, acc_stride=ch)
    st = run_raw({Engine.VECTOR: [ins]}, sram=[(0, x), (4000, w)])
    ref = _conv_ref(x, w[:, :, None, :], -9, 0, (2, 1), (1, 1), (1, 1), (4, 6), groups=ch)
    assert np.array_equal(acc_read(st, 10, (4, 6, ch)), ref)


def test_conv_random_geometries_match_torch():
    rng = np.random.default_rng(5)
    for _ in range(25):
        kh, kw = (int(v) for v in rng.integers(1, 5, 2))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
        pt, pl = (int(v) for v in rng.integers(0, 4, 2))
        oh, ow = (int(v) for v in rng.integers(1, 6, 2))
        # the tile may be smaller (bottom/right padding) or larger than the windows need
        h = int(max(1, (oh - 1) * sh + (kh - 1) * dh + 1 - pt + rng.integers(-2, 3)))
        wd = int(max(1, (ow - 1) * sw + (kw - 1) * dw + 1 - pl + rng.integers(-2, 3)))
        cin, cout = (int(v) for v in rng.integers(1, 20, 2))
        in_zp, w_zp = int(rng.integers(-256, 256)), int(rng.integers(-256, 256))
        x = rng.integers(-128, 128, (h, wd, cin), dtype=np.int8)
        w = rng.integers(-128, 128, (kh, kw, cin, cout), dtype=np.int8)
        ins = I(Opcode.CONV, in_addr=0, in_h=h, in_w=wd, in_stride_h=wd * cin, in_stride_w=cin,
                cin=cin, in_zp=in_zp, kh=kh, kw=kw, stride_h=sh, stride_w=sw, dil_h=dh,
                dil_w=dw, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, cout=cout,
                w_addr=60_000, w_stride_k=cin * cout, w_stride_ci=cout, w_zp=w_zp, acc_addr=0,
                acc_stride=cout)
        st = run_raw({Engine.MATRIX: [ins]}, sram=[(0, x), (60_000, w)])
        ref = _conv_ref(x, w, in_zp, w_zp, (sh, sw), (dh, dw), (pt, pl), (oh, ow))
        assert np.array_equal(acc_read(st, 0, (oh, ow, cout)), ref), ins


@pytest.mark.parametrize("density", [0.02, 0.2, 1.0])
@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float32"])
def test_long_matmul_sparse_and_dense_rows_are_exact(density, int8, monkeypatch):
    """K = 4608 (past float32's exactness for one GEMM): rows mostly at the zero point pass
    the data bound in one float32 GEMM, dense ones take exact chunks; the int8 GEMM (where
    this host has one) is exact either way."""
    from tessel.sim import gemm

    monkeypatch.setattr(gemm, "USE_INT_MM", int8)
    rng = np.random.default_rng(7)
    m, k, n, a_zp = 64, 4608, 48, -100
    a = np.where(rng.random((m, k)) < density, rng.integers(-128, 128, (m, k)), a_zp)
    a = a.astype(np.int8)
    b = _i8(k, n)
    ins = I(Opcode.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=k, a_zp=a_zp, b_addr=300_000,
            b_stride_k=n, acc_addr=0, acc_stride=n)
    st = run_raw({Engine.MATRIX: [ins]}, sram=[(0, a), (300_000, b)])
    ref = (a.astype(np.int64) - a_zp) @ b.astype(np.int64)
    assert np.array_equal(acc_read(st, 0, (m, n)), wrap32(ref))
