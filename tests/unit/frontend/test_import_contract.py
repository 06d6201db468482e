"""The importers' error contract: crafted ONNX and TFLite files that used to raise plain Python
exceptions (or allocate terabytes) give one Tessel error naming the node, the field and what is
wrong, before anything large is allocated."""

from __future__ import annotations

import resource

import numpy as np
import pytest
import tflite
from onnx import TensorProto, helper, numpy_helper
from tflite_builder import Net

from tessel.errors import TesselError, TesselFormatError
from tessel.frontend.contract import MAX_IMPORT_ELEMENTS
from tessel.frontend.onnx_import import import_onnx, onnx_module
from tessel.frontend.tflite_import import import_tflite, tflite_module


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                             ).SerializeToString()


def _vi(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _relu(shape, dtype=TensorProto.FLOAT) -> bytes:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", shape, dtype)],
                  [_vi("y", shape, dtype)])


CASES = {
    # a graph input of ~105 TB: refused before the example inputs are drawn
    "huge input": (lambda: _relu([1 << 20, 1 << 20, 1 << 5, 1 << 5]), "ONNX input 'x'.*elements"),
    "negative input dim": (lambda: _relu([1, -4]), "ONNX input 'x': negative dimension"),
    # an int64 input (its example input is made with numpy, not a torch dtype lookup)
    "MaxPool without kernel_shape": (lambda: _model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="pool")], [_vi("x", [1, 2, 4, 4])],
        [_vi("y", None)]), "ONNX node 'pool' \\(MaxPool\\).*kernel_shape"),
    "Conv pads too short": (lambda: _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1])],
        [_vi("x", [1, 2, 4, 4])], [_vi("y", None)],
        [numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")]),
        "ONNX node 'conv' \\(Conv\\): malformed"),
    "ConstantOfShape of 4 TiB": (lambda: _model(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos"),
         helper.make_node("Add", ["x", "c"], ["y"], name="add")], [_vi("x", [1])],
        [_vi("y", None)], [numpy_helper.from_array(np.array([1 << 20, 1 << 20, 1 << 10],
                                                            np.int64), "s")]),
        "ConstantOfShape 'cos' input 'shape'.*elements"),
    "NaN quantisation scale": (lambda: _qdq(float("nan")), "initializer 's' holds NaN"),
    "negative quantisation scale": (lambda: _qdq(-0.5), "QuantizeLinear 'q' input 'scale'"),
    "zero quantisation scale": (lambda: _qdq(0.0), "QuantizeLinear 'q' input 'scale'"),
    "Unsqueeze with 0-d axes": (lambda: _model(
        [helper.make_node("Unsqueeze", ["x", "a"], ["y"], name="unsq")], [_vi("x", [2, 3])],
        [_vi("y", None)], [numpy_helper.from_array(np.array(7, np.int64), "a")]),
        "ONNX node 'unsq' \\(Unsqueeze\\)"),
    "unknown element type": (lambda: _relu([1, 4], 99), "element type code 99"),
}


def _qdq(scale: float) -> bytes:
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
    return _model(nodes, [_vi("x", [1, 4])], [_vi("y", [1, 4])], inits)


@pytest.mark.parametrize("case", sorted(CASES))
def test_crafted_onnx_gives_one_tessel_error(case: str) -> None:
    make, match = CASES[case]
    before = _peak_mib()
    with pytest.raises(TesselError, match=match) as err:
        onnx_module(make())
    assert "\n" not in str(err.value)
    assert _peak_mib() - before < 256, "the refusal allocated"


def test_integer_inputs_get_integer_example_inputs() -> None:
    """An int64 graph input (its example input used to look up a torch dtype by numpy name)."""
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=TensorProto.FLOAT)],
                   [_vi("x", [2, 3], TensorProto.INT64)], [_vi("y", [2, 3])])
    _, (x,) = onnx_module(model)
    assert x.dtype.is_floating_point is False and tuple(x.shape) == (2, 3)


