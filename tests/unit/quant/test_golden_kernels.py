"""The golden integer kernels of qconv2d, qlinear and qadd against a direct int64 reference
written from the op definitions (loops over the window, Python-int requantisation)."""

from __future__ import annotations

import numpy as np
import pytest

from fixedpoint_ref import mbqm_ref, requantize_ref
from tessel.ir import DType, Layout, Op
from tessel.isa.fixedpoint import quantize_multiplier
from tessel.quant.golden import GOLDEN_KERNELS

RNG = np.random.default_rng(7)


def _requant_params(c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bias = RNG.integers(-5000, 5000, c).astype(np.int32)
    mult = RNG.integers(1 << 30, (1 << 31) - 1, c).astype(np.int32)
    shift = RNG.integers(-12, -5, c).astype(np.int32)
    return bias, mult, shift


def _conv_ref(x, w, bias, mult, shift, a, in_zp, out_zp, lo, hi):
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), g = a["stride"], a["padding"], a["groups"]
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    og = o // g
    for co in range(o):
        grp = co // og
        for y in range(oh):
            for xx in range(ow):
                acc = 0
                for k in range(ci):
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = y * sh - pt + ky, xx * sw - pl + kx
                            if 0 <= iy < h and 0 <= ix < wd:
                                xv = int(x[0, grp * ci + k, iy, ix])
                                acc += (xv - in_zp) * int(w[co, k, ky, kx])
                out[0, co, y, xx] = requantize_ref(acc, int(bias[co]), int(mult[co]),
                                                   int(shift[co]), out_zp, lo, hi)
    return out


@pytest.mark.parametrize("groups,stride,pad", [(1, (1, 1), (1, 1, 1, 1)), (4, (2, 1), (0, 1, 2, 1)),
                                               (2, (1, 2), (1, 0, 0, 1))])
def test_qconv2d_equals_int64_reference(groups: int, stride, pad) -> None:
    c, o, k = 4, 4, 3
    x = RNG.integers(-128, 128, (1, c, 5, 6)).astype(np.int8)
    w = RNG.integers(-127, 128, (o, c // groups, k, k)).astype(np.int8)
    bias, mult, shift = _requant_params(o)
    a = {"stride": stride, "padding": pad, "dilation": (1, 1), "groups": groups,
         "layout": Layout.NCHW, "in_zp": -7, "out_zp": 3, "act_min": -100, "act_max": 120,
         "dtype": DType.I8}
    got = GOLDEN_KERNELS[Op.QCONV2D](a, [x, w, bias, mult, shift])
    want = _conv_ref(x, w, bias, mult, shift, a, -7, 3, -100, 120)
    np.testing.assert_array_equal(got, want)
    nhwc = GOLDEN_KERNELS[Op.QCONV2D]({**a, "layout": Layout.NHWC},
                                      [x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), bias, mult,
                                       shift])
    np.testing.assert_array_equal(nhwc, want.transpose(0, 2, 3, 1))


def test_qlinear_equals_int64_reference() -> None:
    x = RNG.integers(-128, 128, (2, 3, 16)).astype(np.int8)
    w = RNG.integers(-127, 128, (5, 16)).astype(np.int8)
    bias, mult, shift = _requant_params(5)
    a = {"in_zp": 11, "out_zp": -4, "act_min": -128, "act_max": 127, "dtype": DType.I8}
    got = GOLDEN_KERNELS[Op.QLINEAR](a, [x, w, bias, mult, shift])
    acc = (x.astype(np.int64) - 11) @ w.astype(np.int64).T
    want = np.vectorize(lambda v, c: requantize_ref(int(v), int(bias[c]), int(mult[c]),
                                                    int(shift[c]), -4, -128, 127))(
        acc, np.arange(5)[None, None, :])
    np.testing.assert_array_equal(got, want)


def _add_ref(a: int, b: int, p: dict) -> int:
    ls = p["left_shift"]
    ra = mbqm_ref(min(max((a - p["a_zp"]) << ls, -(2**31)), 2**31 - 1), p["a_multiplier"],
                  p["a_shift"])
    rb = mbqm_ref(min(max((b - p["b_zp"]) << ls, -(2**31)), 2**31 - 1), p["b_multiplier"],
                  p["b_shift"])
    r = min(max(ra + rb, -(2**31)), 2**31 - 1)
    return min(max(mbqm_ref(r, p["out_multiplier"], p["out_shift"]) + p["out_zp"], p["act_min"]),
               p["act_max"])


@pytest.mark.parametrize("dtype_name,left_shift", [("I8", 20), ("I16", 15)])
def test_qadd_equals_int64_reference(dtype_name: str, left_shift: int) -> None:
    dtype = DType[dtype_name]
    lo, hi = dtype.bounds
    a = RNG.integers(lo, hi + 1, (3, 7)).astype(dtype.numpy)
    b = RNG.integers(lo, hi + 1, (1, 7)).astype(dtype.numpy)  # broadcast operand
    sa, sb, so = 0.02, 0.05, 0.06
    tm = 2 * max(sa, sb)
    am, ash = quantize_multiplier(sa / tm)
    bm, bsh = quantize_multiplier(sb / tm)
    om, osh = quantize_multiplier(tm / ((1 << left_shift) * so))
    zps = (-5, 9, 2) if dtype is DType.I8 else (0, 0, 0)
    p = {"a_zp": zps[0], "b_zp": zps[1], "left_shift": left_shift, "a_multiplier": am,
         "a_shift": ash, "b_multiplier": bm, "b_shift": bsh, "out_multiplier": om,
         "out_shift": osh, "out_zp": zps[2], "act_min": lo, "act_max": hi, "dtype": dtype}
    got = GOLDEN_KERNELS[Op.QADD](p, [a, b])
    want = np.vectorize(lambda u, v: _add_ref(int(u), int(v), p))(a, b)
    np.testing.assert_array_equal(got, want)
    real = sa * (a.astype(float) - zps[0]) + sb * (b.astype(float) - zps[1])
    inside = np.abs(real / so) < (hi - lo) / 2 - abs(zps[2]) - 2
    assert np.all(np.abs(so * (got.astype(float) - zps[2]) - real)[inside] <= so)
