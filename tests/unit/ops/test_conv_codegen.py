"""qconv2d -> CONV/DWCONV + REQUANT programs: simulated output equals an independent int64
reference bit for bit, for every conv shape class; the estimate equals the simulated cycles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import fixedpoint as fp
from tessel.sim import simulate


def conv_graph(rng, h=14, w=14, c=8, cout=24, k=3, s=1, p=1, groups=1, d=1, relu=False):
    b = GraphBuilder("t")
    x = b.input("x", TensorType((1, h, w, c), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    wt = rng.integers(-127, 128, (cout, k, k, c // groups)).astype(np.int8)
    mult, sh = fp.quantize_multipliers(rng.uniform(0.0005, 0.003, cout))
    names = [b.constant(wt, "w"), b.constant(rng.integers(-999, 999, cout).astype(np.int32), "b"),
             b.constant(mult.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    y = b.add(Op.QCONV2D, [x, *names], dict(
        stride=(s, s), padding=(p, p, p, p), dilation=(d, d), groups=groups, layout=Layout.NHWC,
        in_zp=3, out_zp=-5, act_min=-5 if relu else -128, act_max=127, dtype=DType.I8))
    return verify(b.build([y]))


def reference(g, x):
    n = g.nodes[-1]
    a = n.attr_map
    w, bias, m, s = (g.constant_value(i) for i in n.inputs[1:])
    xt = torch.tensor(x.astype(np.float64) - a["in_zp"]).permute(0, 3, 1, 2)
    pt, pl, pb, pr = a["padding"]
    xt = torch.nn.functional.pad(xt, (pl, pr, pt, pb))
    acc = torch.nn.functional.conv2d(xt, torch.tensor(w.astype(np.float64)).permute(0, 3, 1, 2),
                                     stride=a["stride"], dilation=a["dilation"],
                                     groups=a["groups"])
    acc = acc.permute(0, 2, 3, 1).numpy().astype(np.int64)
    return fp.requantize(acc, bias, m, s, a["out_zp"], a["act_min"], a["act_max"], axis=-1,
                         out_dtype=np.int8)


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256", "tnpu-xs"])
@pytest.mark.parametrize("kw", [
    {}, {"s": 2}, {"groups": 8, "c": 8, "cout": 8}, {"groups": 2, "c": 8, "cout": 24},
    {"k": 1, "p": 0, "c": 32, "cout": 40, "relu": True}, {"d": 2, "p": 2},
    {"h": 28, "w": 28, "c": 64, "cout": 96, "s": 2}, {"k": 7, "p": 3, "s": 2, "c": 3, "cout": 16},
    # kernels beyond CONV's 15 x 15 split into accumulating blocks (ViT's patch embedding)
    {"h": 64, "w": 64, "k": 16, "s": 16, "p": 0, "c": 3, "cout": 32},
    {"h": 23, "w": 21, "k": 17, "s": 3, "p": 8, "c": 4, "cout": 8},
    {"h": 40, "w": 38, "k": 18, "s": 18, "p": 0, "c": 5, "cout": 16},
])
def test_conv_bit_exact_and_estimate_exact(preset, kw):
    rng = np.random.default_rng(len(str(kw)))
    arch = load_preset(preset)
    g = conv_graph(rng, **kw)
    node = g.nodes[-1]
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
    x = rng.integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    res = simulate(rp.program, arch, {"x": x})
    np.testing.assert_array_equal(res.outputs[node.name], reference(g, x))
    assert_estimates_exact(rp, arch)


@pytest.mark.parametrize("wide", [True, False])
def test_a_kernel_block_reading_only_padding_adds_nothing(wide):
    """16 taps over a 1-pixel input padded 7 before and 8 after: the kernel splits into two
    blocks of 8 (past the 15-tap field) and the second reads only the padding past the
    input's end: it has no CONV (an empty one cannot be encoded); bit-exact with the golden
    model, on the C NPU model too."""
    from tessel.driver import compile_graph
    from tessel.quant.golden import run_golden
    from tessel.runtime.cengine import available

    rng = np.random.default_rng(3)
    shape, kernel = ((2, 1, 1, 16), (1, 16)) if wide else ((2, 1, 1, 16), (16, 1))
    pad = (0, 7, 0, 8) if wide else (7, 0, 8, 0)
    b = GraphBuilder("pad_only_block")
    x = b.input("x", TensorType(shape, DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    wt = rng.integers(-127, 128, (8, *kernel, 16)).astype(np.int8)
    mult, sh = fp.quantize_multipliers(rng.uniform(0.0005, 0.003, 8))
    y = b.add(Op.QCONV2D, [x, b.constant(wt, "w"), b.constant(np.arange(8, dtype=np.int32), "b"),
                           b.constant(mult.astype(np.int32), "m"),
                           b.constant(sh.astype(np.int32), "s")],
              dict(stride=(1, 1), padding=pad, dilation=(1, 1), groups=1, layout=Layout.NHWC,
                   in_zp=3, out_zp=-5, act_min=-128, act_max=127, dtype=DType.I8))
    g = verify(b.build([y]))
    cm = compile_graph(g, load_preset("tnpu-s"), name="pad_only_block")
    assert not cm.program.metadata.get("host_ops")
    xs = rng.integers(-128, 128, shape, np.int8)
    want = run_golden(g, [xs])[0]
    np.testing.assert_array_equal(cm.run(xs)[0], want)
    if available() is None:
        np.testing.assert_array_equal(cm.run(xs, engine="c")[0], want)
