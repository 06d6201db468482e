"""qsoftmax / qlayer_norm -> vector-engine instruction chains: the simulated output equals the
golden model (GOLDEN_KERNELS) bit for bit on every preset, for plans made by the real
plan_softmax / plan_layer_norm at realistic scales (MiniLM attention with a saturated mask,
ViT attention, transformer residual streams with outliers); the emitted tile is exactly the
golden chain; the estimate equals the simulated cycles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.errors import TesselCompileError
from tessel.ir import DType, GraphBuilder, Op, QuantParams, TensorType, verify
from tessel.isa import Engine, Opcode
from tessel.isa.fields import DType as IsaDType
from tessel.ops.layer_norm import plan_layer_norm
from tessel.ops.softmax import output_qparams, plan_softmax
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.sim import simulate

PRESETS = ["tnpu-s", "tnpu-xs", "u55-256", "u65-512", "tnpu-m"]
ISA = {DType.I8: IsaDType.I8, DType.I16: IsaDType.I16}
SOFTMAX_CHAIN = [Opcode.REDUCE, Opcode.ELTWISE, Opcode.LUT, Opcode.REDUCE, Opcode.UNARY,
                 Opcode.ELTWISE]
LAYER_NORM_CHAIN = [Opcode.REDUCE, Opcode.REQUANT, Opcode.ELTWISE, Opcode.REDUCE,
                    Opcode.REQUANT, Opcode.UNARY, Opcode.ELTWISE, Opcode.ELTWISE, Opcode.ELTWISE]


def quantize(v: np.ndarray, scale: float, zp: int, dt: DType) -> np.ndarray:
    lo, hi = dt.bounds
    return np.clip(np.round(v / scale) + zp, lo, hi).astype(dt.numpy)


def softmax_graph(shape, in_dt, out_dt, scale, zp, axis=-1):
    plan = plan_softmax(scale, zp, ISA[in_dt], ISA[out_dt], shape[axis % len(shape)])
    b = GraphBuilder("t")
    x = b.input("x", TensorType(shape, in_dt, quant=QuantParams((scale,), (zp,))))
    table = b.constant(np.asarray(plan.exp_table, np.int16), "exp_table")
    y = b.add(Op.QSOFTMAX, [x, table], {"axis": axis, "dtype": out_dt, **plan.to_attrs()})
    return verify(b.build([y])), [np.asarray(plan.exp_table)]


def layer_norm_graph(shape, in_dt, out_dt, scales, seed=0):
    (s_in, zp), (s_out, o_zp) = scales
    n = shape[-1]
    rng = np.random.default_rng(seed)
    gamma, beta = rng.normal(1.0, 0.25, n), rng.normal(0.0, 0.1, n)
    plan = plan_layer_norm(s_in, zp, ISA[in_dt], gamma, beta, 1e-5, s_out, o_zp, ISA[out_dt], n)
    b = GraphBuilder("t")
    x = b.input("x", TensorType(shape, in_dt, quant=QuantParams((s_in,), (zp,))))
    gq = b.constant(np.asarray(plan.gamma_q), "gamma_q")
    bq = b.constant(np.asarray(plan.beta_q), "beta_q")
    y = b.add(Op.QLAYER_NORM, [x, gq, bq], {"normalized_shape": (n,), "dtype": out_dt,
                                              **plan.to_attrs()})
    return verify(b.build([y])), [np.asarray(plan.gamma_q), np.asarray(plan.beta_q)], \
        (gamma, beta)


def run(g, consts, x, preset):
    """Compile + simulate; asserts bit equality with the golden kernel."""
    arch = load_preset(preset)
    node = g.nodes[-1]
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
    res = simulate(rp.program, arch, {"x": x})
    out = res.outputs[node.name]
    np.testing.assert_array_equal(out, GOLDEN_KERNELS[node.op](dict(node.attr_map),
                                                               [x, *consts]))
    return rp, res, out


def assert_estimate_exact(rp, preset):
    assert_estimates_exact(rp, load_preset(preset))


# ---------------------------------------------------------------- data


def minilm_scores(shape, rng):
    """int16 attention scores at 16/32768 per unit with a -1e4 padding mask (saturates to
    -32768) on the last keys of every row, plus one fully masked row."""
    scale = 16.0 / 32768
    v = rng.normal(0.0, 3.0, shape)
    v[..., -5:] += -1e4
    v[0, 0, 0, :] = -1e4
    return quantize(v, scale, 0, DType.I16), scale, 0


def vit_scores(shape, rng, dt):
    scale, zp = (0.08, -6) if dt is DType.I8 else (14.0 / 32768, 0)
    return quantize(rng.normal(0.0, 2.5, shape), scale, zp, dt), scale, zp


def residual_stream(shape, rng, dt):
    """Transformer-like activations: N(0, 1) with a few outlier channels at ~20."""
    v = rng.normal(0.0, 1.0, shape)
    v[..., 3] *= 20.0
    v[..., shape[-1] // 2] -= 12.0
    scale, zp = (40.0 / 32767, 0) if dt is DType.I16 else (0.2, 4)
    return quantize(v, scale, zp, dt), scale, zp


def check_softmax_close(x, out, scale, zp, out_dt, axis=-1):
    """Sanity (not the contract): the integer softmax is near the float one."""
    o_scale, o_zp = output_qparams(ISA[out_dt])
    ref = torch.softmax(torch.tensor((x.astype(np.float64) - zp) * scale), axis).numpy()
    err = np.abs((out.astype(np.float64) - o_zp) * o_scale - ref).max()
    assert err <= (3 * o_scale if out_dt is DType.I8 else 2e-3), err


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("preset", PRESETS)
def test_minilm_softmax_int16_in_int8_out_with_saturated_mask(preset):
    rng = np.random.default_rng(1)
    shape = (1, 12, 32, 32)
    x, scale, zp = minilm_scores(shape, rng)
    assert (x[..., -5:] == -32768).all()
    g, consts = softmax_graph(shape, DType.I16, DType.I8, scale, zp)
    rp, res, out = run(g, consts, x, preset)
    assert (out[..., 1:, -5:] == -128).all()  # masked keys get probability 0
    assert (out[0, 0, 0] == out[0, 0, 0, 0]).all()  # a fully masked row is uniform
    check_softmax_close(x, out, scale, zp, DType.I8)
    assert_estimate_exact(rp, preset)


VIT = [(DType.I8, DType.I16), (DType.I16, DType.I8)]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(("in_dt", "out_dt"), VIT, ids=["i8-i16", "i16-i8"])
def test_vit_softmax_197_tokens(preset, in_dt, out_dt):
    rng = np.random.default_rng(2)
    shape = (1, 3, 197, 197)
    x, scale, zp = vit_scores(shape, rng, in_dt)
    g, consts = softmax_graph(shape, in_dt, out_dt, scale, zp)
    rp, res, out = run(g, consts, x, preset)
    check_softmax_close(x, out, scale, zp, out_dt)
    assert_estimate_exact(rp, preset)


SOFTMAX_EDGES = [((2, 7, 5), 1, DType.I16, DType.I16),  # reduced axis not the last
                 ((3, 1, 9), 1, DType.I8, DType.I8),  # axis of one element
                 ((37, 3), -1, DType.I8, DType.I16)]  # odd sizes, three-element rows


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(("shape", "axis", "in_dt", "out_dt"), SOFTMAX_EDGES,
                         ids=[str(c[0]) for c in SOFTMAX_EDGES])
def test_softmax_edges(preset, shape, axis, in_dt, out_dt):
    rng = np.random.default_rng(3)
    x, scale, zp = vit_scores(shape, rng, in_dt)
    g, consts = softmax_graph(shape, in_dt, out_dt, scale, zp, axis)
    rp, res, out = run(g, consts, x, preset)
    check_softmax_close(x, out, scale, zp, out_dt, axis)
    assert_estimate_exact(rp, preset)


def test_softmax_over_a_middle_axis_splits_the_inner_dim_when_a_row_block_is_too_big():
    """R = 1500 keys x K2 = 48 int16 columns: 144 KB per row block > 128 KiB of SRAM."""
    rng = np.random.default_rng(4)
    shape = (2, 1500, 48)
    x, scale, zp = vit_scores(shape, rng, DType.I16)
    g, consts = softmax_graph(shape, DType.I16, DType.I8, scale, zp, axis=1)
    preset = "tnpu-xs"
    rp, res, out = run(g, consts, x, preset)
    assert "inner=" in rp.layers[0].mapping, rp.layers[0].mapping
    assert_estimate_exact(rp, preset)


def test_softmax_tile_is_the_golden_chain_and_the_table_loads_once():
    rng = np.random.default_rng(5)
    shape = (1, 3, 197, 197)
    x, scale, zp = vit_scores(shape, rng, DType.I16)
    g, consts = softmax_graph(shape, DType.I16, DType.I8, scale, zp)
    rp, _, _ = run(g, consts, x, "tnpu-xs")
    vec = [i.opcode for i in rp.program.streams[Engine.VECTOR]
           if i.opcode not in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)]
    assert vec[0] is Opcode.LUT_LOAD and vec.count(Opcode.LUT_LOAD) == 1
    body = vec[1:]
    tiles = len(body) // len(SOFTMAX_CHAIN)
    assert tiles > 1 and body == SOFTMAX_CHAIN * tiles  # tiled: 591 rows do not fit at once


# ---------------------------------------------------------------- layer norm


LN_CASES = [((1, 32, 384), DType.I16, DType.I8, ((40.0 / 32767, 0), (0.06, -3))),
            ((1, 197, 192), DType.I16, DType.I8, ((40.0 / 32767, 0), (0.05, 2))),
            ((1, 197, 192), DType.I8, DType.I8, ((0.2, 4), (0.05, 2))),
            ((1, 50, 768), DType.I8, DType.I16, ((0.2, 4), (8.0 / 32767, 0))),
            ((7, 4), DType.I16, DType.I16, ((40.0 / 32767, 0), (8.0 / 32767, 0)))]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(("shape", "in_dt", "out_dt", "scales"), LN_CASES,
                         ids=[f"{c[0]}-{c[1].value}-{c[2].value}" for c in LN_CASES])
def test_layer_norm(preset, shape, in_dt, out_dt, scales):
    rng = np.random.default_rng(6)
    x, _, _ = residual_stream(shape, rng, in_dt)
    g, consts, (gamma, beta) = layer_norm_graph(shape, in_dt, out_dt, scales)
    rp, res, out = run(g, consts, x, preset)
    (s_in, zp), (s_out, o_zp) = scales
    xf = torch.tensor((x.astype(np.float64) - zp) * s_in)
    ref = torch.nn.functional.layer_norm(xf, (shape[-1],), torch.tensor(gamma),
                                         torch.tensor(beta), 1e-5).numpy()
    lo, hi = out_dt.bounds
    want = np.clip(ref / s_out + o_zp, lo, hi)
    # sanity (not the contract): near float layer norm, within an output step or 0.005
    assert np.abs(out - want).mean() * s_out < max(s_out, 0.005)
    assert_estimate_exact(rp, preset)


def test_layer_norm_tile_is_the_golden_chain():
    rng = np.random.default_rng(7)
    shape = (1, 197, 192)
    x, _, _ = residual_stream(shape, rng, DType.I16)
    g, consts, _ = layer_norm_graph(shape, DType.I16, DType.I8, LN_CASES[1][3])
    rp, _, _ = run(g, consts, x, "u55-256")
    vec = [i.opcode for i in rp.program.streams[Engine.VECTOR]
           if i.opcode not in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)]
    tiles = len(vec) // len(LAYER_NORM_CHAIN)
    assert tiles > 1 and vec == LAYER_NORM_CHAIN * tiles
    dma_in = [i for i in rp.program.streams[Engine.DMA_IN] if i.opcode is Opcode.DMA_LOAD]
    assert len(dma_in) == tiles + 1  # parameters, gamma and beta once; one load per tile


def test_row_too_long_for_sram_is_rejected():
    shape = (1, 2, 60000)
    g, consts, _ = layer_norm_graph(shape, DType.I16, DType.I8, LN_CASES[0][3])
    node = g.nodes[-1]
    with pytest.raises(TesselCompileError, match="no mapping fits"):
        compile_region(g, [node], ["x"], [node.name], load_preset("tnpu-xs"), {})
