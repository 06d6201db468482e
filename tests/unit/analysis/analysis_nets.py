"""Small compiled models for the report tests: two convolutions and a max pool (a layer
without MACs) from an integer graph, compiled in milliseconds."""

from __future__ import annotations

import numpy as np

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.quant import fixedpoint as fp
from tessel.runtime.compiled import CompiledModel

LAYERS = ["c1", "c2", "pool"]


def conv_pool_net(rng: np.random.Generator) -> object:
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
    p = b.add(Op.MAX_POOL2D, [c2], dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
                                        ceil_mode=False, layout=Layout.NHWC), name="pool")
    r = b.add(Op.RESHAPE, [p], dict(shape=(1, 4 * 4 * 32)))
    d = b.add(Op.DEQUANTIZE, [r], dict(scale=0.05, zero_point=3))
    return verify(b.build([d]))


def build(preset: str = "tnpu-s", name: str = "net") -> CompiledModel:
    return compile_graph(conv_pool_net(np.random.default_rng(0)), load_preset(preset), name=name)

