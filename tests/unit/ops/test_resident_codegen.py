"""On-chip residency (CompileOptions.on_chip_residency, experimental): an activation between
two steps that fits beside their working SRAM is never written to DRAM and the result stays
bit-exact; one that does not fit is spilled to DRAM as before."""

from __future__ import annotations

import numpy as np
import pytest
from conv_constants import conv_constants

from compile_region import compile_region
from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import fixedpoint as fp
from tessel.quant.golden import run_golden
from tessel.sim import simulate


def chain(rng, h, w, c1, c2, c3):
    """3x3 conv -> 1x1 conv (not a fusible pair: the second is not depthwise)."""
    b = GraphBuilder("chain")
    x = b.input("x", TensorType((1, h, w, c1), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))

    def consts(cout, shape, fan):
        return conv_constants(b, rng, cout, shape, fan)

    y = b.add(Op.QCONV2D, [x, *consts(c2, (c2, 3, 3, c1), 9 * c1)], dict(
        padding=(1, 1, 1, 1), layout=Layout.NHWC, in_zp=3, out_zp=-7, act_min=-7, act_max=120,
        dtype=DType.I8))
    z = b.add(Op.QCONV2D, [y, *consts(c3, (c3, 1, 1, c2), c2)], dict(
        layout=Layout.NHWC, in_zp=-7, out_zp=2, act_min=-128, act_max=127, dtype=DType.I8))
    return verify(b.build([z]))


def _run(g, arch, residency, x):
    nodes = [n for n in g.nodes if n.op is Op.QCONV2D]
    rp = compile_region(g, nodes, ["x"], [nodes[-1].name], arch, {}, residency=residency)
    res = simulate(rp.program, arch, {"x": x})
    return rp, res, nodes[-1].name


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512"])
def test_fitting_activation_stays_on_chip_bit_exact(preset):
    rng = np.random.default_rng(1)
    arch = load_preset(preset)
    g = chain(rng, 12, 10, 8, 32, 16)
    x = rng.integers(-128, 128, (1, 12, 10, 8)).astype(np.int8)
    want = run_golden(g, {"x": x})[0]
    mem = arch.activations_memory
    rp0, off, out = _run(g, arch, False, x)
    rp1, on, _ = _run(g, arch, True, x)
    np.testing.assert_array_equal(on.outputs[out], want)
    out_bytes = 12 * 10 * 16
    assert off.stats.memory_traffic[mem].write_bytes == out_bytes + 12 * 10 * 32
    assert on.stats.memory_traffic[mem].write_bytes == out_bytes  # the middle stayed on chip
    assert on.stats.total_cycles < off.stats.total_cycles
    assert rp1.program == _run(g, arch, True, x)[0].program  # deterministic


def test_activation_beyond_the_sram_is_spilled():
    rng = np.random.default_rng(2)
    arch = load_preset("tnpu-s").with_param("onchip.sram_bytes", 16384)
    g = chain(rng, 16, 16, 8, 64, 8)  # middle: 16 KiB, the whole SRAM
    x = rng.integers(-128, 128, (1, 16, 16, 8)).astype(np.int8)
    rp0, off, out = _run(g, arch, False, x)
    rp1, on, _ = _run(g, arch, True, x)
    np.testing.assert_array_equal(on.outputs[out], run_golden(g, {"x": x})[0])
    assert rp1.program == rp0.program  # nothing resident: the binary is unchanged


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512"])
def test_conv_into_transpose_bit_exact(preset):
    """A movement consumer's slot is read by its store, not by vector work: the load is copied
    on chip rather than re-based (digits_cnn's NHWC -> NCHW before the flatten)."""
    rng = np.random.default_rng(3)
    arch = load_preset(preset)
    bt = GraphBuilder("conv_t")
    x = bt.input("x", TensorType((1, 6, 6, 4), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    m, sh = fp.quantize_multipliers(rng.uniform(0.001, 0.01, 8))
    y = bt.add(Op.QCONV2D, [x, bt.constant(rng.integers(-127, 128, (8, 3, 3, 4)).astype(np.int8),
                                         "w"),
                            bt.constant(rng.integers(-99, 99, 8).astype(np.int32), "b"),
                            bt.constant(m.astype(np.int32), "m"),
                            bt.constant(sh.astype(np.int32), "s")],
               dict(padding=(1, 1, 1, 1), layout=Layout.NHWC, in_zp=3, out_zp=-7, act_min=-128,
                    act_max=127, dtype=DType.I8))
    t = bt.add(Op.TRANSPOSE, [y], {"perm": (0, 3, 1, 2)})
    g = verify(bt.build([t]))
    xin = rng.integers(-128, 128, (1, 6, 6, 4)).astype(np.int8)
    steps = [n for n in g.nodes if n.op in (Op.QCONV2D, Op.TRANSPOSE)]
    rp = compile_region(g, steps, ["x"], [steps[-1].name], arch, {}, residency=True)
    res = simulate(rp.program, arch, {"x": xin})
    np.testing.assert_array_equal(res.outputs[steps[-1].name], run_golden(g, {"x": xin})[0])
    assert res.stats.memory_traffic[arch.activations_memory].write_bytes == 6 * 6 * 8


@pytest.mark.parametrize("sram", [20480, 24576])
def test_activation_beyond_the_free_sram_is_partly_resident(sram):
    """The middle (16 KiB) does not fit beside the working sets: a prefix of it stays on chip
    (its rows are never written to DRAM), the rest goes through DRAM, bit-exact."""
    rng = np.random.default_rng(2)
    arch = load_preset("tnpu-s").with_param("onchip.sram_bytes", sram)
    g = chain(rng, 16, 16, 8, 64, 8)
    x = rng.integers(-128, 128, (1, 16, 16, 8)).astype(np.int8)
    mem = arch.activations_memory
    _, off, out = _run(g, arch, False, x)
    rp1, on, _ = _run(g, arch, True, x)
    np.testing.assert_array_equal(on.outputs[out], run_golden(g, {"x": x})[0])
    out_bytes, middle = 16 * 16 * 8, 16 * 16 * 64
    assert off.stats.memory_traffic[mem].write_bytes == out_bytes + middle
    assert out_bytes < on.stats.memory_traffic[mem].write_bytes < out_bytes + middle
    assert on.stats.total_cycles < off.stats.total_cycles
    assert rp1.program == _run(g, arch, True, x)[0].program  # deterministic
