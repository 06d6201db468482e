"""The ELTWISE closures of ``tessel.sim.fastvec`` equal the reference handler bit for bit: each
form (one-operand tables, stride-0 operands computed on their distinct values, the multiplier
1 as a clip, the fused output stage) on random memories with int32 extremes written into the
operands, one sample and batches, and the same instructions through ``kern_vec``'s compiled
loop (kernels on: every form is ``step_kernel``, its batches the numpy forms); ``OutStage``
against the reference steps directly."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import I
from test_fastpath import V, _batch_same_both_ways, _kinds, _same_both_ways

from tessel.isa import DType, Opcode
from tessel.isa.fields import EltOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import fastvec, jit
from tessel.sim.fastvec import ONE, OutStage, elt_out

W = {DType.I8: 1, DType.I16: 2, DType.I32: 4}
RANGE = {DType.I8: (-128, 127), DType.I16: (-32768, 32767), DType.I32: (INT32_MIN, INT32_MAX)}
A, B, OUT = 0, 4000, 9000  # operand addresses (a: 16 x 24 elements at most, b after it)


def _elt(op, da, db, do, *, a_s=(None, None), b_s=(None, None), rng, **kw):
    """An ELTWISE of 3 x 5 x 24 elements; ``a_s`` / ``b_s``: (s1, s0) in elements (None:
    dense), 0 for a stride-0 axis."""
    def strides(dt, s):
        s1, s0 = s
        w = W[dt]
        return dict(s0=w if s0 is None else w * s0, s1=24 * w if s1 is None else w * s1,
                    s2=0 if 0 in s else 5 * 24 * w)
    lo, hi = sorted(int(v) for v in rng.integers(*RANGE[do], 2, endpoint=True))
    f = dict(op=op, a_dtype=da, b_dtype=db, out_dtype=do, d0=24, d1=5, d2=3, a_addr=A,
             b_addr=B, out_addr=OUT, out_s0=W[do], out_s1=24 * W[do], out_s2=120 * W[do],
             a_zp=int(rng.integers(-300, 300)), b_zp=int(rng.integers(-300, 300)),
             left_shift=0, a_mult=int(rng.integers(0, 2**31)), a_shift=int(rng.integers(-31, 31)),
             b_mult=int(rng.integers(0, 2**31)), b_shift=int(rng.integers(-31, 31)),
             out_mult=int(rng.integers(2**29, 2**31)), out_shift=int(rng.integers(-31, 1)),
             out_zp=int(rng.integers(-100, 100)), act_min=lo, act_max=hi)
    f.update({f"a_{k}": v for k, v in strides(da, a_s).items()})
    f.update({f"b_{k}": v for k, v in strides(db, b_s).items()})
    f.update(kw)
    return {V: [I(Opcode.ELTWISE, **f)]}


def _extremes(dt: DType, addr: int, rng) -> list[tuple[int, bytes]]:
    """The type's extreme values and their neighbours at the start of an operand."""
    lo, hi = RANGE[dt]
    vals = np.clip([lo, hi, lo + 1, hi - 1, 0, -1, 1, lo, hi, -(2**30), 2**30, 2**30 + 1],
                   lo, hi).astype(f"<i{W[dt]}")
    return [(addr, rng.permutation(vals).tobytes())]


