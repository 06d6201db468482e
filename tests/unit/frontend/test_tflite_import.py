"""int8 TFLite import: each listed operator against LiteRT's reference kernels (integer outputs
equal bit for bit), simulator == golden, the model's own scales kept, clear errors for
unsupported operators and malformed files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import tflite
import torch
from tflite_builder import ACT, B, Net, Q

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselFormatError, TesselUnsupportedOpError
from tessel.frontend.ir_module import QDQModule
from tessel.frontend.tflite_import import import_tflite
from tessel.ir import Op
from tessel.quant.api import quantize

P = tflite.Padding


def litert(model: bytes, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of LiteRT's reference kernels (BUILTIN_REF op resolver)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), xs, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _inputs(net: Net, seed: int) -> list[np.ndarray]:
    """Float inputs that are exactly representable (QUANTIZE is exact under any tie rule)."""
    rng = np.random.default_rng(seed)
    return [(np.float32(q.scale) * (rng.integers(-128, 128, q.shape) - q.zp)).astype(np.float32)
            for q in net.input_q]


@dataclass(frozen=True)
class Result:
    max_lsb: int
    exact: float
    distinct: int


def run_both(net: Net, outs: list[Q], seed: int = 5) -> list[Result]:
    """LiteRT vs Tessel (golden; the compiled binary on the simulator must equal the golden)."""
    model = net.build()
    xs = _inputs(net, seed)
    ref = litert(model, xs)
    qm = quantize(QDQModule(import_tflite(model)), tuple(torch.from_numpy(x) for x in xs))
    golden = qm.run(*xs)
    sim = compile_graph(qm.graph, load_target("tnpu-s")).run(*xs)
    results = []
    for r, g, s, q in zip(ref, golden, sim, outs, strict=True):
        np.testing.assert_array_equal(s, g)
        scale = np.float32(q.scale)
        ours, theirs = np.rint(g / scale).astype(np.int64), np.rint(r / scale).astype(np.int64)
        diff = np.abs(ours - theirs)
        results.append(Result(int(diff.max()), float(np.mean(diff == 0)), len(np.unique(theirs))))
    return results


def _conv(n: Net) -> Q:
    return n.conv(n.input((1, 9, 9, 3)), 8, 3, 2, P.SAME, ACT.RELU6)


def _conv_valid(n: Net) -> Q:
    return n.conv(n.input((1, 8, 8, 4)), 6, 3, 1, P.VALID, ACT.NONE, dilation=2)


def _dwconv(n: Net) -> Q:
    return n.conv(n.input((1, 10, 10, 4)), 2, 3, 2, P.SAME, ACT.RELU, depthwise=True)


def _fc(n: Net) -> Q:
    return n.fc(n.input((1, 40)), 10, ACT.RELU)


def _fc_per_tensor(n: Net) -> Q:
    return n.fc(n.input((3, 2, 16)), 7, per_channel=False)


def _binary(code: int, act: int = ACT.NONE) -> Callable[[Net], Q]:
    def make(n: Net) -> Q:
        return n.binary(code, n.input((1, 6, 6, 8), 0.05, -3), n.input((1, 6, 6, 8), 0.03, 7), act)
    return make


def _pool(code: int) -> Callable[[Net], Q]:
    return lambda n: n.pool(n.input((1, 11, 11, 8), 0.1, 4), code, 3, 2, P.SAME)


def _unary(code: int, scale: float) -> Callable[[Net], Q]:
    return lambda n: n.unary(n.input((1, 32, 32), scale, 3), code)


# (operator, model, exact: equal to LiteRT's outputs; else within 1 LSB)
OPERATORS: list[tuple[str, Callable[[Net], Q], bool]] = [
    ("CONV_2D", _conv, True),
    ("CONV_2D (valid, dilated)", _conv_valid, True),
    ("DEPTHWISE_CONV_2D", _dwconv, True),
    ("FULLY_CONNECTED", _fc, True),
    ("FULLY_CONNECTED (per tensor)", _fc_per_tensor, True),
    ("ADD", _binary(B.ADD), True),
    ("ADD (relu)", _binary(B.ADD, ACT.RELU), True),
    ("SUB", _binary(B.SUB), True),
    ("MUL", _binary(B.MUL), True),
    ("AVERAGE_POOL_2D", _pool(B.AVERAGE_POOL_2D), True),
    ("MAX_POOL_2D", _pool(B.MAX_POOL_2D), True),
    ("MEAN (H, W, keep_dims)", lambda n: n.mean(n.input((1, 7, 9, 16), 0.1, 4), (1, 2)), True),
    ("MEAN (input's parameters)",
     lambda n: n.mean(n.input((1, 7, 9, 16), 0.1, 4), (1, 2), False, same=True), True),
    ("MEAN (H, W)", lambda n: n.mean(n.input((1, 25, 5, 64), 0.1, 4), (1, 2), False), True),
    ("MEAN (one axis, keep_dims)", lambda n: n.mean(n.input((1, 5, 6, 8), 0.1, 4), (2,)), True),
    ("MEAN (rank 3)", lambda n: n.mean(n.input((2, 12, 10), 0.1, 4), (1,), False), True),
    ("RESHAPE", lambda n: n.reshape(n.input((1, 4, 5, 6)), (1, 20, 6)), True),
    ("SOFTMAX", lambda n: n.softmax(n.input((16, 10), 0.1, 2)), True),
    ("CONCATENATION", lambda n: n.concat([n.input((1, 4, 4, 3)), n.input((1, 4, 4, 5))], 3), True),
    ("PAD", lambda n: n.pad(n.input((1, 5, 5, 3)), [(0, 0), (1, 2), (2, 1), (0, 0)]), True),
    ("LOGISTIC", _unary(B.LOGISTIC, 0.06), True),
    ("TANH", _unary(B.TANH, 0.03), True),
    ("HARD_SWISH", _unary(B.HARD_SWISH, 0.04), True),
    ("HARD_SWISH (scale 0.3)", _unary(B.HARD_SWISH, 0.3), True),
    ("HARD_SWISH (scale 0.005)", _unary(B.HARD_SWISH, 0.005), True),
    ("QUANTIZE (int8 -> int8)", lambda n: n.requantize(n.input((1, 8, 8)), 0.031, 9), True),
]


def test_every_operator_against_litert() -> None:
    rows = []
    for k, (name, make, exact) in enumerate(OPERATORS):
        net = Net(seed=k)
        out = make(net)
        net.output(out)
        (res,) = run_both(net, [out], seed=100 + k)
        rows.append((name, res, exact))
    print("\nTFLite operator vs LiteRT reference kernels (int8 outputs):")
    print(f"  {'operator':30s} {'max LSB':>7s} {'exact':>7s} {'levels':>6s}")
    for name, res, _ in rows:
        print(f"  {name:30s} {res.max_lsb:7d} {res.exact:7.4f} {res.distinct:6d}")
    for name, res, exact in rows:
        assert res.distinct > 3, f"{name}: degenerate test output ({res.distinct} levels)"
        assert res.max_lsb <= (0 if exact else 1), f"{name}: {res}"


def test_small_network_against_litert() -> None:
    """A MobileNet-like int8 net chaining the operators (QUANTIZE / DEQUANTIZE at the edges)."""
    n = Net(seed=42)
    x = n.input((1, 16, 16, 3), 0.02, -10)
    y = n.conv(x, 8, 3, 2, P.SAME, ACT.RELU6)
    d = n.conv(y, 1, 3, 1, P.SAME, ACT.RELU6, depthwise=True)
    p = n.conv(d, 8, 1, 1, P.SAME)
    s = n.binary(B.ADD, p, n.conv(y, 8, 1, 1, P.SAME))
    h = n.unary(s, B.HARD_SWISH)
    side = n.pad(n.pool(y, B.MAX_POOL_2D, 2, 2), [(0, 0), (2, 2), (2, 2), (0, 0)])
    c = n.concat([h, n.requantize(side, h.scale, h.zp)], 3)  # TFLite int8 concat: same params
    g = n.mean(c, (1, 2), keep=False)
    logits = n.fc(g, 10)
    prob = n.softmax(logits)
    sig = n.unary(logits, B.LOGISTIC)
    n.output(prob)
    n.output(sig)
    results = run_both(n, [prob, sig])
    print(f"\nsmall network vs LiteRT: {results}")
    assert all(r.max_lsb == 0 for r in results)


def test_model_scales_are_kept() -> None:
    n = Net(seed=3)
    x = n.input((1, 6, 6, 4), 0.037, 11)
    y = n.conv(x, 5, 3, 1, P.SAME, ACT.NONE)
    n.output(y)
    model = n.build()
    qm = quantize(QDQModule(import_tflite(model)), (torch.zeros(1, 6, 6, 4),))
    conv = next(node for node in qm.graph.nodes if node.op is Op.QCONV2D)
    assert conv.type.quant.scale == (y.scale,) and conv.attr("out_zp") == y.zp
    assert conv.attr("in_zp") == x.zp
    tensors = tflite.Model.GetRootAsModel(model, 0).Subgraphs(0)
    w = next(tensors.Tensors(i) for i in range(tensors.TensorsLength()) if tensors.Tensors(i).Name() == b"w")
    w_scales = w.Quantization().ScaleAsNumpy().astype(np.float64)
    mult = qm.graph.constant_value(conv.inputs[3]).astype(np.float64)
    shift = qm.graph.constant_value(conv.inputs[4]).astype(np.float64)
    np.testing.assert_allclose(mult * 2.0 ** (shift - 31), x.scale * w_scales / y.scale, rtol=2e-9)
    bias = qm.graph.constant_value(conv.inputs[2])
    b = next(tensors.Tensors(i) for i in range(tensors.TensorsLength()) if tensors.Tensors(i).Name() == b"b")
    raw = tflite.Model.GetRootAsModel(model, 0).Buffers(b.Buffer()).DataAsNumpy().view(np.int32)
    np.testing.assert_array_equal(bias, raw)


def test_unsupported_operator_is_named() -> None:
    n = Net(seed=1)
    x = n.input((1, 8))
    y = Q(n.b.tensor("exp_out", (1, 8), tflite.TensorType.INT8, (0.1,), (0,)), (1, 8), 0.1, 0)
    n.b.op(B.EXP, [x.index], [y.index])
    n.output(n.unary(y, B.LOGISTIC))
    with pytest.raises(TesselUnsupportedOpError) as err:
        import_tflite(n.build())
    assert "EXP" in str(err.value) and "operator 1" in str(err.value)


def test_malformed_files_are_refused() -> None:
    with pytest.raises(TesselFormatError, match="not a TFLite flatbuffer"):
        import_tflite(b"\x00" * 64)
    n = Net(seed=0)
    n.output(n.input((1, 4)))
    data = bytearray(n.build())
    with pytest.raises(TesselFormatError):
        import_tflite(bytes(data[:40]))
