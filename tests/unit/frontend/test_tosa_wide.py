"""int16-input MAC layers (the wide accumulator) through the TOSA exporter: CONV2D with an int16
input accumulates into INT48 with an INT48 bias, and the RESCALE after it takes the 16-bit
reduced multiplier (``scale32 = false``); the reference model runs the export bit-exact with the
golden model, and the INT48 constants read back."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import tosa_reference_model

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselFormatError
from tessel.frontend.tosa_export import export_tosa
from tessel.frontend.tosa_import import import_tosa
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import RoundingMode, Tensor, TosaOp, as_bytes, read
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, run_graph
from tessel.isa import fixedpoint as fp
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.quant.lower import lower_qdq

I8, I16 = DType.I8, DType.I16


def _mults(b: GraphBuilder, rng, n: int, typical: float, out_bits: int):
    """Multipliers taking an accumulator of size ``typical`` to about the output's range."""
    reals = rng.uniform(0.5, 2.0, n) * 2.0**out_bits / typical
    q, s = fp.quantize_multipliers(reals)
    return b.constant(q.astype(np.int32), "mult"), b.constant(s.astype(np.int32), "shift")


def wide_graph(seed: int):
    """x int16 NHWC -> 3x3 qconv2d (int16 in, int8 out) ; x -> 1x1 stride-2 qconv2d (int16 in,
    int16 out) -> qlinear over the channels (int16 in, int8 out, int4-range weights)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"wide{seed}")
    c = 48
    x = b.input("x", TensorType((1, 9, 7, c), I16, Layout.NHWC, QuantParams((1e-3,), (0,))))
    w3 = rng.integers(-127, 128, (16, 3, 3, c)).astype(np.int8)
    m, s = _mults(b, rng, 16, np.sqrt(9 * c) * 16000 * 64, 7)
    bias = b.constant(rng.integers(-(2**25), 2**25, 16), "bias")
    conv = b.add(Op.QCONV2D, [x, b.constant(w3, "w3"), bias, m, s], dict(
        stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, layout=Layout.NHWC,
        in_zp=0, out_zp=5, act_min=-128, act_max=127, dtype=I8))
    w1 = rng.integers(-127, 128, (24, 1, 1, c)).astype(np.int8)
    m, s = _mults(b, rng, 24, np.sqrt(c) * 16000 * 64, 15)
    pw = b.add(Op.QCONV2D, [x, b.constant(w1, "w1"), b.constant(
        rng.integers(-(2**22), 2**22, 24), "b1"), m, s], dict(
        stride=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, layout=Layout.NHWC,
        in_zp=0, out_zp=0, act_min=-32768, act_max=32767, dtype=I16))
    wl = rng.integers(-7, 8, (10, 24)).astype(np.int8)
    m, s = _mults(b, rng, 10, np.sqrt(24) * 8000 * 4, 7)
    fc = b.add(Op.QLINEAR, [pw, b.constant(wl, "wl"), b.constant(
        rng.integers(-(2**20), 2**20, 10), "bl"), m, s], dict(
        in_zp=0, out_zp=-3, act_min=-3, act_max=127, dtype=I8))
    x_val = rng.integers(-32768, 32768, (1, 9, 7, c)).astype(np.int16)
    return b.build([conv, fc]), x_val


@pytest.mark.parametrize("seed", range(3))
def test_the_reference_model_runs_the_wide_export_bit_exact_with_the_golden_model(seed):
    graph, x = wide_graph(seed)
    golden = run_graph(graph, [x], kernels=GOLDEN_KERNELS)
    exported = export_tosa(graph)
    ops = [op.op for op in exported.graph.operators]
    assert ops.count(TosaOp.CONV2D) == 3
    rescales = [op for op in exported.graph.operators if op.op is TosaOp.RESCALE]
    assert all(op.attrs["scale32"] is False for op in rescales)
    assert "EXT-INT16" in exported.graph.extensions
    outputs, status = tosa_reference_model.run(exported.to_bytes(), [x])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    for g, r in zip(golden, outputs, strict=True):
        np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)
        assert len(np.unique(g)) > 10  # not a saturated constant


def test_int48_constants_read_back_sign_extended():
    values = np.array([0, 1, -1, 2**47 - 1, -(2**47), 123456789012, -98765432109])
    t = Tensor("b", values.shape, T.INT48, as_bytes(values, T.INT48))
    assert len(t.data) == 6 * values.size
    np.testing.assert_array_equal(t.array(), values)
    graph, _ = wide_graph(0)
    back = read(export_tosa(graph).to_bytes())
    biases = [t for t in back.tensors.values() if t.dtype is T.INT48 and t.data is not None
              and t.shape != (1,)]
    want = sorted(tuple(graph.constant_value(n.inputs[2]).tolist()) for n in graph.nodes
                  if n.op in (Op.QCONV2D, Op.QLINEAR))
    assert sorted(tuple(b.array().tolist()) for b in biases) == want
    with pytest.raises(Exception, match="int48"):
        as_bytes(np.array([2**47]), T.INT48)


def test_the_import_of_the_wide_export_is_the_same_integers():
    """The exported file read back: CONV2D int16 -> INT48 and its scale32 = false RESCALE
    become int16-input qconv2d nodes (the fully connected layer a 1x1 one), whose golden model
    and compiled program on the NPU equal the original graph's golden model."""
    graph, x = wide_graph(1)
    golden = run_graph(graph, [x], kernels=GOLDEN_KERNELS)
    imported = to_nhwc(lower_qdq(import_tosa(export_tosa(graph).to_bytes())))
    convs = [n for n in imported.nodes if n.op is Op.QCONV2D]
    assert len(convs) == 3
    assert all(imported.type_of(n.inputs[0]).dtype is I16 for n in convs)
    assert all(imported.type_of(n.inputs[2]).dtype is DType.I64 for n in convs)
    got = run_graph(imported, [x.astype(np.float32)], kernels=GOLDEN_KERNELS)
    cm = compile_graph(imported, load_target("tnpu-xs"))
    assert len(cm.profile.layers) == 3  # the three int16-input convolutions run on the NPU
    simulated = cm.run(x.astype(np.float32))
    for g, y, z in zip(golden, got, simulated, strict=True):
        np.testing.assert_array_equal(np.asarray(y).reshape(g.shape).astype(g.dtype), g)
        np.testing.assert_array_equal(np.asarray(z).reshape(g.shape).astype(g.dtype), g)


def test_a_16_bit_rescale_of_anything_but_an_int48_accumulator_is_refused():
    graph, _ = wide_graph(0)
    tosa = export_tosa(graph).graph
    ops = [replace(op, attrs={**op.attrs, "rounding_mode": RoundingMode.DOUBLE_ROUND})
           if op.op is TosaOp.RESCALE else op for op in tosa.operators]
    with pytest.raises(TesselFormatError, match="INT48 rescale rounds SINGLE_ROUND"):
        import_tosa(replace(tosa, operators=ops).write())
