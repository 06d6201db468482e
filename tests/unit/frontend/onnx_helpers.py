"""ONNX test models: zoo models exported by torch, and models built with onnx.helper."""

from __future__ import annotations

import io

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from tessel.models import load


def export_zoo(name: str) -> tuple[bytes, tuple[torch.Tensor, ...]]:
    """A zoo model exported with torch.onnx.export (legacy TorchScript exporter, opset 17)."""
    model, inputs = load(name)
    f = io.BytesIO()
    torch.onnx.export(model.eval(), inputs, f, dynamo=False, opset_version=17)
    return f.getvalue(), inputs


def ort_run(model: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options)
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs, strict=True)))


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def helper_cnn(opset: int = 17) -> bytes:
    """A small CNN written with onnx.helper: Conv/Clip/MaxPool, a residual Add with a
    HardSwish branch, Concat, GlobalAveragePool, Flatten, Gemm, Softmax."""
    rng = np.random.default_rng(7)
    f32 = np.float32
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(f32)),
        _init("b1", rng.normal(0, .1, 8).astype(f32)),
        _init("w2", rng.normal(0, 0.2, (8, 8, 3, 3)).astype(f32)),
        _init("b2", rng.normal(0, .1, 8).astype(f32)),
        _init("lo", np.array(0.0, f32)), _init("hi", np.array(6.0, f32)),
        _init("wfc", rng.normal(0, 0.2, (10, 16)).astype(f32)),
        _init("bfc", rng.normal(0, .1, 10).astype(f32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="stem_conv", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"], name="stem_relu6"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="branch_conv", auto_pad="SAME_UPPER"),
        helper.make_node("HardSwish", ["c2"], ["h2"], name="branch_hswish"),
        helper.make_node("Add", ["p1", "h2"], ["s"], name="residual_add"),
        helper.make_node("Concat", ["s", "p1"], ["cat"], name="concat", axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "wfc", "bfc"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "helper_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


QDQ_SCALES = {"x": (0.02, -3), "y": (0.05, -128), "out": (0.04, 5)}


def helper_qdq() -> bytes:
    """A QDQ model written with onnx.helper: Q/DQ input, Conv with a per-channel int8 weight
    and int32 bias, Relu, Q/DQ, Add of two quantised values, Q/DQ output."""
    rng = np.random.default_rng(3)
    s_x, zp_x = QDQ_SCALES["x"]
    s_y, zp_y = QDQ_SCALES["y"]
    s_o, zp_o = QDQ_SCALES["out"]
    w_scales = rng.uniform(0.002, 0.01, 4).astype(np.float32)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    bias = rng.integers(-2000, 2000, 4).astype(np.int32)
    b_scales = (np.float32(s_x) * w_scales).astype(np.float32)
    i8 = np.int8
    inits = [
        _init("s_x", np.array(s_x, np.float32)), _init("zp_x", np.array(zp_x, i8)),
        _init("s_y", np.array(s_y, np.float32)), _init("zp_y", np.array(zp_y, i8)),
        _init("s_o", np.array(s_o, np.float32)), _init("zp_o", np.array(zp_o, i8)),
        _init("w_q", w), _init("w_s", w_scales), _init("w_zp", np.zeros(4, i8)),
        _init("b_q", bias), _init("b_s", b_scales), _init("b_zp", np.zeros(4, np.int32)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "zp_x"], ["xq"], name="in_q"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "zp_x"], ["xd"], name="in_dq"),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["wd"], name="w_dq", axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["bd"], name="b_dq", axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "s_y", "zp_y"], ["rq"], name="conv_q"),
        helper.make_node("DequantizeLinear", ["rq", "s_y", "zp_y"], ["rd"], name="conv_dq"),
        helper.make_node("Add", ["rd", "rd"], ["a"], name="add"),
        helper.make_node("QuantizeLinear", ["a", "s_o", "zp_o"], ["aq"], name="add_q"),
        helper.make_node("DequantizeLinear", ["aq", "s_o", "zp_o"], ["y"], name="out_dq"),
    ]
    graph = helper.make_graph(
        nodes, "helper_qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()
