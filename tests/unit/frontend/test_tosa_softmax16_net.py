"""tosa-converter-for-tflite's int16 softmax inside an int8 network: FULLY_CONNECTED (NPU) ->
QUANTIZE int8 -> int16 -> SOFTMAX int16 (host-run `qsoftmax16_tosa`) -> QUANTIZE int16 -> int8
-> FULLY_CONNECTED (NPU). The TOSA reference model running the converter's file, the golden model
of the imported graph and the simulator of the compiled binary agree bit for bit; the softmax runs
on the host between two NPU regions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tflite
import tosa_reference_model
from test_tosa_softmax16 import convert
from tflite_builder import B, Net

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.frontend.tosa_import import tosa_module
from tessel.ir import Op
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.golden import run_golden
from tessel.quant.lower import lower_qdq

I16 = tflite.TensorType.INT16
ROWS, FEATURES, CLASSES, HIDDEN = 16, 64, 10, 128


def net16(seed: int, widen: float) -> bytes:
    """Input [ROWS, FEATURES] -> fc HIDDEN -> int16 (the fc's scale / widen) -> softmax int16 ->
    int8 [0, 1) -> fc CLASSES -> output. `widen` > 1 spends int16 levels on the int8 values;
    < 1 makes the softmax input coarser than the int8 value (QUANTIZE rounds)."""
    net = Net(seed=seed)
    h = net.fc(net.input((ROWS, FEATURES)), HIDDEN)
    q16 = net.b.tensor("h16", h.shape, I16, (float(np.float32(h.scale / widen)),), (0,))
    net.b.op(B.QUANTIZE, [h.index], [q16])
    s16 = net.b.tensor("s16", h.shape, I16, (1 / 32768,), (0,))
    net.b.op(B.SOFTMAX, [q16], [s16], "SoftmaxOptions", Beta=1.0)
    s8 = net._act("s8", h.shape, 1 / 256, -128)
    net.b.op(B.QUANTIZE, [s16], [s8.index])
    net.output(net.fc(s8, CLASSES))
    return net.build()


@pytest.mark.parametrize("seed, widen", [(3, 256.0), (5, 1.0), (7, 0.25)])
def test_an_int16_softmax_between_npu_regions_is_bit_exact(seed, widen, tmp_path: Path):
    out = convert(net16(seed, widen), tmp_path)
    graph = tosa_module(out)[0].qdq_graph
    assert [n.op for n in graph.nodes].count(Op.QSOFTMAX16_TOSA) == 1
    x = ((np.random.default_rng(seed).integers(-128, 128, (ROWS, FEATURES)) + 3)
         * np.float32(0.05)).astype(np.float32)
    ref, status = tosa_reference_model.run(out.read_bytes(), [np.ascontiguousarray(x)])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID
    ref = np.asarray(ref[0]).reshape(ROWS, CLASSES)
    assert len(np.unique(ref)) > ROWS  # the rows differ: the softmax carries the input through
    golden = run_golden(graph, [x])[0]
    np.testing.assert_array_equal(golden, ref)
    cm = compile_graph(to_nhwc(lower_qdq(graph)), load_target("tnpu-xs"))
    assert len(cm.regions) == 2
    assert [n.op for part in cm.host_parts if part is not None for n in part.nodes].count(
        Op.QSOFTMAX16_TOSA) == 1
    np.testing.assert_array_equal(np.asarray(cm.run(x)[0]), golden)
