"""Integer softmax, layer norm and LUT tables: accuracy vs float, bounds, plans, and the chains
run instruction by instruction on the simulator (bit-exact against the intops golden chain).

Accuracy figures are printed (``pytest -s`` shows them); the asserted limits are a little
above what was measured, see docs/numerics.md.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simkit import I, run_raw, sram_read  # noqa: E402

from tessel.errors import TesselConfigError  # noqa: E402
from tessel.isa import (  # noqa: E402
    AccSrc,
    DType,
    EltOp,
    Engine,
    LutMode,
    Opcode,
    ParamMode,
    ReduceOp,
    UnaryOp,
)
from tessel.ops import (
    intops,
    lut,  # noqa: E402
)
from tessel.ops.layer_norm import (  # noqa: E402
    LayerNormPlan,
    layer_norm_int,
    layer_norm_steps,
    plan_layer_norm,
)
from tessel.ops.softmax import (  # noqa: E402
    ONE_MULT,
    ONE_SHIFT,
    SoftmaxPlan,
    output_qparams,
    plan_softmax,
    softmax_int,
    softmax_steps,
)

RNG = np.random.default_rng(7)
NP = {DType.I8: np.int8, DType.I16: np.int16, DType.I32: np.int32}
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
V = Engine.VECTOR


def quantise(x: np.ndarray, dt: DType, lo: float | None = None, hi: float | None = None):
    """int16: symmetric (zp 0); int8: asymmetric over [lo, hi]. Returns (q, scale, zp)."""
    lo = float(x.min()) if lo is None else lo
    hi = float(x.max()) if hi is None else hi
    if dt == DType.I16:
        scale, zp = max(abs(lo), abs(hi)) / 32767.0, 0
    else:
        scale = (hi - lo) / 255.0
        zp = int(round(-128 - lo / scale))
    q = np.clip(np.round(x / scale) + zp, dt.lo, dt.hi).astype(NP[dt])
    return q, scale, zp


# --------------------------------------------------------------------------------------------
# LUT tables
# --------------------------------------------------------------------------------------------

LUT_RANGES = {  # input range (symmetric) of each function's test
    lut.LutFn.SIGMOID: 8.0, lut.LutFn.TANH: 4.0, lut.LutFn.HARDSWISH: 5.0,
    lut.LutFn.HARDSIGMOID: 5.0, lut.LutFn.GELU: 6.0, lut.LutFn.GELU_TANH: 6.0,
    lut.LutFn.SILU: 8.0, lut.LutFn.EXP: 3.0, lut.LutFn.NEG: 4.0, lut.LutFn.RSQRT: 4.0,
}
# inputs of rsqrt (RMS norm's mean of squares) are >= 0: its tests take [0, range] (zero point
# at the bottom) and check the finite entries; 1 / sqrt(0) saturates at the top code
POSITIVE = {lut.LutFn.RSQRT}


def _out_q(y: np.ndarray, levels: int) -> tuple[float, int]:
    lo, hi = min(float(y.min()), 0.0), max(float(y.max()), 0.0)
    scale = (hi - lo) / (levels - 1)
    return scale, int(round(-(levels // 2) - lo / scale))


@pytest.mark.parametrize("fn", list(lut.LutFn))
def test_lut_i8_accuracy(fn):
    f = lut.FUNCTIONS[fn]
    rng_ = LUT_RANGES[fn]
    in_scale, in_zp = 2 * rng_ / 255.0, (-128 if fn in POSITIVE else 0)
    x = np.arange(-128, 128, dtype=np.int8)
    real = f(in_scale * (x.astype(np.float64) - in_zp))
    finite = np.isfinite(real)
    out_scale, out_zp = _out_q(real[finite], 256)
    table = lut.make_lut_i8(f, in_scale, in_zp, out_scale, out_zp)
    y = intops.lut_i8(x, table)
    assert (y[~finite] == 127).all()
    y, real = y[finite], real[finite]
    err = np.abs(y.astype(np.float64) - np.clip(real / out_scale + out_zp, -128, 127))
    print(f"LUT i8  {fn.value:12s} max error {err.max():.3f} LSB, mean {err.mean():.3f}")
    assert err.max() <= 0.5 + 1e-9  # exact per input: only the final rounding


@pytest.mark.parametrize("fn", list(lut.LutFn))
def test_lut_i16_accuracy(fn):
    f = lut.FUNCTIONS[fn]
    in_scale = LUT_RANGES[fn] / 32768.0
    x = np.arange(-32768, 32768).astype(np.int16)
    real = f(in_scale * x.astype(np.float64))
    # rsqrt: from x = 1/16 of the range up (a segment's interpolation cannot follow the pole)
    keep = x >= 2048 if fn in POSITIVE else np.ones(x.shape, bool)
    out_scale = float(np.abs(real[keep]).max()) / 32767.0
    table = lut.make_lut_i16(f, in_scale, 0, out_scale, 0)
    y = intops.lut_i16(x, table)[keep]
    err = np.abs(y.astype(np.float64) - real[keep] / out_scale)
    print(f"LUT i16 {fn.value:12s} max error {err.max():.3f} LSB, mean {err.mean():.3f}")
    # smooth functions: interpolation + rounding ~1 LSB; exp: its top segment ends beyond
    # int16 (entry 512 saturates); hardswish / hardsigmoid: a kink inside a segment (x = +-3)
    # rsqrt: its curvature near 1/16 of the range (7.3 LSB of 32767 there, 2e-4 relative)
    limit = {lut.LutFn.EXP: 3.5, lut.LutFn.HARDSWISH: 30.0, lut.LutFn.HARDSIGMOID: 30.0,
             lut.LutFn.RSQRT: 7.5}
    assert err.max() <= limit.get(fn, 1.5)
    assert err.mean() <= (0.45 if fn in POSITIVE else 0.35)


def test_lut_float_functions_match_torch():
    x = np.linspace(-9, 9, 1001)
    t = torch.tensor(x)
    pairs = {lut.LutFn.SIGMOID: torch.sigmoid(t), lut.LutFn.TANH: torch.tanh(t),
             lut.LutFn.HARDSWISH: torch.nn.functional.hardswish(t),
             lut.LutFn.HARDSIGMOID: torch.nn.functional.hardsigmoid(t),
             lut.LutFn.GELU: torch.nn.functional.gelu(t),
             lut.LutFn.GELU_TANH: torch.nn.functional.gelu(t, approximate="tanh"),
             lut.LutFn.SILU: torch.nn.functional.silu(t), lut.LutFn.EXP: torch.exp(t),
             lut.LutFn.NEG: torch.neg(t)}
    for fn, want in pairs.items():
        np.testing.assert_allclose(lut.FUNCTIONS[fn](x), want.numpy(), rtol=1e-12, atol=1e-12)
    pos = np.linspace(1e-3, 9, 1001)
    np.testing.assert_allclose(lut.rsqrt(pos), torch.rsqrt(torch.tensor(pos)).numpy(),
                               rtol=1e-12)


def test_lut_i16_saturates_without_wrapping():
    x = np.arange(-32768, 32768).astype(np.int16)
    # exp overflows int16 over most of the range; a step jumps by the whole int16 range
    for f, out_scale in ((lut.exp, 1e-3), (lambda z: np.where(z > 0, 1.0, -1.0), 1 / 32767)):
        table = lut.make_lut_i16(f, 8 / 32768, 0, out_scale, 0)
        assert np.abs(np.diff(table.astype(np.int64))).max() <= 32767  # slope never wraps
        y = intops.lut_i16(x, table).astype(np.int64)
        assert (np.diff(y) >= 0).all()  # monotone function -> monotone, never wrapped
        assert y.max() == 32767


def test_lut_i8_clamp_and_bad_scale():
    table = lut.make_lut_i8(lut.exp, 0.1, 0, 0.01, -128, qmin=-100, qmax=100)
    assert table.min() == -100 and table.max() == 100
    with pytest.raises(TesselConfigError, match="in_scale"):
        lut.make_lut_i8(lut.exp, 0.0, 0, 0.01, 0)


# --------------------------------------------------------------------------------------------
# Softmax
# --------------------------------------------------------------------------------------------


def attention_logits(rows: int, n: int, rng: np.random.Generator = RNG) -> np.ndarray:
    """q k^T / sqrt(d) of random heads with a few peaked keys, and a -1e4 padding mask."""
    q = rng.normal(0, 1, (rows, 64))
    k = rng.normal(0, 1, (n, 64))
    k[rng.choice(n, 3, replace=False)] *= 4.0  # keys many queries attend to
    logits = q @ k.T / 8.0 * rng.uniform(1.0, 3.0, (rows, 1))
    valid = rng.integers(n // 4, n + 1, rows)
    logits[np.arange(n)[None, :] >= valid[:, None]] += -1e4
    return logits


def _softmax_case(n: int, in_dt: DType, out_dt: DType):
    logits = attention_logits(48, n, np.random.default_rng(n))  # same logits for every dtype
    hi = float(logits.max())
    q, scale, zp = quantise(logits, in_dt, lo=max(float(logits.min()), hi - 64.0), hi=hi)
    plan = plan_softmax(scale, zp, in_dt, out_dt, n)
    y = softmax_int(q, plan)
    o_scale, o_zp = output_qparams(out_dt)
    p = (y.astype(np.float64) - o_zp) * o_scale
    ref = torch.softmax(torch.tensor((q.astype(np.float64) - zp) * scale), -1).numpy()
    return p, ref, o_scale


@pytest.mark.parametrize("n", [64, 384])
@pytest.mark.parametrize("in_dt", [DType.I16, DType.I8])
@pytest.mark.parametrize("out_dt", [DType.I16, DType.I8])
def test_softmax_accuracy(n, in_dt, out_dt):
    p, ref, o_scale = _softmax_case(n, in_dt, out_dt)
    err = np.abs(p - ref)
    sums = p.sum(-1)
    print(f"softmax n={n} {in_dt.name}->{out_dt.name}: max |err| {err.max():.2e} "
          f"({err.max() / o_scale:.2f} LSB), mean {err.mean():.2e}, row sums "
          f"[{sums.min():.4f}, {sums.max():.4f}]")
    if out_dt == DType.I16:
        assert err.max() < 1.2e-3 and err.mean() < 2e-5
        assert np.abs(sums - 1).max() < 3e-3
    else:  # p = 1 is 256 - 128 = 128: clamped to 127, one LSB off (as in TFLite)
        near_one = ref * 256.0 > 127.5
        assert err[~near_one].max() < 0.6 * o_scale and err[near_one].max() <= 1.01 * o_scale
        assert err.mean() < 1e-3
        assert np.abs(sums - 1).max() < 0.2  # many p < 1/512 round to 0 at scale 1/256


def test_softmax_edges_and_bounds():
    plan = plan_softmax(0.01, 0, DType.I16, DType.I16, 1)
    assert softmax_int(np.int16([[5], [-32768]]), plan).tolist() == [[32767], [32767]]
    plan8 = plan_softmax(0.01, 0, DType.I16, DType.I8, 1)
    assert softmax_int(np.int16([[5]]), plan8).tolist() == [[127]]
    # widest row, all equal: REDUCE SUM at its largest, RECIP at its smallest
    big = plan_softmax(0.5, 3, DType.I8, DType.I16, 65535)
    st = softmax_steps(np.full((1, 65535), 127, np.int8), big)
    e_max = int(st["e"].max())
    assert int(st["s"][0, 0]) == 65535 * e_max < INT32_MAX
    assert int(st["r"][0, 0]) >= 1
    # two-element extremes: the min saturates the exponent argument at -32768 -> e = 0
    two = plan_softmax(1.0, 0, DType.I16, DType.I16, 2)
    st = softmax_steps(np.int16([[32767, -32768], [0, 0]]), two)
    assert st["d"].tolist() == [[32767, -32768], [32767, 32767]]
    assert st["e"][0, 1] == 0 and st["y"][0].tolist() == [32767, 0]
    assert (st["e"].astype(np.int64) * st["r"] <= INT32_MAX).all()  # MUL never saturates
    assert abs(int(st["y"][1, 0]) - 16384) <= 1


def test_softmax_other_axis_and_errors():
    x = RNG.integers(-1000, 1000, (5, 7, 3)).astype(np.int16)
    plan = plan_softmax(0.003, 0, DType.I16, DType.I16, 7)
    y1 = softmax_int(x, plan, axis=1)
    y2 = np.moveaxis(softmax_int(np.moveaxis(x, 1, -1), plan), -1, 1)
    assert np.array_equal(y1, y2)
    with pytest.raises(TesselConfigError, match="plan was made for 7"):
        softmax_int(x, plan, axis=0)
    with pytest.raises(TesselConfigError, match="I8 or I16"):
        plan_softmax(0.1, 0, DType.I32, DType.I8, 4)


def test_softmax_plan_attrs_roundtrip():
    plan = plan_softmax(0.0123, -5, DType.I8, DType.I8, 197)
    attrs = plan.to_attrs()
    assert set(attrs) == set(SoftmaxPlan.attr_names()) and "exp_table" not in attrs
    assert all(isinstance(v, int) for v in attrs.values())
    back = SoftmaxPlan.from_attrs(attrs, plan.exp_table)
    assert back == plan and np.array_equal(back.exp_table, plan.exp_table)
    assert SoftmaxPlan.from_steps(plan.to_steps(), plan.exp_table) == plan
    with pytest.raises(TesselConfigError, match="steps"):
        SoftmaxPlan.from_steps(plan.to_steps()[:-1], plan.exp_table)
    with pytest.raises(TesselConfigError, match="missing"):
        SoftmaxPlan.from_attrs({"axis_len": 3}, plan.exp_table)


# --------------------------------------------------------------------------------------------
# Layer norm
# --------------------------------------------------------------------------------------------


def transformer_rows(rows: int, n: int, outlier_gain: float,
                     rng: np.random.Generator = RNG) -> np.ndarray:
    """Residual-stream-like rows: per-token scale, per-channel offsets, a few outlier channels
    (large in every token) and rare single large values."""
    x = rng.normal(0, 1, (rows, n)) * rng.uniform(0.5, 2.0, (rows, 1))
    x += rng.normal(0, 0.3, (1, n))
    x[:, rng.choice(n, 3, replace=False)] *= outlier_gain
    x[rng.random((rows, n)) < 0.002] *= 10.0
    return x


def _ln_case(n: int, in_dt: DType, out_dt: DType, outlier_gain: float):
    rng = np.random.default_rng(n)  # the same data for both output types
    x = transformer_rows(64, n, outlier_gain, rng)
    gamma = rng.normal(1.0, 0.3, n)
    gamma[:4] = [0.02, 3.0, -0.5, 0.0]
    beta = rng.normal(0.0, 0.2, n)
    q, s_in, zp = quantise(x, in_dt)
    xd = torch.tensor((q.astype(np.float64) - zp) * s_in)
    ref = torch.nn.functional.layer_norm(xd, (n,), torch.tensor(gamma), torch.tensor(beta),
                                         1e-5).numpy()
    o_scale, o_zp = _out_q(ref, 256 if out_dt == DType.I8 else 65536)
    plan = plan_layer_norm(s_in, zp, in_dt, gamma, beta, 1e-5, o_scale, o_zp, out_dt, n)
    y = layer_norm_int(q, plan)
    return np.abs(y.astype(np.float64) - o_zp - ref / o_scale)


@pytest.mark.parametrize("n", [192, 384])
@pytest.mark.parametrize("in_dt,gain", [(DType.I16, 40.0), (DType.I8, 6.0)])
def test_layer_norm_accuracy(n, in_dt, gain):
    err8 = _ln_case(n, in_dt, DType.I8, gain)
    err16 = _ln_case(n, in_dt, DType.I16, gain)
    print(f"layer norm n={n} {in_dt.name} in (outliers x{gain:g}): int8 out max {err8.max():.3f}"
          f" LSB mean {err8.mean():.3f}; int16 out max {err16.max():.1f} LSB mean "
          f"{err16.mean():.2f}")
    assert err8.mean() < 0.35 and err8.max() < 1.5
    assert err16.mean() < 32 and err16.max() < 400


def _adversarial_rows(dt: DType, n: int) -> np.ndarray:
    lo, hi = dt.lo, dt.hi
    rows = [np.full(n, lo), np.full(n, hi), np.where(np.arange(n) % 2 == 0, lo, hi),
            np.where(np.arange(n) < n // 2, lo, hi), np.r_[hi, np.full(n - 1, lo)],
            np.r_[lo, np.full(n - 1, hi)], RNG.integers(lo, hi + 1, n)]
    return np.stack(rows).astype(NP[dt])


@pytest.mark.parametrize("in_dt,zp", [(DType.I16, 0), (DType.I16, -1234), (DType.I8, 0),
                                      (DType.I8, 127), (DType.I8, -128)])
@pytest.mark.parametrize("n", [2, 3, 4, 7, 384, 4096])
def test_layer_norm_no_intermediate_saturates(in_dt, zp, n):
    gamma = RNG.uniform(-3, 3, n)
    beta = RNG.uniform(-2, 2, n)
    plan = plan_layer_norm(0.01, zp, in_dt, gamma, beta, 1e-5, 0.05, 0, DType.I8, n)
    x = _adversarial_rows(in_dt, n)
    st = layer_norm_steps(x, plan)
    xs = x.astype(np.int64) - zp
    assert np.array_equal(st["s"][:, 0], xs.sum(-1))  # exact: REDUCE SUM did not saturate
    d = st["d"].astype(np.int64)
    assert np.abs(d).max() < np.iinfo(NP[plan.d_dtype]).max  # SUB's clamp never active
    assert np.array_equal(st["q"][:, 0], (d * d).sum(-1))  # exact: SUMSQ did not saturate
    q_b = st["q"].astype(np.int64) + plan.var_bias
    assert (q_b <= INT32_MAX).all() and (q_b - st["v"] <= 1).all() and (st["v"] <= q_b).all()
    assert (np.abs(d * st["r"].astype(np.int64)) < 2**31).all()  # MUL 1 product fits int32
    assert np.abs(st["t"].astype(np.int64)).max() <= 32766  # its int16 clamp never active
    assert np.abs(st["w"].astype(np.int64)).max() <= 2**29 + 2
    centred = xs - xs.mean(-1, keepdims=True)
    # sign of the normalised value survives wherever the centred input is clearly non-zero
    clear = np.abs(centred) > 0.1 * (np.abs(centred).max(-1, keepdims=True) + 1)
    assert (np.sign(st["t"])[clear] == np.sign(centred)[clear]).all()


def test_layer_norm_constant_row_gives_beta_and_defaults():
    beta = np.linspace(-1, 1, 8)
    plan = plan_layer_norm(0.02, 3, DType.I8, None, beta, 1e-5, 1 / 64, 0, DType.I8, 8)
    y = layer_norm_int(np.full((2, 8), 50, np.int8), plan)
    assert np.array_equal(y[0], np.clip(np.round(beta * 64), -128, 127).astype(np.int8))
    ident = plan_layer_norm(1 / 256, 0, DType.I16, None, None, 0.0, 1 / 32, 0, DType.I8, 2)
    assert layer_norm_int(np.int16([[-1000, 1000]]), ident).tolist() == [[-32, 32]]


def test_layer_norm_plan_attrs_roundtrip_and_errors():
    plan = plan_layer_norm(0.004, 0, DType.I16, RNG.normal(1, 0.1, 16), RNG.normal(0, 1, 16),
                           1e-5, 0.03, -4, DType.I8, 16)
    attrs = plan.to_attrs()
    assert "gamma_q" not in attrs and attrs["sub_a_shift"] == 15 and attrs["n"] == 16
    back = LayerNormPlan.from_attrs(attrs, plan.gamma_q, plan.beta_q)
    assert back == plan and np.array_equal(back.beta_q, plan.beta_q)
    assert LayerNormPlan.from_steps(plan.to_steps(), plan.gamma_q, plan.beta_q) == plan
    with pytest.raises(TesselConfigError, match="gamma"):
        plan_layer_norm(0.1, 0, DType.I8, np.ones(3), None, 1e-5, 0.1, 0, DType.I8, 4)
    with pytest.raises(TesselConfigError, match="does not match"):
        layer_norm_int(np.zeros((1, 5), np.int16), plan)


# --------------------------------------------------------------------------------------------
# The chains on the simulator
# --------------------------------------------------------------------------------------------


class Sram:
    """Bump allocator for test programs: returns the address of each placed array."""

    def __init__(self) -> None:
        self.next, self.init = 64, []

    def put(self, arr: np.ndarray) -> int:
        addr = self.next
        self.init.append((addr, np.ascontiguousarray(arr)))
        self.next += (arr.nbytes + 63) // 64 * 64
        return addr

    def alloc(self, nbytes: int) -> int:
        return self.put(np.zeros(nbytes, np.uint8))


def _reduce(op, dt, rows, n, src, dst, zp=0):
    return I(Opcode.REDUCE, op=op, dtype=dt, axis=0, d0=n, d1=rows, src_addr=src,
             src_s0=dt.nbytes, src_s1=n * dt.nbytes, in_zp=zp, dst_addr=dst,
             dst_s0=4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else dt.nbytes)


def _elt(op, rows, n, a, ad, a_row, b, bd, b_s0, b_s1, out, od, **f):
    """ELTWISE over (rows, n): a row-major (a_row: 1 = per element, 0 = broadcast row)."""
    return I(Opcode.ELTWISE, op=op, a_dtype=ad, b_dtype=bd, out_dtype=od, d0=n, d1=rows,
             a_addr=a, a_s0=ad.nbytes, a_s1=a_row * n * ad.nbytes, b_addr=b, b_s0=b_s0,
             b_s1=b_s1, out_addr=out, out_s0=od.nbytes, out_s1=n * od.nbytes, **f)


def test_softmax_chain_on_simulator():
    rows, n = 6, 40
    for in_dt, out_dt in ((DType.I16, DType.I8), (DType.I8, DType.I16)):
        logits = attention_logits(rows, n)
        q, scale, zp = quantise(logits, in_dt, lo=float(logits.max()) - 64.0)
        plan = plan_softmax(scale, zp, in_dt, out_dt, n)
        mem = Sram()
        x, tab = mem.put(q), mem.put(plan.exp_table)
        m, d, e = mem.alloc(rows * 2), mem.alloc(rows * n * 2), mem.alloc(rows * n * 2)
        s, r, y = mem.alloc(rows * 4), mem.alloc(rows * 4), mem.alloc(rows * n * 2)
        i16, i32 = DType.I16, DType.I32
        prog = [
            _reduce(ReduceOp.MAX, in_dt, rows, n, x, m),
            _elt(EltOp.SUB, rows, n, x, in_dt, 1, m, in_dt, 0, in_dt.nbytes, d, i16,
                 a_zp=zp, b_zp=zp, left_shift=0, a_mult=ONE_MULT, a_shift=ONE_SHIFT,
                 b_mult=ONE_MULT, b_shift=ONE_SHIFT, out_mult=plan.sub_mult,
                 out_shift=plan.sub_shift, out_zp=plan.sub_zp, act_min=i16.lo, act_max=i16.hi),
            I(Opcode.LUT_LOAD, lut_base=0, count=513, src_addr=tab),
            I(Opcode.LUT, lut_mode=LutMode.I16_513, lut_base=0, d0=n * rows, src_addr=d,
              src_s0=2, dst_addr=e, dst_s0=2),
            _reduce(ReduceOp.SUM, i16, rows, n, e, s),
            I(Opcode.UNARY, op=UnaryOp.RECIP, frac_bits=plan.recip_frac_bits, d0=rows,
              src_addr=s, src_s0=4, dst_addr=r, dst_s0=4),
            _elt(EltOp.MUL, rows, n, e, i16, 1, r, i32, 0, 4, y, out_dt, out_mult=plan.mul_mult,
                 out_shift=plan.mul_shift, out_zp=plan.out_zp, act_min=plan.act_min,
                 act_max=plan.act_max),
        ]
        st = run_raw({V: prog}, sram=mem.init)
        got = sram_read(st, y, (rows, n), NP[out_dt])
        assert np.array_equal(got, softmax_int(q, plan))


def _requant_params(mem: Sram, bias: int, mult: int, shift: int) -> int:
    return mem.put(np.array([bias, mult, shift], np.int32))


def _requant(rows, src, dst, params, lo, hi):
    return I(Opcode.REQUANT, src=AccSrc.SRAM, src_addr=src, src_stride=4, rows=rows, ch=1,
             out_dtype=DType.I32, dst_addr=dst, dst_stride=4, param_addr=params,
             param_mode=ParamMode.PER_TENSOR, out_zp=0, act_min=lo, act_max=hi)


def _layer_norm_program(mem: Sram, plan: LayerNormPlan, x: int, rows: int) -> tuple[list, int]:
    n, dd, i16, i32 = plan.n, plan.d_dtype, DType.I16, DType.I32
    ind = plan.in_dtype
    g, b = mem.put(plan.gamma_q), mem.put(plan.beta_q)
    p_mean = _requant_params(mem, 0, plan.mean_mult, plan.mean_shift)
    p_var = _requant_params(mem, plan.var_bias, plan.var_mult, plan.var_shift)
    s, mu, q, v, r = (mem.alloc(rows * 4) for _ in range(5))
    d, t = mem.alloc(rows * n * dd.nbytes), mem.alloc(rows * n * 2)
    w, y = mem.alloc(rows * n * 4), mem.alloc(rows * n * 2)
    prog = [
        _reduce(ReduceOp.SUM, ind, rows, n, x, s, plan.in_zp),
        _requant(rows, s, mu, p_mean, INT32_MIN, INT32_MAX),
        _elt(EltOp.SUB, rows, n, x, ind, 1, mu, i32, 0, 4, d, dd, a_zp=plan.in_zp, b_zp=0,
             left_shift=0, a_mult=ONE_MULT, a_shift=plan.sub_a_shift, b_mult=ONE_MULT,
             b_shift=ONE_SHIFT, out_mult=plan.sub_mult, out_shift=plan.sub_shift, out_zp=0,
             act_min=dd.lo, act_max=dd.hi),
        _reduce(ReduceOp.SUMSQ, dd, rows, n, d, q),
        _requant(rows, q, v, p_var, 0, INT32_MAX),
        I(Opcode.UNARY, op=UnaryOp.RSQRT, frac_bits=plan.rsqrt_frac_bits, d0=rows, src_addr=v,
          src_s0=4, dst_addr=r, dst_s0=4),
        _elt(EltOp.MUL, rows, n, d, dd, 1, r, i32, 0, 4, t, i16, out_mult=plan.norm_mult,
             out_shift=plan.norm_shift, act_min=i16.lo, act_max=i16.hi),
        _elt(EltOp.MUL, rows, n, t, i16, 1, g, i16, 2, 0, w, i32, out_mult=plan.gamma_mult,
             out_shift=plan.gamma_shift, act_min=INT32_MIN, act_max=INT32_MAX),
        _elt(EltOp.ADD, rows, n, w, i32, 1, b, i32, 4, 0, y, plan.out_dtype, a_mult=ONE_MULT,
             a_shift=ONE_SHIFT, b_mult=ONE_MULT, b_shift=ONE_SHIFT, out_mult=plan.out_mult,
             out_shift=plan.out_shift, out_zp=plan.out_zp, act_min=plan.act_min,
             act_max=plan.act_max),
    ]
    return prog, y


@pytest.mark.parametrize("in_dt,out_dt,n", [(DType.I16, DType.I8, 96), (DType.I8, DType.I16, 4),
                                            (DType.I8, DType.I8, 33)])
def test_layer_norm_chain_on_simulator(in_dt, out_dt, n):
    rows = 5
    xs = np.concatenate([transformer_rows(rows - 2, n, 20.0), np.zeros((2, n))])
    q, s_in, zp = quantise(xs, in_dt)
    q[-1] = _adversarial_rows(in_dt, n)[3]  # half min, half max: the largest variance
    gamma, beta = RNG.normal(1, 0.5, n), RNG.normal(0, 0.5, n)
    plan = plan_layer_norm(s_in, zp, in_dt, gamma, beta, 1e-5, 4 / 128, -3, out_dt, n)
    mem = Sram()
    x = mem.put(q)
    prog, y = _layer_norm_program(mem, plan, x, rows)
    st = run_raw({V: prog}, sram=mem.init)
    got = sram_read(st, y, (rows, n), NP[out_dt])
    assert np.array_equal(got, layer_norm_int(q, plan))
    assert math.isfinite(float(got.astype(np.float64).std())) and got.std() > 0