def test_bytes_that_fail_onnx_validation_are_a_format_error() -> None:
    model = _model([helper.make_node("Relu", ["x", "x", "x"], ["y"], name="three")],
                   [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    with pytest.raises(TesselFormatError, match="ONNX node 'three' \\(Relu\\)"):
        import_onnx(model)


def test_bound_is_a_tensor_of_a_gibibyte_or_less() -> None:
    assert MAX_IMPORT_ELEMENTS * 4 <= 1 << 30


def _tflite_with(mutate) -> bytes:
    n = Net(seed=0)
    x = n.input((1, 4, 4, 2))
    n.output(n.pool(x, tflite.BuiltinOperator.MAX_POOL_2D, 2, 2))
    mutate(n)
    return n.build()


def _set_scale(n: Net, value: float) -> None:
    n.b.tensors[1].scales = (value,)


def _set_stride(n: Net, value: int) -> None:
    code, ins, outs, options, fields = n.b.ops[1]
    n.b.ops[1] = (code, ins, outs, options, fields | {"StrideW": value, "StrideH": value,
                                                      "Padding": tflite.Padding.SAME})


def _set_shape(n: Net, shape) -> None:
    n.b.tensors[0].shape = shape
    n.b.tensors[1].shape = shape


TFLITE_CASES = {
    "NaN scale": (lambda n: _set_scale(n, float("nan")), "field 'quantization.scale'"),
    "zero scale": (lambda n: _set_scale(n, 0.0), "field 'quantization.scale'"),
    "zero stride": (lambda n: _set_stride(n, 0), "TFLite operator 1 \\(MAX_POOL_2D\\).*stride 0"),
    "huge input": (lambda n: _set_shape(n, (1, 1 << 30, 8, 3)), "field 'shape'.*elements"),
    "negative dim": (lambda n: _set_shape(n, (1, -4, 4, 2)), "negative dimension"),
}


@pytest.mark.parametrize("case", sorted(TFLITE_CASES))
def test_crafted_tflite_gives_one_tessel_error(case: str) -> None:
    mutate, match = TFLITE_CASES[case]
    before = _peak_mib()
    with pytest.raises(TesselError, match=match) as err:
        tflite_module(_tflite_with(mutate))
    assert "\n" not in str(err.value)
    assert _peak_mib() - before < 256


def test_tflite_operator_with_the_wrong_options_table_is_named() -> None:
    """A SOFTMAX whose options are a Conv2DOptions table (AttributeError before)."""
    n = Net(seed=0)
    x = n.input((1, 8))
    n.output(n.softmax(x))
    code, ins, outs, _, _ = n.b.ops[1]
    n.b.ops[1] = (code, ins, outs, "Conv2DOptions", {"StrideW": 1})
    with pytest.raises(TesselFormatError, match="TFLite operator 1 \\(SOFTMAX\\): malformed"):
        import_tflite(n.build())


def test_tflite_tensor_index_out_of_range_is_named() -> None:
    n = Net(seed=0)
    x = n.input((1, 8))
    n.output(x)
    code, ins, outs, opts, fields = n.b.ops[1]
    n.b.ops[1] = (code, [99], outs, opts, fields)
    with pytest.raises(TesselFormatError, match="tensor index 99 is out of range"):
        import_tflite(n.build())




def test_nan_weights_and_nan_calibration_data_are_refused() -> None:
    """NaN weights reached torchao's observers as an AssertionError; now the importer names the
    initializer, and the quantiser the calibration sample."""
    import onnx
    import torch
    from onnx_helpers import helper_cnn

    import tessel

    model = onnx.load_from_string(helper_cnn())
    module, (x,) = onnx_module(model.SerializeToString())
    bad = x.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(TesselError, match="calibration sample 1, input 0 holds NaN"):
        tessel.quantize(module, (x,), [(x,), (bad,)])
    with pytest.raises(TesselError, match="calibration sample 0.*infinite"):
        tessel.quantize(module, (x,), [(torch.full_like(x, float("inf")),)])
    w1 = next(i for i in model.graph.initializer if i.name == "w1")
    array = numpy_helper.to_array(w1).copy()
    array[0, 0, 0, 0] = np.nan
    w1.CopyFrom(numpy_helper.from_array(array, "w1"))
    with pytest.raises(TesselFormatError, match="ONNX initializer 'w1' holds NaN"):
        onnx_module(model.SerializeToString())


def test_long_chain_imports_in_seconds() -> None:
    """A 3,000-node ReLU chain: the import is linear in the nodes (about 1 s on a loaded
    2-core machine); the bound leaves room for a slow machine, not for a quadratic walk."""
    import time

    n = 3000
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu{i}")
             for i in range(n)]
    model = _model(nodes, [_vi("t0", [1, 8])], [_vi(f"t{n}", [1, 8])])
    start = time.process_time()
    graph = import_onnx(model)
    assert len(graph.nodes) == n
    assert time.process_time() - start < 20
