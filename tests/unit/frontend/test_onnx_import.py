"""ONNX import: float import vs onnxruntime, compile bit-exact vs golden, QDQ scales kept,
clear errors for unsupported ops, old opsets and unreadable files."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx_helpers import QDQ_SCALES, export_zoo, helper_cnn, helper_qdq, ort_run

import tessel
from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselConfigError, TesselFormatError, TesselUnsupportedOpError
from tessel.frontend.ir_module import IRModule, QDQModule
from tessel.frontend.onnx_import import import_onnx, onnx_module
from tessel.ir import Op, run_graph
from tessel.quant.api import QuantizedModel


def _float_close(y: np.ndarray, ref: np.ndarray) -> None:
    """The float import equals onnxruntime within 1e-4 of the output range."""
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))


def _compile_bit_exact(model: bytes, name: str) -> tuple[QuantizedModel, np.ndarray]:
    module, example = onnx_module(model, name=name)
    qm = tessel.quantize(module, example)
    cm = compile_graph(qm.graph, load_target("tnpu-s"))  # what tessel.compile does after quantize
    golden = qm.run(*example)
    sim = cm.run(*example)
    for g, s in zip(golden, sim, strict=True):
        np.testing.assert_array_equal(s, g)
    return qm, golden[0]


@pytest.mark.parametrize("name", ["ds_cnn", "digits_cnn"])
def test_zoo_export_imports_and_compiles_bit_exact(name: str) -> None:
    model, inputs = export_zoo(name)
    graph = import_onnx(model, name=name)
    x = inputs[0].numpy()
    _float_close(run_graph(graph, [x])[0], ort_run(model, x)[0])
    qm, _ = _compile_bit_exact(model, name)
    assert not qm.host_ops
    assert any(n.op is Op.QCONV2D for n in qm.graph.nodes)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_big_zoo_export_compiles_bit_exact(name: str) -> None:
    model, inputs = export_zoo(name)
    graph = import_onnx(model, name=name)
    x = inputs[0].numpy()
    _float_close(run_graph(graph, [x])[0], ort_run(model, x)[0])
    qm, _ = _compile_bit_exact(model, name)
    assert not qm.host_ops


def test_helper_built_model_matches_onnxruntime_and_compiles() -> None:
    model = helper_cnn()
    graph = import_onnx(model)
    x = np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)
    _float_close(run_graph(graph, [x])[0], ort_run(model, x)[0])
    module, _ = onnx_module(model)
    assert isinstance(module, IRModule)
    with torch.no_grad():
        _float_close(module(torch.from_numpy(x)).numpy(), ort_run(model, x)[0])
    qm, _ = _compile_bit_exact(model, "helper_cnn")
    ops = {n.op for n in qm.graph.nodes}
    assert {Op.QCONV2D, Op.QADD, Op.LUT, Op.QSOFTMAX, Op.QLINEAR} <= ops
    # locations are the ONNX node names
    assert any("stem_conv" in str(n.loc) for n in qm.graph.nodes if n.op is Op.QCONV2D)


def test_qdq_model_keeps_its_scales_and_matches_onnxruntime() -> None:
    model = helper_qdq()
    module, example = onnx_module(model)
    assert isinstance(module, QDQModule)
    qm, _ = _compile_bit_exact(model, "helper_qdq")
    by_op = {n.op: n for n in qm.graph.nodes}
    f32 = lambda v: float(np.float32(v))  # noqa: E731  (ONNX scales are float32)
    assert by_op[Op.QUANTIZE].type.quant.scale == (f32(QDQ_SCALES["x"][0]),)
    assert by_op[Op.QUANTIZE].type.quant.zero_point == (QDQ_SCALES["x"][1],)
    assert by_op[Op.QCONV2D].type.quant.scale == (f32(QDQ_SCALES["y"][0]),)
    assert by_op[Op.QCONV2D].attr("out_zp") == QDQ_SCALES["y"][1]
    assert by_op[Op.QADD].type.quant.scale == (f32(QDQ_SCALES["out"][0]),)
    assert by_op[Op.QADD].attr("out_zp") == QDQ_SCALES["out"][1]
    weights = onnx.load_from_string(model).graph.initializer
    w_scales = next(onnx.numpy_helper.to_array(t) for t in weights if t.name == "w_s")
    mult = qm.graph.constant_value(by_op[Op.QCONV2D].inputs[3])
    shift = qm.graph.constant_value(by_op[Op.QCONV2D].inputs[4])
    real = mult.astype(np.float64) * 2.0 ** (shift.astype(np.float64) - 31)
    expect = f32(QDQ_SCALES["x"][0]) * w_scales.astype(np.float64) / f32(QDQ_SCALES["y"][0])
    np.testing.assert_allclose(real, expect, rtol=2e-9)
    # onnxruntime requantises in float, Tessel in fixed point: at most 1 LSB apart
    x = np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32)
    s_o, zp_o = QDQ_SCALES["out"]
    ours = np.rint(qm.run(x)[0] / np.float32(s_o)).astype(np.int64)
    ref = np.rint(ort_run(model, x)[0] / np.float32(s_o)).astype(np.int64)
    diff = np.abs(ours - ref)
    print(f"QDQ vs onnxruntime: max {diff.max()} LSB, {np.mean(diff == 0):.3f} exact")
    assert diff.max() <= 1


def _single_node_model(node: onnx.NodeProto, opset: int = 17) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="first_relu"), node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def test_unsupported_op_names_the_onnx_node() -> None:
    model = _single_node_model(helper.make_node("Erf", ["r"], ["y"], name="my_erf_node"))
    with pytest.raises(TesselUnsupportedOpError) as err:
        import_onnx(model)
    assert "Erf" in str(err.value) and "my_erf_node" in str(err.value)


def test_old_opset_and_bad_files_are_refused_clearly(tmp_path) -> None:
    with pytest.raises(TesselConfigError, match="opset 11"):
        import_onnx(_single_node_model(helper.make_node("Relu", ["r"], ["y"]), opset=11))
    with pytest.raises(TesselFormatError, match="not a readable ONNX model"):
        import_onnx(b"\x08\x07garbage that is not protobuf\xff\xff")
    with pytest.raises(TesselConfigError, match="not found"):
        import_onnx(tmp_path / "missing.onnx")


def test_model_files_resolve_by_suffix(tmp_path) -> None:
    """`model.onnx` / `model.tflite` as a MODEL argument (models.resolve, used by the CLI)."""
    from tflite_builder import ACT, Net

    from tessel.models import resolve

    (tmp_path / "cnn.onnx").write_bytes(helper_cnn())
    n = Net(seed=1)
    n.output(n.conv(n.input((1, 6, 6, 3)), 4, 3, 1, 0, ACT.RELU))
    (tmp_path / "net.tflite").write_bytes(n.build())
    for file, kind in (("cnn.onnx", IRModule), ("net.tflite", QDQModule)):
        spec = resolve(str(tmp_path / file))
        model, inputs = spec.factory()
        assert isinstance(model, kind)
        assert len(spec.calibration_data(3)) == 3
        qm = tessel.quantize(model, inputs, calibration_data=spec.calibration_data(2))
        assert qm.run(*inputs)[0].shape == tuple(model(*inputs).shape)
    with pytest.raises(TesselConfigError, match="not found"):
        resolve(str(tmp_path / "missing.tflite"))
