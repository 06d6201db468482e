"""Integer graphs whose linear layers and convs take int16 activations (symmetric, int64 bias;
int8 or int4 weights) compiled for the NPU: MATMUL / CONV in_type I16 into the wide accumulator
and REQUANT acc_width WIDE. The simulator equals the golden model bit for bit, the C runtime equals the
simulator, each step's estimate equals its simulated cycles, and a tile costs
``matrix.int16_pass_factor`` times the int8 one's compute."""

from __future__ import annotations

import numpy as np
import pytest

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import Opcode
from tessel.isa import fixedpoint as fp
from tessel.isa.fields import AccWidth, InType
from tessel.quant.golden import run_golden
from tessel.runtime.cengine import available

PRESETS = ("tnpu-s", "tnpu-xs", "u55-256")


def linear_graph(rng: np.random.Generator, m: int, k: int, n: int, *, wbits: int = 8,
                 out: DType = DType.I8, x_dtype: DType = DType.I16):
    """x [m, k] (int16, or int8) -> qlinear (int8 / int4 weights, per-channel requant)."""
    b = GraphBuilder("lin16")
    zp = 0 if x_dtype is DType.I16 else 3
    x = b.input("x", TensorType((m, k), x_dtype, quant=QuantParams((0.001,), (zp,))))
    lo = -8 if wbits == 4 else -127
    w = rng.integers(lo, -lo, (n, k)).astype(np.int8)
    wide = x_dtype is DType.I16
    # int16 x int8 sums reach ~2^22 * k: scales that bring them back to the output's range
    scale = (1.0 / (32768 * 128 * np.sqrt(k))) if wide else 1.0 / (128 * 128 * np.sqrt(k))
    scale *= 40 if out is DType.I8 else 10000
    mult, sh = fp.quantize_multipliers(rng.uniform(0.5, 2.0, n) * scale)
    span = int(32768 * 64 * np.sqrt(k)) if wide else 999  # about the sums' own spread
    bias = rng.integers(-span, span, n)
    names = [b.constant(w, "w", type_=TensorType(w.shape, DType.I4)) if wbits == 4
             else b.constant(w, "w"),
             b.constant(bias.astype(np.int64 if wide else np.int32), "b"),
             b.constant(mult.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    lim = (-128, 127) if out is DType.I8 else (-32768, 32767)
    y = b.add(Op.QLINEAR, [x, *names], dict(in_zp=zp, out_zp=-3 if out is DType.I8 else 0,
                                            act_min=lim[0], act_max=lim[1], dtype=out))
    return verify(b.build([y]))


def _x(rng: np.random.Generator, g) -> np.ndarray:
    t = g.type_of("x")
    info = np.iinfo(t.dtype.numpy)
    x = rng.integers(info.min, int(info.max) + 1, t.shape)
    ends = rng.random(t.shape) < 0.2
    return np.where(ends, rng.choice([info.min, info.max], t.shape), x).astype(t.dtype.numpy)


CASES = [  # (m, k, n, wbits, out)
    (1, 1, 1, 8, DType.I8),
    (7, 33, 5, 8, DType.I8),
    (16, 64, 48, 4, DType.I8),
    (9, 200, 37, 8, DType.I16),
    (5, 3000, 20, 4, DType.I16),  # a large reduction: sums far past int32
    (130, 96, 33, 8, DType.I8),
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", CASES)
def test_int16_linear_is_bit_exact_on_the_simulator_and_the_c_runtime(preset, case):
    m, k, n, wbits, out = case
    rng = np.random.default_rng(m * 7 + k)
    g = linear_graph(rng, m, k, n, wbits=wbits, out=out)
    cm = compile_graph(g, load_preset(preset), name="lin16")
    assert not cm.program.metadata.get("host_ops"), cm.program.metadata.get("host_ops")
    ins = [i for q in cm.program.streams.values() for i in q]
    assert {i.in_type for i in ins if i.opcode is Opcode.MATMUL} == {InType.I16}
    assert {i.acc_width for i in ins if i.opcode is Opcode.REQUANT} == {AccWidth.WIDE}
    x = _x(rng, g)
    want = run_golden(g, [x])[0]
    got = cm.run(x)[0]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > min(3, want.size - 1), "a degenerate test: all saturated"
    if available() is None:
        np.testing.assert_array_equal(cm.run(x, engine="c")[0], got)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", [(16, 64, 48, 8), (64, 700, 40, 4), (300, 128, 24, 8)])
def test_the_estimate_equals_the_simulated_cycles(preset, case):
    m, k, n, wbits = case
    arch = load_preset(preset)
    g = linear_graph(np.random.default_rng(k), m, k, n, wbits=wbits)
    node = g.nodes[-1]
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
    assert_estimates_exact(rp, arch)


def test_int16_costs_more_than_int8_on_the_same_layer():
    """The same linear layer on tnpu-s, int16 vs int8 input: more matrix cycles (the half-rate
    passes), twice the input bytes; the figure the report quotes."""
    from tessel.runtime.profile import build_profile

    arch = load_preset("tnpu-s")
    cycles = {}
    for dt in (DType.I8, DType.I16):
        g = linear_graph(np.random.default_rng(0), 128, 384, 384, x_dtype=dt)
        node = g.nodes[-1]
        rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
        cycles[dt] = build_profile(rp.program, arch).layers[0].cycles
    assert cycles[DType.I8] < cycles[DType.I16] <= 2 * cycles[DType.I8] + 1000


def conv_graph(rng: np.random.Generator, *, h: int, w: int, c: int, cout: int, k: int | tuple,
               s: int = 1, p: int = 0, groups: int = 1, wbits: int = 8, out: DType = DType.I8,
               n: int = 1):
    """x [n, h, w, c] int16 NHWC -> qconv2d (int8 / int4 weights, int64 bias)."""
    kh, kw = (k, k) if isinstance(k, int) else k
    b = GraphBuilder("conv16")
    x = b.input("x", TensorType((n, h, w, c), DType.I16, Layout.NHWC,
                                QuantParams((0.001,), (0,))))
    lo = -8 if wbits == 4 else -127
    wt = rng.integers(lo, -lo, (cout, kh, kw, c // groups)).astype(np.int8)
    kk = kh * kw * c // groups
    scale = 1.0 / (32768 * 128 * np.sqrt(kk)) * (40 if out is DType.I8 else 10000)
    mult, sh = fp.quantize_multipliers(rng.uniform(0.5, 2.0, cout) * scale)
    span = int(32768 * 64 * np.sqrt(kk))
    names = [b.constant(wt, "w", type_=TensorType(wt.shape, DType.I4)) if wbits == 4
             else b.constant(wt, "w"),
             b.constant(rng.integers(-span, span, cout).astype(np.int64), "b"),
             b.constant(mult.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    lim = (-128, 127) if out is DType.I8 else (-32768, 32767)
    y = b.add(Op.QCONV2D, [x, *names], dict(
        stride=(s, s), padding=(p, p, p, p), dilation=(1, 1), groups=groups, layout=Layout.NHWC,
        in_zp=0, out_zp=-3 if out is DType.I8 else 0, act_min=lim[0], act_max=lim[1], dtype=out))
    return verify(b.build([y]))


CONV_CASES = [
    dict(h=5, w=7, c=3, cout=5, k=1),  # 1x1, odd sizes
    dict(h=9, w=8, c=8, cout=24, k=3, p=1),  # 3x3
    dict(h=11, w=9, c=6, cout=10, k=3, s=2, p=1, wbits=4),  # strided, int4
    dict(h=8, w=8, c=8, cout=12, k=3, p=1, groups=2, out=DType.I16),  # grouped, int16 out
    dict(h=6, w=6, c=300, cout=20, k=3, p=1, wbits=4, out=DType.I16),  # K = 2700
    dict(h=6, w=23, c=4, cout=8, k=(1, 17), p=0, n=2),  # a kernel split into blocks, batch 2
    dict(h=28, w=28, c=32, cout=48, k=3, s=1, p=1),  # several tiles and chunks
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("kw", CONV_CASES, ids=range(len(CONV_CASES)))
def test_int16_conv_is_bit_exact_and_estimated_exactly(preset, kw):
    rng = np.random.default_rng(len(str(kw)))
    arch = load_preset(preset)
    g = conv_graph(rng, **kw)
    cm = compile_graph(g, arch, name="conv16")
    assert not cm.program.metadata.get("host_ops"), cm.program.metadata.get("host_ops")
    ins = [i for q in cm.program.streams.values() for i in q]
    assert {i.in_type for i in ins if i.opcode is Opcode.CONV} == {InType.I16}
    assert {i.acc_width for i in ins if i.opcode is Opcode.REQUANT} == {AccWidth.WIDE}
    x = _x(rng, g)
    want = run_golden(g, [x])[0]
    got = cm.run(x)[0]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3, "a degenerate test: all saturated"
    if available() is None:
        np.testing.assert_array_equal(cm.run(x, engine="c")[0], got)
    node = g.nodes[-1]
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
    assert_estimates_exact(rp, arch)


def test_an_int16_depthwise_conv_and_an_int16_qmatmul_stay_on_the_host_with_a_reason():
    """DWCONV takes int8 input, and attention's two activations stay int8: an int16 depthwise
    conv and an int16 qmatmul fall back to the host, each with its reason."""
    from tessel.ops.registry import npu_refusal

    rng = np.random.default_rng(0)
    g = conv_graph(rng, h=4, w=4, c=6, cout=6, k=3, p=1, groups=6)
    why = npu_refusal(g.nodes[-1], g)
    assert why is not None and "depthwise" in why and "int16" in why
    cm = compile_graph(g, load_preset("tnpu-s"), name="dw16")
    x = _x(rng, g)
    np.testing.assert_array_equal(cm.run(x)[0], run_golden(g, [x])[0])
    b = GraphBuilder("q")
    a = b.input("a", TensorType((4, 8), DType.I16, quant=QuantParams((0.01,), (0,))))
    c = b.input("c", TensorType((8, 4), DType.I8, quant=QuantParams((0.01,), (0,))))
    y = b.add(Op.QMATMUL, [a, c], dict(a_zp=0, b_zp=0, multiplier=1 << 30, shift=-8, out_zp=0,
                                       act_min=-128, act_max=127, dtype=DType.I8))
    g = verify(b.build([y]))
    why = npu_refusal(g.nodes[-1], g)
    assert why is not None and "int16" in why