I8, I16, I32 = DType.I8, DType.I16, DType.I32
# name: (op, a dtype, b dtype, out dtype, fields, the closure expected)
FORMS = {
    "requantize_same_view": (EltOp.ADD, I16, I16, I8, dict(b_addr=A, b_mult=0), "step_single"),
    "same_view_both_scaled": (EltOp.SUB, I16, I16, I16, dict(b_addr=A), "step_single"),
    "a_mult_zero_int32": (EltOp.ADD, I32, I8, I16, dict(a_mult=0), "step_single"),
    "b_mult_zero_int16": (EltOp.MAX, I16, I16, I8, dict(b_mult=0), "step_single"),
    "row_mean_sub": (EltOp.SUB, I16, I32, I16, dict(b_s=(1, 0), b_mult=ONE[0],
                                                    b_shift=ONE[1]), "step"),
    "row_recip_mul": (EltOp.MUL, I16, I32, I16, dict(b_s=(1, 0)), "step_bounded"),
    "row_mul_int8": (EltOp.MUL, I8, I32, I8, dict(b_s=(1, 0), b_zp=0), "step_bounded"),
    "channel_bias_add_one": (EltOp.ADD, I32, I32, I8, dict(b_s=(0, None), a_mult=ONE[0],
                                                          a_shift=ONE[1], b_mult=ONE[0],
                                                          b_shift=ONE[1], a_zp=0), "step"),
    "add_one_output_one": (EltOp.ADD, I32, I32, I32, dict(
        b_s=(0, None), a_mult=ONE[0], a_shift=ONE[1], b_mult=ONE[0], b_shift=ONE[1], a_zp=0,
        b_zp=0, out_mult=ONE[0], out_shift=ONE[1], out_zp=0, act_min=INT32_MIN,
        act_max=INT32_MAX), "step"),  # the output is r itself: every clip visible
    "channel_gamma_mul": (EltOp.MUL, I16, I16, I32, dict(b_s=(0, None)), "step"),
    "both_broadcast": (EltOp.SUB, I32, I32, I32, dict(a_s=(0, None), b_s=(1, 0)), "step"),
    "int32_const_b": (EltOp.ADD, I32, I32, I16, dict(b_mult=0), "step"),
    "int16_left_shift": (EltOp.ADD, I16, I16, I16, dict(left_shift=15, a_shift=-3, b_shift=-4),
                         "step"),
    "linear_a_mean_sub": (EltOp.SUB, I16, I32, I16, dict(
        b_s=(1, 0), a_mult=ONE[0], a_shift=6, b_mult=ONE[0], b_shift=ONE[1]), "step"),
    "linear_a_saturating": (EltOp.SUB, I16, I32, I16, dict(
        b_s=(1, 0), a_mult=ONE[0], a_shift=17, a_zp=-5), "step"),  # not linear: a gather
    "linear_b_left_shift": (EltOp.ADD, I16, I16, I16, dict(
        left_shift=15, a_shift=-3, b_mult=ONE[0], b_shift=0), "step"),  # b: x << 14
    "linear_b_right_shift": (EltOp.SUB, I8, I16, I16, dict(
        left_shift=9, a_shift=-3, b_mult=ONE[0], b_shift=-4), "step"),  # b: x << 4
    "softmax_sub_max": (EltOp.SUB, I16, I16, I16, dict(
        b_s=(1, 0), a_mult=ONE[0], a_shift=ONE[1], b_mult=ONE[0], b_shift=ONE[1],
        out_zp=32767, act_min=-32768, act_max=32767), "step_table"),
    "int8_int16_table_sub": (EltOp.SUB, I8, I16, I8, dict(b_s=(1, 0), a_shift=-3,
                                                          b_shift=-2), "step_table"),
    "int32_min": (EltOp.MIN, I32, I16, I32, dict(b_s=(1, 0)), "step"),
    "int32_left_shift": (EltOp.SUB, I32, I32, I16, dict(left_shift=3, a_shift=2), "step"),
    "int8_pair": (EltOp.ADD, I8, I8, I16, dict(left_shift=9, a_shift=-3, b_shift=-2),
                  "step_pair"),
    # one operand a single element (its row of the pair table); outputs that vary
    "int8_times_one_element": (EltOp.MUL, I8, I8, I16, dict(
        b_s=(0, 0), out_shift=-1, act_min=-32768, act_max=32767), "step_pair_one"),
    "one_element_minus_int8": (EltOp.SUB, I8, I8, I16, dict(
        a_s=(0, 0), left_shift=12, a_shift=-3, b_shift=-5, out_shift=-2, act_min=-32768,
        act_max=32767), "step_pair_one"),
}


@pytest.fixture(params=["float", "int64", "kernel"])
def scale(request, monkeypatch) -> str:
    """Three ways: the numpy forms with ``fastscale``'s float form and without it (the int64
    forms), and ``kern_vec``'s compiled loop (kernels on)."""
    monkeypatch.setenv(jit.ENV, "1" if request.param == "kernel" else "0")
    if request.param == "int64":
        monkeypatch.setattr(fastvec, "build_scale", lambda *args: None)
    return request.param


def _kind(kind: str, scale: str) -> str:
    """The closure expected: ``kind``, or the kernel's with kernels on."""
    return "step_kernel" if scale == "kernel" else kind


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(FORMS))
def test_eltwise_form(name, seed, scale):
    rng = np.random.default_rng(seed + 10 * sorted(FORMS).index(name))
    op, da, db, do, kw, kind = FORMS[name]
    kw = dict(kw)
    streams = _elt(op, da, db, do, a_s=kw.pop("a_s", (None, None)),
                   b_s=kw.pop("b_s", (None, None)), rng=rng, **kw)
    assert _kinds(streams) == {_kind(kind, scale)}
    extra = _extremes(da, A, rng) + _extremes(db, B, rng)
    _same_both_ways(streams, seeds=(seed, seed + 3), extra=extra)
    _batch_same_both_ways(streams)
    _batch_same_both_ways(streams, same=(0, 60_000))


