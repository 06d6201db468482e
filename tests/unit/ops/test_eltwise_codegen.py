"""qadd / qsub / qmul / requantize / lut -> ELTWISE / LUT programs: simulated output equals the
golden model bit for bit (numpy broadcasting via stride-0 operands, constant operands, int16,
tensors larger than SRAM, every preset); the estimate equals the simulated cycles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, run_graph, verify
from tessel.isa import Engine, Opcode
from tessel.isa import fixedpoint as fp
from tessel.isa.fields import EltOp
from tessel.ops import eltwise_emit, intops
from tessel.ops.context import CodegenContext, ConstPool
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import estimation_context
from tessel.sim import simulate

Q = QuantParams((0.05,), (3,))
PRESETS = ["tnpu-s", "tnpu-xs", "u55-256", "u65-512", "tnpu-m"]


def q31(x):
    m, s = fp.quantize_multipliers(np.array([x]))
    return int(m[0]), int(s[0])


def binary_graph(rng, op, ashape, bshape, dt=DType.I8, b_const=False):
    b = GraphBuilder("t")
    a = b.input("a", TensorType(ashape, dt, Layout.ANY, Q))
    if b_const:
        rhs = b.constant(rng.integers(*dt.bounds, bshape, endpoint=True).astype(dt.numpy), "c")
    else:
        rhs = b.input("b", TensorType(bshape, dt, Layout.ANY, Q))
    if op is Op.QMUL:
        om, osh = q31(0.01)
        attrs = dict(a_zp=3, b_zp=-2, out_multiplier=om, out_shift=osh)
    else:
        ls = 20 if dt is DType.I8 else 15
        (am, ash), (bm, bsh), (om, osh) = q31(0.4), q31(0.3), q31(2.5 / (1 << ls))
        attrs = dict(a_zp=3, b_zp=-2, left_shift=ls, a_multiplier=am, a_shift=ash,
                     b_multiplier=bm, b_shift=bsh, out_multiplier=om, out_shift=osh)
    lo, hi = dt.bounds
    y = b.add(op, [a, rhs], dict(attrs, out_zp=-5, act_min=lo + 3, act_max=hi, dtype=dt))
    return verify(b.build([y]))


def lut_graph(rng, shape, dt):
    b = GraphBuilder("t")
    x = b.input("x", TensorType(shape, dt, Layout.ANY, Q))
    n = 256 if dt is DType.I8 else 513
    t = b.constant(rng.integers(*dt.bounds, n, endpoint=True).astype(dt.numpy), "table")
    return verify(b.build([b.add(Op.LUT, [x, t], {})]))


def requantize_graph(shape, dt, out_dt):
    b = GraphBuilder("t")
    x = b.input("x", TensorType(shape, dt, Layout.ANY, Q))
    m, s = q31(0.7)
    lo, hi = out_dt.bounds
    y = b.add(Op.REQUANTIZE, [x], dict(in_zp=3, multiplier=m, shift=s, out_zp=-4, act_min=lo,
                                       act_max=hi, dtype=out_dt))
    return verify(b.build([y]))


def run(g, rng, preset):
    arch = load_preset(preset)
    node = g.nodes[-1]
    feeds = {v.name: rng.integers(*v.type.dtype.bounds, v.type.shape, endpoint=True)
             .astype(v.type.dtype.numpy) for v in g.inputs}
    rp = compile_region(g, [node], list(feeds), [node.name], arch, {"model": "t"})
    res = simulate(rp.program, arch, feeds)
    out = res.outputs[node.name]
    np.testing.assert_array_equal(out, run_graph(g, feeds, kernels=GOLDEN_KERNELS)[0])
    assert_estimates_exact(rp, arch)
    return feeds, out, rp


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("op,ashape,bshape,kw", [
    (Op.QADD, (1, 14, 14, 32), (1, 14, 14, 32), {}),  # residual add
    (Op.QMUL, (1, 28, 28, 24), (24,), {}),  # per-channel scale: stride-0 resident operand
    (Op.QSUB, (1, 6, 5, 7), (1, 6, 1, 7), {}),  # broadcast in the middle
    (Op.QMUL, (2, 1, 5, 1, 3), (1, 4, 1, 6, 1), {}),  # both operands broadcast, 5-D
    (Op.QADD, (1, 50, 96), (1, 50, 96), {"b_const": True}),  # position embedding (constant)
    (Op.QADD, (1, 33, 96), (1, 33, 96), {"dt": DType.I16}),  # int16 residual stream
    (Op.QSUB, (1, 33, 17), (1, 33, 1), {"dt": DType.I16}),  # x - row max (softmax-like)
])
def test_binary_bit_exact_and_estimate_close(preset, op, ashape, bshape, kw):
    rng = np.random.default_rng(len(ashape) * 7 + bshape[-1])
    run(binary_graph(rng, op, ashape, bshape, **kw), rng, preset)


@pytest.mark.parametrize("preset", ["tnpu-xs", "u55-256"])
def test_larger_than_sram_is_chunked(preset):
    """300k elements x 3 tensors do not fit 128 KiB: the step runs several tiles."""
    rng = np.random.default_rng(5)
    g = binary_graph(rng, Op.QADD, (300000,), (1,))
    feeds, out, rp = run(g, rng, preset)
    stores = [i for i in rp.program.streams[Engine.DMA_OUT] if i.opcode is Opcode.DMA_STORE]
    assert len(stores) > 1
    a = g.nodes[-1].attr_map
    ref = intops.eltwise(EltOp.ADD, feeds["a"], feeds["b"], a_zp=3, b_zp=-2,
                         left_shift=a["left_shift"], a_mult=a["a_multiplier"],
                         a_shift=a["a_shift"], b_mult=a["b_multiplier"], b_shift=a["b_shift"],
                         out_mult=a["out_multiplier"], out_shift=a["out_shift"], out_zp=-5,
                         act_min=-125, act_max=127, out_dtype=np.int8)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("shape,dt", [((1, 28, 28, 32), DType.I8), ((1, 65, 97), DType.I16)])
def test_lut_bit_exact(preset, shape, dt):
    rng = np.random.default_rng(11)
    g = lut_graph(rng, shape, dt)
    _, _, rp = run(g, rng, preset)
    vec = rp.program.streams[Engine.VECTOR]
    assert sum(i.opcode is Opcode.LUT_LOAD for i in vec) == 1  # the table is loaded once


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("shape,dt,out_dt", [((1, 14, 14, 40), DType.I8, DType.I8),
                                             ((1, 50, 64), DType.I16, DType.I8)])
def test_requantize_bit_exact(preset, shape, dt, out_dt):
    rng = np.random.default_rng(2)
    feeds, out, _ = run(requantize_graph(shape, dt, out_dt), rng, preset)
    m, s = q31(0.7)  # independent reference: clamp(MBQM(x - in_zp) + out_zp)
    ref = fp.multiply_by_quantized_multiplier(feeds["x"].astype(np.int64) - 3, m, s) - 4
    np.testing.assert_array_equal(out, np.clip(ref, *out_dt.bounds).astype(out_dt.numpy))


def test_space_merges_contiguous_dims_and_keeps_broadcast():
    sp = eltwise_emit.space((1, 56, 56, 24), [(1, 56, 56, 24), (24,)])
    assert sp.shape == (3136, 24)
    assert sp.strides == ((24, 1), (0, 1), (24, 1))
    sp = eltwise_emit.space((2, 4, 5, 6, 3), [(2, 1, 5, 1, 3), (1, 4, 1, 6, 1)])
    assert sp.shape == (2, 4, 5, 6, 3) and sp.strides[1] == (0, 6, 0, 1, 0)


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("ashape,bshape,dt", [
    ((1, 56, 56, 64), (1, 56, 56, 64), DType.I8), ((1, 28, 28, 40), (1, 1, 1, 40), DType.I8),
    ((1, 17, 96), (1, 17, 1), DType.I16), ((2, 9, 13, 24), (2, 9, 13, 24), DType.I16)])
def test_tiles_keyed_by_their_dims_estimate_as_every_tile_built(preset, ashape, bshape, dt):
    """The estimate builds one tile per tile key (its dims): every candidate's estimate,
    full and sampled, equals the one that builds every tile."""
    arch = load_preset(preset)
    g = binary_graph(np.random.default_rng(3), Op.QADD, ashape, bshape, dt)
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    cands = eltwise_emit.candidates(node, est_ctx)
    assert cands
    for m in cands:
        work = eltwise_emit.step(node, m, est_ctx)
        assert work.tile_key is not None
        every = dataclasses.replace(work, tile_key=None)
        for sample in (None, 3):
            assert estimate_step(work, arch, sample=sample) == estimate_step(
                every, arch, sample=sample), (str(m), sample)
