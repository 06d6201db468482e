"""qlinear / qmatmul -> MATMUL + REQUANT programs: simulated output equals the golden model and
an independent int64 reference bit for bit (tiles not dividing the shapes, broadcast batches,
K split with ACCUMULATE, every preset); the estimate equals the simulated cycles."""

from __future__ import annotations

import numpy as np
import pytest

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, run_graph, verify
from tessel.isa import fixedpoint as fp
from tessel.ops import matmul_emit
from tessel.ops.context import CodegenContext, ConstPool
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.sim import simulate

Q = QuantParams((0.05,), (3,))
PRESETS = ["tnpu-s", "tnpu-xs", "u55-256", "u65-512", "tnpu-m"]


def linear_graph(rng, xshape, n, relu=False):
    b = GraphBuilder("t")
    x = b.input("x", TensorType(xshape, DType.I8, Layout.ANY, Q))
    w = rng.integers(-127, 128, (n, xshape[-1])).astype(np.int8)
    mult, sh = fp.quantize_multipliers(rng.uniform(0.0002, 0.003, n))
    names = [b.constant(w, "w"), b.constant(rng.integers(-999, 999, n).astype(np.int32), "b"),
             b.constant(mult.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    y = b.add(Op.QLINEAR, [x, *names], dict(in_zp=3, out_zp=-5, act_min=-5 if relu else -128,
                                            act_max=127, dtype=DType.I8))
    return verify(b.build([y]))


def matmul_graph(ashape, bshape, b_const=None):
    b = GraphBuilder("t")
    a = b.input("a", TensorType(ashape, DType.I8, Layout.ANY, Q))
    rhs = b.constant(b_const, "k") if b_const is not None else b.input(
        "b", TensorType(bshape, DType.I8, Layout.ANY, Q))
    mult, sh = fp.quantize_multipliers(np.array([0.0015]))
    y = b.add(Op.QMATMUL, [a, rhs], dict(a_zp=3, b_zp=-7, multiplier=int(mult[0]),
                                         shift=int(sh[0]), out_zp=2, act_min=-128, act_max=127,
                                         dtype=DType.I8))
    return verify(b.build([y]))


def linear_reference(g, x):
    n = g.nodes[-1]
    a = n.attr_map
    w, bias, m, s = (g.constant_value(i).astype(np.int64) for i in n.inputs[1:])
    acc = (x.astype(np.int64) - a["in_zp"]) @ w.T
    return fp.requantize(acc, bias, m, s, a["out_zp"], a["act_min"], a["act_max"], axis=-1,
                         out_dtype=np.int8)


def run(g, feeds, preset):
    arch = load_preset(preset)
    node = g.nodes[-1]
    rp = compile_region(g, [node], list(feeds), [node.name], arch, {"model": "t"})
    res = simulate(rp.program, arch, feeds)
    golden = run_graph(g, feeds, kernels=GOLDEN_KERNELS)[0]
    out = res.outputs[node.name]
    np.testing.assert_array_equal(out, golden)
    assert_estimates_exact(rp, arch)
    return out, rp


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("xshape,n,relu", [
    ((1, 50, 64), 40, False),  # odd sizes: tiles do not divide M or N
    ((1, 640), 100, True),  # M = 1 (classifier), fused ReLU clamp
    ((1, 97, 160), 200, False),
])
def test_qlinear_bit_exact_and_estimate_close(preset, xshape, n, relu):
    rng = np.random.default_rng(n)
    g = linear_graph(rng, xshape, n, relu)
    x = rng.integers(-128, 128, xshape).astype(np.int8)
    out, _ = run(g, {"x": x}, preset)
    np.testing.assert_array_equal(out, linear_reference(g, x))


@pytest.mark.parametrize("preset,xshape,n", [
    ("tnpu-xs", (1, 4, 20000), 16),  # no resident operand fits 128 KiB: K chunks accumulate
    ("tnpu-s", (2, 70000), 8),  # K beyond the 16-bit MATMUL field
])
def test_qlinear_k_split_accumulates(preset, xshape, n):
    rng = np.random.default_rng(7)
    g = linear_graph(rng, xshape, n)
    x = rng.integers(-128, 128, xshape).astype(np.int8)
    out, rp = run(g, {"x": x}, preset)
    assert rp.layers[0].mapping.startswith("streamed")
    np.testing.assert_array_equal(out, linear_reference(g, x))


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("ashape,bshape", [
    ((1, 4, 33, 16), (1, 4, 16, 33)),  # attention Q K^T: one MATMUL per head and tile
    ((2, 1, 9, 20), (3, 20, 17)),  # broadcast leading dims
    ((70, 48), (48, 90)),
])
def test_qmatmul_bit_exact_and_estimate_close(preset, ashape, bshape):
    rng = np.random.default_rng(len(ashape) + bshape[-1])
    g = matmul_graph(ashape, bshape)
    feeds = {"a": rng.integers(-128, 128, ashape).astype(np.int8),
             "b": rng.integers(-128, 128, bshape).astype(np.int8)}
    out, _ = run(g, feeds, preset)
    ref = (feeds["a"].astype(np.int64) - 3) @ (feeds["b"].astype(np.int64) + 7)
    a = g.nodes[-1].attr_map
    np.testing.assert_array_equal(out, fp.requantize(ref, 0, a["multiplier"], a["shift"], 2,
                                                     -128, 127, axis=-1, out_dtype=np.int8))


def test_qmatmul_constant_operand():
    rng = np.random.default_rng(3)
    k = rng.integers(-128, 128, (24, 40)).astype(np.int8)
    g = matmul_graph((1, 30, 24), None, b_const=k)
    run(g, {"a": rng.integers(-128, 128, (1, 30, 24)).astype(np.int8)}, "tnpu-s")


@pytest.mark.parametrize("preset", PRESETS)
def test_candidates_fit_and_stay_few(preset):
    arch = load_preset(preset)
    g = linear_graph(np.random.default_rng(0), (1, 197, 384), 1536)
    node = g.nodes[-1]
    ctx = CodegenContext(arch, g, {}, ConstPool(0), 0)
    cands = matmul_emit.candidates(node, ctx)
    assert 0 < len(cands) <= matmul_emit.KEEP
    for mp in cands:  # every candidate's layout fits SRAM and the accumulator
        assert matmul_emit._fits(matmul_emit.gemm(node, ctx), mp, ctx, node)


def test_large_gemm_near_roofline():
    """A transformer-sized GEMM keeps the matrix engine busy (>= 90 % of peak on tnpu-s)."""
    rng = np.random.default_rng(1)
    g = linear_graph(rng, (1, 128, 256), 512)
    x = rng.integers(-128, 128, (1, 128, 256)).astype(np.int8)
    _, rp = run(g, {"x": x}, "tnpu-s")
    arch = load_preset("tnpu-s")
    ideal = 128 * 256 * 512 / arch.peak_macs_per_cycle
    assert ideal / rp.layers[0].estimate.cycles >= 0.9
