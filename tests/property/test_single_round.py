"""SINGLE rounding of the requantisation: against a plain-Python big-int oracle and against the
TOSA reference model's RESCALE with ``rounding_mode = SINGLE_ROUND`` on random values; ELTWISE's
SINGLE rounding against the reference model's RESCALE -> ADD -> RESCALE."""

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
from tessel.isa.fields import EltOp
from tessel.ops import intops

INT32 = st.integers(fp.INT32_MIN, fp.INT32_MAX)
Q31 = st.integers(0, fp.INT32_MAX)
SHIFT = st.integers(fp.MIN_SHIFT, fp.MAX_SHIFT)


def single_ref(acc: int, bias: int, q31: int, shift: int, zp: int, lo: int, hi: int) -> int:
    """TOSA's apply_scale_32 with double_round false, literally, in Python integers."""
    t = max(fp.INT32_MIN, min(fp.INT32_MAX, acc + bias))
    s = 31 - shift
    v = (t * q31 + (1 << (s - 1))) >> s
    return max(lo, min(hi, v + zp))


@settings(max_examples=400, deadline=None)
@given(st.lists(INT32, min_size=1, max_size=32), INT32, Q31, SHIFT, st.integers(-128, 127))
def test_single_rounding_matches_the_big_int_oracle(accs, bias, q31, shift, zp):
    got = fp.requantize(np.array(accs), bias, q31, shift, zp, -128, 127,
                        rounding=fp.Rounding.SINGLE).tolist()
    assert got == [single_ref(a, bias, q31, shift, zp, -128, 127) for a in accs]


def test_the_two_modes_differ_where_double_rounding_rounds_a_half_twice():
    acc, q31, shift = np.array([5]), 2**30 + 2**29, -1  # 5 * 0.75 / 2 = 1.875 -> 2
    rng = np.random.default_rng(0)
    accs = rng.integers(-(2**20), 2**20, 4096)
    single = fp.requantize(accs, 0, q31, -3, 0, fp.INT32_MIN, fp.INT32_MAX,
                           rounding=fp.Rounding.SINGLE)
    double = fp.requantize(accs, 0, q31, -3, 0, fp.INT32_MIN, fp.INT32_MAX)
    assert np.any(single != double)
    assert fp.requantize(acc, 0, q31, shift, 0, -128, 127, rounding=fp.Rounding.SINGLE)[0] == 2


def _rescale_graph(n: int, q31: np.ndarray, shift: np.ndarray, in_zp: int, out_zp: int) -> bytes:
    c = q31.size
    tensors = {"x": Tensor("x", (n, c), DType.INT32),
               "m": Tensor("m", (c,), DType.INT32, as_bytes(q31.astype(np.int32), DType.INT32)),
               "s": Tensor("s", (c,), DType.INT8,
                           as_bytes((31 - shift).astype(np.int8), DType.INT8)),
               "iz": Tensor("iz", (1,), DType.INT32,
                            as_bytes(np.array([in_zp], np.int32), DType.INT32)),
               "oz": Tensor("oz", (1,), DType.INT8,
                            as_bytes(np.array([out_zp], np.int8), DType.INT8)),
               "y": Tensor("y", (n, c), DType.INT8)}
    ops = [Operator(TosaOp.CONST, (), (k,)) for k in ("m", "s", "iz", "oz")]
    ops.append(Operator(TosaOp.RESCALE, ("x", "m", "s", "iz", "oz"), ("y",),
                        {"scale32": True, "rounding_mode": RoundingMode.SINGLE_ROUND,
                         "per_channel": c > 1, "input_unsigned": False,
                         "output_unsigned": False}))
    return TosaGraph(ops, tensors, {}, ["x"], ["y"]).write()


@pytest.mark.parametrize("seed", range(6))
def test_single_rounding_is_the_reference_models_single_round_rescale(seed):
    """Random int32 values, per-channel multipliers in [2^30, 2^31) and right shifts of 32 to 62
    bits (where the two modes differ) and of 2 to 31: the reference model's int8 results.
    (The reference model requires ``|x| < 2^(s-1)`` for a shift of ``s``.)"""
    rng = np.random.default_rng(seed)
    c = 16
    q31 = rng.integers(2**30, 2**31, c)
    lo_shift = -31 if seed % 2 else 0
    shift = rng.integers(lo_shift, 30 if not seed % 2 else 1, c)
    x = rng.integers(fp.INT32_MIN, fp.INT32_MAX, (256, c), endpoint=True).astype(np.int32)
    x[:128] >>= rng.integers(0, 31, (128, c))  # small magnitudes too: not everything saturates
    # TOSA requires -2^(s-1) <= x < 2^(s-1) for a right shift of s = 31 - shift bits
    bound = np.left_shift(np.int64(1), 30 - shift)
    x = np.clip(x, -bound, bound - 1).astype(np.int32)
    out_zp = int(rng.integers(-128, 128))
    outputs, status = tosa_reference_model.run(_rescale_graph(256, q31, shift, 0, out_zp), [x])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    got = fp.requantize(x, None, q31, shift, out_zp, -128, 127, out_dtype=np.int8,
                        rounding=fp.Rounding.SINGLE)
    np.testing.assert_array_equal(got, np.asarray(outputs[0]).reshape(got.shape))
    assert len(np.unique(got)) > 10  # not a saturated constant


