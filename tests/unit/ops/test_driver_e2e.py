"""Integer graph -> compile_graph -> CompiledModel: host prologue/epilogue + NPU program equal
the golden model bit for bit; the binary reloads identically; same input -> same bytes."""

from __future__ import annotations

import numpy as np

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import fixedpoint as fp
from tessel.quant.golden import run_golden
from tessel.runtime.compiled import load


def two_conv_net(rng, pool: bool = False) -> object:
    b = GraphBuilder("net")
    x = b.input("x", TensorType((1, 16, 16, 8), DType.F32, Layout.NHWC))
    q = b.add(Op.QUANTIZE, [x], dict(scale=0.05, zero_point=3, qmin=-128, qmax=127,
                                     dtype=DType.I8),
              type_=TensorType((1, 16, 16, 8), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))

    def conv(inp, cin, cout, s, name):
        wt = rng.integers(-127, 128, (cout, 3, 3, cin)).astype(np.int8)
        mult, sh = fp.quantize_multipliers(rng.uniform(0.0005, 0.003, cout))
        ops = [b.constant(wt, name + "_w"),
               b.constant(rng.integers(-999, 999, cout).astype(np.int32), name + "_b"),
               b.constant(mult.astype(np.int32), name + "_m"),
               b.constant(sh.astype(np.int32), name + "_s")]
        return b.add(Op.QCONV2D, [inp, *ops], dict(
            stride=(s, s), padding=(1, 1, 1, 1), groups=1, layout=Layout.NHWC, in_zp=3, out_zp=3,
            act_min=3, act_max=127, dtype=DType.I8), name=name)

    c2 = conv(conv(q, 8, 16, 1, "c1"), 16, 32, 2, "c2")
    side = 8
    if pool:  # a layer without MACs, for the report tests
        c2 = b.add(Op.MAX_POOL2D, [c2], dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
                                             ceil_mode=False, layout=Layout.NHWC), name="pool")
        side = 4
    r = b.add(Op.RESHAPE, [c2], dict(shape=(1, side * side * 32)))
    d = b.add(Op.DEQUANTIZE, [r], dict(scale=0.05, zero_point=3))
    return verify(b.build([d]))


def test_compiled_model_equals_golden_and_reloads(tmp_path):
    rng = np.random.default_rng(0)
    g = two_conv_net(rng)
    cm = compile_graph(g, load_preset("tnpu-s"), name="net")
    x = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
    gold = run_golden(g, [x])[0]
    np.testing.assert_array_equal(cm.run(x)[0], gold)
    path = tmp_path / "net.tsl"
    cm.save(path)
    again = load(path)
    np.testing.assert_array_equal(again.run(x)[0], gold)
    assert again.binary == cm.binary
    prof = cm.profile
    assert [lay.name for lay in prof.layers] == ["c1", "c2"]
    assert prof.cycles >= sum(lay.cycles for lay in prof.layers) * 0.9
    assert 0 < prof.mac_utilisation <= 1
    assert prof.macs == 16 * 16 * 16 * 8 * 9 + 8 * 8 * 32 * 16 * 9


def test_compile_is_deterministic():
    g = two_conv_net(np.random.default_rng(1))
    a = compile_graph(g, load_preset("u55-256"), name="net").binary
    b = compile_graph(g, load_preset("u55-256"), name="net").binary
    assert a == b
