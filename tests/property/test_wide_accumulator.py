"""The wide accumulator of int16 x int8 MACs: the requantisation against a plain-Python big-int
oracle, and the golden MAC (intops ``conv_acc`` / ``matmul_acc`` then ``requant(wide=True)``)
against the TOSA reference model's CONV2D (int16 x int8 -> int48) then RESCALE (int48 -> int8 /
int16 with a 16-bit multiplier, ``scale32 = false``)."""

from __future__ import annotations

import numpy as np
import pytest
import tosa_reference_model
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.frontend.tosa_schema import (
    DType,
    Operator,
    RoundingMode,
    Tensor,
    TosaGraph,
    TosaOp,
    as_bytes,
)
from tessel.isa import fixedpoint as fp
from tessel.ops import intops

INT48 = st.integers(fp.ACC48_MIN, fp.ACC48_MAX)
Q31 = st.integers(0, fp.INT32_MAX)
WIDE_SHIFT = st.integers(fp.MIN_SHIFT, fp.MAX_WIDE_SHIFT)


def wide_ref(acc: int, bias: int, q31: int, shift: int, zp: int, lo: int, hi: int) -> int:
    """TFLite's requantisation of a 64-bit accumulator, in Python integers: the Q31 multiplier
    rounded to 16 bits (kept below 2^15), one rounding shift of the exact product."""
    v = max(fp.ACC48_MIN, min(fp.ACC48_MAX, acc + bias))
    q15 = (q31 + (1 << 15)) >> 16 if q31 < 0x7FFF0000 else 0x7FFF
    s = 15 - shift
    t = (v * q15 + (1 << (s - 1))) // (1 << s)  # floor division: the arithmetic shift
    t = max(fp.INT32_MIN, min(fp.INT32_MAX, t))
    return max(lo, min(hi, t + zp))


@settings(max_examples=400, deadline=None)
@given(st.lists(INT48, min_size=1, max_size=32), INT48, Q31, WIDE_SHIFT, st.integers(-128, 127))
def test_wide_requantisation_matches_the_big_int_oracle(accs, bias, q31, shift, zp):
    got = fp.requantize_wide(np.array(accs), bias, q31, shift, zp, -128, 127).tolist()
    assert got == [wide_ref(a, bias, q31, shift, zp, -128, 127) for a in accs]


def test_wide_requantisation_refuses_what_it_cannot_hold():
    with pytest.raises(Exception, match="shift"):
        fp.requantize_wide(np.array([1]), 0, 2**30, fp.MAX_WIDE_SHIFT + 1, 0, -128, 127)
    with pytest.raises(Exception, match="acc"):
        fp.requantize_wide(np.array([2**47]), 0, 2**30, 0, 0, -128, 127)


def test_the_wide_accumulator_holds_sums_past_int32():
    """4096 products of 32767 x 127 (1.7e10) reach past int32: the int8 path would wrap, the
    wide accumulator holds the exact sum."""
    a = np.full((1, 4096), 32767, np.int16)
    b = np.full((4096, 2), 127, np.int8)
    acc = intops.matmul_acc(a, b)
    assert acc.dtype == np.int64 and int(acc[0, 0]) == 4096 * 32767 * 127
    with pytest.raises(Exception, match="zero point"):
        intops.matmul_acc(a, b, a_zp=1)


def _i48(values: np.ndarray) -> bytes:
    """TOSA's INT48 constant data: 6 little-endian bytes per value."""
    v = np.ascontiguousarray(values, "<i8").view(np.uint8).reshape(-1, 8)
    return v[:, :6].tobytes()