def _rescale_op(x: str, y: str, q31: int, shift: int, in_zp: int, out_zp: int,
                types: tuple[DType, DType], tensors: dict) -> list[Operator]:
    """A per-tensor SINGLE_ROUND RESCALE x -> y (its constants added to ``tensors``)."""
    zt = {DType.INT8: np.int8, DType.INT32: np.int32}
    consts = {f"{y}_m": (np.array([q31], np.int32), DType.INT32),
              f"{y}_s": (np.array([31 - shift], np.int8), DType.INT8),
              f"{y}_iz": (np.array([in_zp], zt[types[0]]), types[0]),
              f"{y}_oz": (np.array([out_zp], zt[types[1]]), types[1])}
    for k, (v, t) in consts.items():
        tensors[k] = Tensor(k, (1,), t, as_bytes(v, t))
    return [*(Operator(TosaOp.CONST, (), (k,)) for k in consts),
            Operator(TosaOp.RESCALE, (x, *consts), (y,),
                     {"scale32": True, "rounding_mode": RoundingMode.SINGLE_ROUND,
                      "per_channel": False, "input_unsigned": False, "output_unsigned": False})]


def _check_add(zps: list[int], qs: list[int], in_shifts: list[int], out_shift: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The reference model's RESCALE -> ADD -> RESCALE (all SINGLE_ROUND) of every pair of int8
    values == ELTWISE ADD with rounding SINGLE (the golden model's); returns that result and
    ELTWISE's DOUBLE one."""
    shape = (256, 256)
    tensors = {"a": Tensor("a", shape, DType.INT8), "b": Tensor("b", shape, DType.INT8),
               "ra": Tensor("ra", shape, DType.INT32), "rb": Tensor("rb", shape, DType.INT32),
               "s": Tensor("s", shape, DType.INT32), "y": Tensor("y", shape, DType.INT8)}
    i8_32, i32_8 = (DType.INT8, DType.INT32), (DType.INT32, DType.INT8)
    ops = [*_rescale_op("a", "ra", qs[0], in_shifts[0], zps[0], 0, i8_32, tensors),
           *_rescale_op("b", "rb", qs[1], in_shifts[1], zps[1], 0, i8_32, tensors),
           Operator(TosaOp.ADD, ("ra", "rb"), ("s",)),
           *_rescale_op("s", "y", qs[2], out_shift, 0, zps[2], i32_8, tensors)]
    graph = TosaGraph(ops, tensors, {}, ["a", "b"], ["y"]).write()
    every = np.arange(-128, 128, dtype=np.int8)
    a, b = np.repeat(every, 256).reshape(shape), np.tile(every, 256).reshape(shape)
    outputs, status = tosa_reference_model.run(graph, [a, b])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    kw = dict(a_zp=zps[0], b_zp=zps[1], a_mult=qs[0], a_shift=in_shifts[0], b_mult=qs[1],
              b_shift=in_shifts[1], out_mult=qs[2], out_shift=out_shift, out_zp=zps[2],
              act_min=-128, act_max=127, out_dtype=np.int8)
    got = intops.eltwise(EltOp.ADD, a, b, rounding=fp.Rounding.SINGLE, **kw)
    np.testing.assert_array_equal(got, np.asarray(outputs[0]).reshape(shape))
    assert len(np.unique(got)) > 10  # not a saturated constant
    return got, intops.eltwise(EltOp.ADD, a, b, **kw)


@pytest.mark.parametrize("seed", range(6))
def test_eltwise_single_rounding_is_the_reference_models_rescale_add_rescale(seed):
    """ExecuTorch's quantised add: int8 a and b each RESCALEd to int32, ADD, RESCALE to int8,
    every RESCALE SINGLE_ROUND, with random multipliers (shifts kept where TOSA's value-range
    requirements hold)."""
    rng = np.random.default_rng(seed)
    in_shifts = [int(s) for s in rng.integers(8, 21, 2)]
    _check_add([int(z) for z in rng.integers(-128, 128, 3)],
               [int(q) for q in rng.integers(2**30, 2**31, 3)], in_shifts,
               -max(in_shifts) + int(rng.integers(-1, 2)))  # outputs spread over int8


def test_eltwise_single_rounding_rounds_negative_halves_up_as_the_reference_model_does():
    """Inputs by one, the sum quartered (multiplier 2^30, shift -1): SINGLE rounds -0.5 up to 0
    and 0.25 down to 0, as the reference model does; DOUBLE rounds twice (-1 and 1)."""
    one = [1 << 30, 1 << 30, 1 << 30]
    single, double = _check_add([0, 0, 0], one, [1, 1], -1)
    assert single[127, 127] == 0 and double[127, 127] == -1  # a = b = -1: -2 / 4 = -0.5
    assert single[129, 128] == 0 and double[129, 128] == 1  # 1 / 4: rounded up twice by DOUBLE