@pytest.mark.parametrize("shift", range(-31, 31))
def test_eltwise_every_output_shift(shift, kernels):
    """int32 ADD (the int64 passes, or the kernel), every out_shift, zero points and clamps at
    random."""
    rng = np.random.default_rng(5000 + shift)
    for do in (I8, I16, I32):
        streams = _elt(EltOp.ADD, I32, I32, do, b_s=(1, 0), rng=rng, out_shift=shift,
                       out_zp=int(rng.choice([0, 5, -7, 20000, -(2**31), 2**31 - 1])))
        _same_both_ways(streams, seeds=(0,), extra=_extremes(I32, A, rng))


def _out_ref(r: np.ndarray, f: dict) -> np.ndarray:
    return elt_out(np.clip(r, INT32_MIN, INT32_MAX), f, np.dtype(np.int64))


@pytest.mark.parametrize("seed", range(60))
def test_out_stage_equals_the_reference_steps(seed):
    """``OutStage`` on values beyond int32 (its sat32 folded into the clamp or applied),
    every shift, act ranges that the outputs at the bounds miss on either side."""
    rng = np.random.default_rng(seed)
    span = int(rng.choice([2**8, 2**20, 2**31, 2**33, 2**46]))
    r_lo, r_hi = sorted(int(v) for v in rng.integers(-span, span, 2, endpoint=True))
    shift = int(rng.integers(-31, 31)) if seed % 4 else int(rng.integers(-31, 1))
    a, b = sorted(int(v) for v in rng.integers(-40000, 40000, 2))
    if seed % 5 == 0:  # a clamp range above every output: a constant result
        a, b = 2**31 - 10, 2**31 - 1
    f = dict(out_mult=int(rng.choice([0, 1, 2**30, 2**31 - 1, int(rng.integers(0, 2**31))])),
             out_shift=shift, out_zp=int(rng.choice([0, 3, -3, 30000, -(2**31)])),
             act_min=a, act_max=b)
    r = rng.integers(r_lo, r_hi, 500, endpoint=True, dtype=np.int64)
    r[:2] = r_lo, r_hi
    stage = OutStage(f, r_lo, r_hi)
    assert np.array_equal(stage(r.copy()), _out_ref(r, f))


@pytest.mark.parametrize("seed", range(4))
def test_eltwise_mul_by_a_small_row_factor(seed, scale):
    """int16 x a per-row int32 factor (softmax's reciprocal): factors at the bound below which
    the product stays inside int32 (no sat32), one past it, and mixed rows; for the float form
    (``fastscale``, its fallback the int64 form) also factors around its bounds (at least
    ``2^30 // q + 1``, at most 65535 for the multiplier 2^30 and 64 for 2^31 - 1: its float64
    bound), with and without an output zero point."""
    rng = np.random.default_rng(seed)
    bound = INT32_MAX // 32768  # a_zp = 0: the largest |a| is 32768
    if seed % 2:  # an output multiplier just below 1: a saturated product shows
        out = dict(out_dtype=I32, out_mult=2**31 - 1, out_shift=0, act_min=INT32_MIN,
                   act_max=INT32_MAX)
    else:
        out = dict(out_dtype=I16, out_mult=1 << 30, out_shift=-14 - seed, act_min=-32768,
                   act_max=32767)
    streams = _elt(EltOp.MUL, I16, I32, out.pop("out_dtype"), b_s=(1, 0), rng=rng, a_zp=0,
                   b_zp=0, out_zp=[0, 0, 5, -9][seed], **out)
    assert _kinds(streams) == {_kind("step_bounded", scale)}
    a = _extremes(I16, A, rng)
    for rows in ([bound, -bound, 3, 0, 1], [bound + 1, 2, 3, 4, 5], [-bound - 1] * 5,
                 rng.integers(0, 32777, 5).tolist(), [bound, 2, 3, 4, 5], [1, 2, 3, 4, 5],
                 [2] * 5, [64, 63, 1, 2, 64], [65, 64, 2, 3, 4], rng.integers(2, 65, 5).tolist()):
        b = [(B, np.array(rows, "<i4").tobytes())]
        _same_both_ways(streams, seeds=(seed,), extra=a + b)