def _conv_rescale_graph(x_shape, w: np.ndarray, bias: np.ndarray, q15: np.ndarray,
                        s: np.ndarray, out_zp: int, out: DType, pad, stride) -> bytes:
    """CONV2D int16 x int8 -> int48 (zero points 0) then a per-channel RESCALE int48 -> out."""
    o, kh, kw, _ = w.shape
    n, h, wd, _ = x_shape
    oh = (h + pad[0] + pad[1] - kh) // stride[0] + 1
    ow = (wd + pad[2] + pad[3] - kw) // stride[1] + 1
    onp = np.int8 if out is DType.INT8 else np.int16
    tensors = {
        "x": Tensor("x", tuple(x_shape), DType.INT16),
        "w": Tensor("w", w.shape, DType.INT8, as_bytes(w, DType.INT8)),
        "b": Tensor("b", (o,), DType.INT48, _i48(bias)),
        "xz": Tensor("xz", (1,), DType.INT16, as_bytes(np.zeros(1, np.int16), DType.INT16)),
        "wz": Tensor("wz", (1,), DType.INT8, as_bytes(np.zeros(1, np.int8), DType.INT8)),
        "acc": Tensor("acc", (n, oh, ow, o), DType.INT48),
        "m": Tensor("m", (o,), DType.INT16, as_bytes(q15.astype(np.int16), DType.INT16)),
        "s": Tensor("s", (o,), DType.INT8, as_bytes(s.astype(np.int8), DType.INT8)),
        "iz": Tensor("iz", (1,), DType.INT48, _i48(np.zeros(1, np.int64))),
        "oz": Tensor("oz", (1,), out, as_bytes(np.array([out_zp], onp), out)),
        "y": Tensor("y", (n, oh, ow, o), out)}
    ops = [Operator(TosaOp.CONST, (), (k,)) for k in ("w", "b", "xz", "wz", "m", "s", "iz", "oz")]
    ops.append(Operator(TosaOp.CONV2D, ("x", "w", "b", "xz", "wz"), ("acc",),
                        {"pad": list(pad), "stride": list(stride), "dilation": [1, 1],
                         "local_bound": False, "acc_type": int(DType.INT48)}))
    ops.append(Operator(TosaOp.RESCALE, ("acc", "m", "s", "iz", "oz"), ("y",),
                        {"scale32": False, "rounding_mode": RoundingMode.SINGLE_ROUND,
                         "per_channel": True, "input_unsigned": False,
                         "output_unsigned": False}))
    return TosaGraph(ops, tensors, {}, ["x"], ["y"]).write()


@pytest.mark.parametrize("seed", range(4))
def test_the_golden_wide_conv_is_the_reference_models(seed):
    """Random int16 inputs over the whole range, int8 weights, int48 biases and per-channel
    multipliers that spread the outputs: intops' wide CONV + REQUANT == the reference model's
    CONV2D (acc_type INT48) + RESCALE (16-bit multipliers: the reduced Q31 ones)."""
    rng = np.random.default_rng(seed)
    c_in, c_out, k = (3, 5, 3) if seed % 2 else (1200, 8, 1)
    pad, stride = ((1, 1, 1, 1), (1, 1)) if k == 3 else ((0, 0, 0, 0), (2, 1))
    out = DType.INT16 if seed >= 2 else DType.INT8
    x = rng.integers(-32768, 32768, (1, 7, 6, c_in)).astype(np.int16)
    w = rng.integers(-127, 128, (c_out, k, k, c_in)).astype(np.int8)
    x[0, 0, 0] = np.where(w[0, 0, 0] >= 0, 32767, -32768)  # channel 0 of pixel 0: all products
    reach = np.sqrt(k * k * c_in) * 32768 * 127 / 2  # a typical |acc|
    bias = rng.integers(-int(reach), int(reach), c_out)
    bits = 15 if out is DType.INT16 else 7
    real = rng.uniform(0.5, 2.0, c_out) * 2.0**bits / reach
    q31, shift = np.array([fp.quantize_multiplier(r) for r in real]).T
    q15 = fp.reduce_multiplier(q31)
    out_zp = 0 if out is DType.INT16 else int(rng.integers(-20, 20))
    graph = _conv_rescale_graph(x.shape, w, bias, q15, 15 - shift, out_zp, out, pad, stride)
    outputs, status = tosa_reference_model.run(graph, [x])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    acc = intops.conv_acc(x, w.transpose(1, 2, 3, 0), 0, stride=stride, pad=(pad[0], pad[2]))
    assert acc.dtype == np.int64
    if k == 1:
        assert acc[0, 0, 0, 0] > 2**31  # past what int32 holds
    info = np.iinfo(np.int8 if out is DType.INT8 else np.int16)
    got = intops.requant(acc, bias, q31, shift, out_zp, info.min, info.max,
                         info.dtype, wide=True)
    want = np.asarray(outputs[0]).reshape(got.shape)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 20  # not a saturated constant
