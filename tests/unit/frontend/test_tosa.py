"""TOSA in and out (tessel.frontend.tosa_schema / tosa_export / tosa_import) on small int8 nets
built with the TFLite test builder: the flatbuffer round trip, the exported graph run by the
TOSA reference model against the golden model, the import of Tessel's own export and of
tosa-converter-for-tflite's, compiled and simulated, and the errors of what is refused or
malformed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import tflite
import tflite_models
import tosa_reference_model
from tflite_builder import Net

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselExportError, TesselFormatError
from tessel.frontend.tflite_import import tflite_module
from tessel.frontend.tosa_export import export_tosa
from tessel.frontend.tosa_import import import_tosa, tosa_module
from tessel.frontend.tosa_schema import DType, Operator, Tensor, TosaGraph, TosaOp, as_bytes, read
from tessel.ir import Op, run_graph
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.api import quantized_import
from tessel.quant.golden import GOLDEN_KERNELS, run_golden
from tessel.quant.lower import lower_qdq

B, ACT, PAD = tflite.BuiltinOperator, tflite.ActivationFunctionType, tflite.Padding
def _tool(name: str) -> str:
    """A tool of the dev extra (tosa-tools, tosa-converter-for-tflite): on PATH or beside the
    interpreter."""
    return shutil.which(name) or str(Path(sys.executable).parent / name)


CONVERTER, TOSA_OPT = _tool("tosa-converter-for-tflite"), _tool("tosa-opt")


def small_net(softmax: bool = False) -> Net:
    """conv + depthwise + residual add + max pool + mean + fc (each TOSA pattern once), and a
    softmax after the fc if asked."""
    n = Net(seed=3)
    x = n.input((1, 9, 9, 3), 0.02, -10)
    y = n.conv(x, 8, 3, 2, PAD.SAME, ACT.RELU6)
    d = n.conv(y, 1, 3, 1, PAD.SAME, ACT.RELU6, depthwise=True)
    s = n.binary(B.ADD, d, n.conv(y, 8, 1, 1, PAD.SAME))
    p = n.pool(s, B.MAX_POOL_2D, 3, 2, PAD.SAME)
    y = n.fc(n.mean(p, (1, 2), keep=False), 5)
    n.output(n.softmax(y) if softmax else y)
    return n


@cache
def integer_graph(name: str):
    net = (small_net(name == "softmax") if name in ("small", "softmax")
           else getattr(tflite_models, name)())
    model, inputs = tflite_module(net.build())
    return quantized_import(model).graph, tuple(x.numpy() for x in inputs)


def boundary_values(graph, exported, inputs):
    """The golden model's values at the TOSA graph's inputs and outputs."""
    names = list(exported.inputs) + list(exported.outputs)
    values = run_graph(graph.with_nodes(graph.nodes, names), inputs, kernels=GOLDEN_KERNELS)
    return values[:len(exported.inputs)], values[len(exported.inputs):]


def reference(data: bytes, inputs) -> list[np.ndarray]:
    outputs, status = tosa_reference_model.run(data, [np.ascontiguousarray(x) for x in inputs])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    return outputs


def simulate(graph, inputs) -> list[np.ndarray]:
    cm = compile_graph(to_nhwc(lower_qdq(graph)), load_target("tnpu-xs"))
    return [np.asarray(y) for y in cm.run(*inputs)]


# ---------------------------------------------------------------- flatbuffers


def test_schema_round_trip_keeps_operators_tensors_shapes_and_attributes():
    w = np.arange(-8, 8, dtype=np.int8).reshape(2, 2, 2, 2)
    g = TosaGraph(
        [Operator(TosaOp.CONST, (), ("w",)), Operator(TosaOp.CONST_SHAPE, (), ("s",)),
         Operator(TosaOp.TRANSPOSE, ("x",), ("t",), {"perms": (0, 3, 1, 2)}, "loc text"),
         Operator(TosaOp.RESCALE, ("t", "w"), ("y",), {"scale32": True, "rounding_mode": 3,
                                                       "per_channel": False,
                                                       "input_unsigned": False,
                                                       "output_unsigned": False}),
         Operator(TosaOp.CLAMP, ("y",), ("z",), {"min_val": b"\x80", "max_val": b"\x05",
                                                 "nan_mode": 1})],
        {"x": Tensor("x", (1, 2, 2, 2), DType.INT8),
         "w": Tensor("w", w.shape, DType.INT8, as_bytes(w, DType.INT8)),
         "t": Tensor("t", (1, 2, 2, 2), DType.INT8), "y": Tensor("y", (1, 2, 2, 2), DType.INT8),
         "z": Tensor("z", (1, 2, 2, 2), DType.INT8)},
        {"s": (1, -2, 3)}, ["x"], ["z"], "PRO-INT", ("EXT-DOUBLEROUND",))
    back = read(g.write())
    assert back.operators == g.operators
    assert back.tensors == g.tensors and back.shapes == g.shapes
    assert (back.inputs, back.outputs) == (g.inputs, g.outputs)
    assert (back.profile, back.extensions, back.version) == ("PRO-INT", ("EXT-DOUBLEROUND",),
                                                             (1, 0, 0))
    np.testing.assert_array_equal(back.tensors["w"].array(), w)


@pytest.mark.parametrize("data, message", [
    (b"", "file identifier"), (b"\x10\x00\x00\x00NOPE" + bytes(64), "file identifier"),
    (b"\xff\xff\xff\x7fTOSA" + bytes(64), "outside the 72 bytes"),
])
def test_malformed_files_are_format_errors(data, message):
    with pytest.raises(TesselFormatError, match=message):
        import_tosa(data)


def test_a_truncated_export_is_a_format_error():
    graph, _ = integer_graph("small")
    data = export_tosa(graph).to_bytes()
    with pytest.raises(TesselFormatError):
        import_tosa(data[: len(data) // 3])


# ---------------------------------------------------------------- export


def test_export_names_profile_extensions_and_maps_each_layer():
    graph, _ = integer_graph("small")
    g = read(export_tosa(graph).to_bytes()).operators
    ops = {op.op for op in g}
    assert {TosaOp.CONV2D, TosaOp.DEPTHWISE_CONV2D, TosaOp.RESCALE, TosaOp.ADD,
            TosaOp.MAX_POOL2D, TosaOp.REDUCE_SUM} <= ops
    exported = export_tosa(graph).graph
    assert exported.profile == "PRO-INT" and exported.extensions == ("EXT-DOUBLEROUND",)
    tensors = read(export_tosa(graph).to_bytes()).tensors
    long_shift = [op for op in g if op.op is TosaOp.RESCALE
                  and tensors[op.inputs[2]].array().max() > 31]
    assert long_shift and all(op.attrs["rounding_mode"] == 3 for op in long_shift)


@pytest.mark.parametrize("name", ["small", "softmax", "resnet18_style", "mobilenet_v2_style",
                                  "ds_cnn_style"])
def test_reference_model_runs_the_export_bit_exact_with_the_golden_model(name):
    graph, inputs = integer_graph(name)
    exported = export_tosa(graph)
    tosa_in, golden_out = boundary_values(graph, exported, inputs)
    got = reference(exported.to_bytes(), tosa_in)
    assert len(got) == len(golden_out)
    for g, r in zip(golden_out, got, strict=True):
        np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)


def test_what_tosa_cannot_express_is_refused_with_the_op_and_why():
    graph, _ = integer_graph("small")
    mean = next(n for n in graph.nodes if n.op is Op.QMEAN)
    on_host = graph.with_nodes([n.replace(op=Op.HOST) if n is mean else n for n in graph.nodes])
    with pytest.raises(TesselExportError, match=rf"%{mean.name} = {Op.HOST.value}.*no TOSA form"):
        export_tosa(on_host)


# ---------------------------------------------------------------- import


def test_import_of_the_export_compiles_and_simulates_bit_exact():
    graph, inputs = integer_graph("small")
    exported = export_tosa(graph)
    tosa_in, golden_out = boundary_values(graph, exported, inputs)
    imported = import_tosa(exported.to_bytes())
    as_float = [x.astype(np.float32) for x in tosa_in]
    ref = reference(exported.to_bytes(), tosa_in)
    for y, r, g in zip(simulate(imported, as_float), ref, golden_out, strict=True):
        np.testing.assert_array_equal(y.astype(g.dtype), g)
        np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)
    assert [n.op.value for n in imported.nodes if n.op.value.startswith("q")].count(
        "qconv2d") == 4  # three convs and the fc (a 1x1 CONV2D in TOSA)


def test_import_refuses_single_rounding_with_long_right_shifts():
    graph, _ = integer_graph("small")
    g = export_tosa(graph).graph
    ops = [Operator(op.op, op.inputs, op.outputs, {**op.attrs, "rounding_mode": 1}, op.location)
           if op.op is TosaOp.RESCALE else op for op in g.operators]
    single = TosaGraph(ops, g.tensors, g.shapes, g.inputs, g.outputs)
    with pytest.raises(TesselFormatError, match="rounds twice"):
        import_tosa(single.write())


def test_import_refuses_an_operator_without_an_integer_form():
    x = Tensor("x", (1, 4), DType.INT8)
    g = TosaGraph([Operator(TosaOp.SIGMOID, ("x",), ("y",))],
                  {"x": x, "y": Tensor("y", (1, 4), DType.INT8)}, {}, ["x"], ["y"])
    with pytest.raises(TesselFormatError, match="SIGMOID %y: not an integer operator"):
        import_tosa(g.write())


def average_net() -> Net:
    """conv -> two VALID 3x3 average pools (9 taps: TFLite's SAME borders have even counts,
    which the importer refuses) -> mean -> fc."""
    n = Net(seed=5)
    x = n.input((1, 9, 9, 3), 0.02, -10)
    y = n.conv(x, 8, 3, 1, PAD.SAME, ACT.RELU6)
    y = n.pool(n.pool(y, B.AVERAGE_POOL_2D, 3, 2, PAD.VALID), B.AVERAGE_POOL_2D, 3, 1, PAD.VALID)
    n.output(n.fc(n.mean(y, (1, 2), keep=False), 4))
    return n


def convert(net: Net, tmp_path: Path) -> Path:
    """The .tosa tosa-converter-for-tflite writes for the net (tosa-opt serialises it)."""
    src, mlir, out = tmp_path / "m.tflite", tmp_path / "m.mlir", tmp_path / "m.tosa"
    src.write_bytes(net.build())
    subprocess.run([CONVERTER, str(src), "--text", "-o", str(mlir)], check=True,
                   capture_output=True)
    subprocess.run([TOSA_OPT, f"--tosa-serialize=tosa-flatbuffer-filename={out}", str(mlir),
                    "-o", str(tmp_path / "echo.mlir")], check=True, capture_output=True)
    return out


@pytest.mark.parametrize("name", ["small", "average", "resnet18_style", "mobilenet_v2_style",
                                  "softmax", "ds_cnn_style", "softmax_between"])
def test_a_converter_file_compiles_and_runs_bit_exact_with_the_reference_model(name, tmp_path):
    """A .tosa another tool wrote: tosa-converter-for-tflite legalises the int8 .tflite (float
    quantise / dequantise at its edges), tosa-opt serialises it. The softmax (the small net's
    and ds_cnn_style's) imports as one host-run `qsoftmax_tosa` between NPU regions."""
    nets = {"small": small_net, "average": average_net, "softmax": lambda: small_net(True),
            "softmax_between": softmax_between_net}
    net = nets[name]() if name in nets else getattr(tflite_models, name)()
    out = convert(net, tmp_path)
    model, inputs = tosa_module(out)
    softmaxes = [n for n in model.qdq_graph.nodes if n.op is Op.QSOFTMAX_TOSA]
    assert len(softmaxes) == (name in ("softmax", "ds_cnn_style", "softmax_between"))
    xs = [x.numpy() for x in inputs]
    ref = reference(out.read_bytes(), xs)
    golden = run_golden(model.qdq_graph, xs)
    sim = simulate(model.qdq_graph, xs)
    for r, g, y in zip(ref, golden, sim, strict=True):
        np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)
        np.testing.assert_array_equal(y, g)


def test_tosa_files_are_model_files(tmp_path: Path):
    from tessel.models import resolve

    graph, _ = integer_graph("small")
    path = tmp_path / "small.tosa"
    path.write_bytes(export_tosa(graph).to_bytes())
    model, inputs = resolve(str(path)).factory()
    assert model.qdq_graph.inputs[0].type.shape == inputs[0].shape


def test_int16_lut_exports_with_the_lut_rounding():
    """An int16 LUT (TFLite's interpolation): TABLE's 32-bit result rounded back by RESCALE
    equals the golden model on every int16 value."""
    from tessel.ir import DType as IrDType
    from tessel.ir import GraphBuilder, TensorType

    b = GraphBuilder("lut16")
    x = b.input("x", TensorType((1, 65536), IrDType.F32))
    q = b.add(Op.QUANTIZE, [x], {"scale": 1.0, "zero_point": 0, "qmin": -32768, "qmax": 32767,
                                 "dtype": IrDType.I16})
    steps = np.linspace(-3.0, 3.0, 513)
    table = b.constant(np.round(20000 * np.tanh(steps)).astype(np.int16), "table")
    y = b.add(Op.LUT, [q, table])
    graph = b.build([b.add(Op.DEQUANTIZE, [y], {"scale": 1.0, "zero_point": 0})])
    exported = export_tosa(graph)
    assert "EXT-INT16" in exported.graph.extensions
    every = np.arange(-32768, 32768, dtype=np.float32).reshape(1, -1)
    tosa_in, golden_out = boundary_values(graph, exported, (every,))
    got = reference(exported.to_bytes(), tosa_in)
    np.testing.assert_array_equal(np.asarray(got[0]).reshape(golden_out[0].shape), golden_out[0])


def _avg_pool_graph(h, kernel, stride, pad):
    oh = (h + pad[0] + pad[1] - kernel[0]) // stride[0] + 1
    ow = (h + pad[2] + pad[3] - kernel[1]) // stride[1] + 1
    zp = np.array([-7], np.int8)
    tensors = {"x": Tensor("x", (1, h, h, 64), DType.INT8),
               "zp": Tensor("zp", (1,), DType.INT8, as_bytes(zp, DType.INT8)),
               "y": Tensor("y", (1, oh, ow, 64), DType.INT8)}
    ops = [Operator(TosaOp.CONST, (), ("zp",)),
           Operator(TosaOp.AVG_POOL2D, ("x", "zp", "zp"), ("y",),
                    {"kernel": kernel, "stride": stride, "pad": pad, "acc_type": 5})]
    return TosaGraph(ops, tensors, {}, ["x"], ["y"]).write(), (1, oh, ow, 64)


@pytest.mark.parametrize("h,kernel,stride,pad", [(12, (3, 3), (1, 1), (0, 0, 0, 0)),
                                                 (11, (3, 3), (2, 2), (2, 2, 2, 2)),
                                                 (11, (5, 1), (2, 1), (0, 0, 0, 0))])
def test_avg_pool2d_with_odd_tap_counts_imports_as_tessels_average_pool(h, kernel, stride, pad):
    """TOSA's reciprocal-multiplier average equals Tessel's rounding division where no quotient
    can end in one half (every window's count of valid taps odd: 9, 1 / 3, 5)."""
    data, shape = _avg_pool_graph(h, kernel, stride, pad)
    x = np.random.default_rng(1).integers(-128, 128, (1, h, h, 64)).astype(np.int8)
    ref = np.asarray(reference(data, [x])[0]).reshape(shape)
    imported = import_tosa(data)
    assert [n.op for n in imported.nodes if n.op is Op.QAVG_POOL2D]
    np.testing.assert_array_equal(run_golden(imported, [x.astype(np.float32)])[0], ref)


def test_avg_pool2d_with_an_even_tap_count_is_refused():
    """Counts 4 and 6 at the borders: -2.5 is -2 in TOSA and -3 in Tessel's average pool."""
    data, _ = _avg_pool_graph(12, (3, 3), (1, 1), (1, 1, 1, 1))
    with pytest.raises(TesselFormatError, match="an even count"):
        import_tosa(data)


def softmax_between_net() -> Net:
    """fc -> softmax -> fc: the host-run softmax between two NPU regions."""
    n = Net(seed=4)
    x = n.input((1, 16), 0.05, 2)
    n.output(n.fc(n.softmax(n.fc(x, 10)), 6))
    return n


def softmax_net(rows: int, length: int, scale: float, zp: int) -> Net:
    """A softmax alone over rows of `length` int8 values."""
    n = Net(seed=1)
    n.output(n.softmax(n.input((rows, length), scale, zp)))
    return n


def softmax_levels(length: int, zp: int) -> np.ndarray:
    """24 rows of int8 levels: rows holding every int8 value (every `x - max` from -255 to 0
    under one max), rows of one value repeated (the largest sum), rows near the minimum,
    random rows."""
    rng = np.random.default_rng(length)
    levels = rng.integers(-128, 128, (24, length))
    every = np.arange(-128, 128)
    for r in range(8):
        levels[r] = np.resize(np.roll(every, 37 * r), length)
    levels[8:12] = [[127], [-128], [0], [zp]]
    levels[12:16] = rng.integers(-128, -120, (4, length))
    return levels


@pytest.mark.parametrize("length, scale, zp", [(256, 0.05, 3), (256, 0.004, -20),
                                               (511, 0.3, 0), (7, 0.5, -128)])
def test_the_converter_softmax_is_bit_exact_on_every_difference_from_the_max(length, scale, zp,
                                                                             tmp_path):
    """Rows holding every int8 value (every `x - max` from -255 to 0 under one max), rows of
    one value repeated (the largest sum), random rows: the golden model and the simulator equal
    the reference model; the op runs on the host."""
    out = convert(softmax_net(24, length, scale, zp), tmp_path)
    model, _ = tosa_module(out)
    graph = model.qdq_graph
    assert [n.op for n in graph.nodes if n.op not in (Op.QUANTIZE, Op.DEQUANTIZE,
                                                      Op.CONSTANT)] == [Op.QSOFTMAX_TOSA]
    levels = softmax_levels(length, zp)
    x = (scale * (levels - zp)).astype(np.float32)
    q = next(n for n in graph.nodes if n.op is Op.QUANTIZE)
    np.testing.assert_array_equal(run_golden(graph.with_nodes([q], [q.name]), [x])[0],
                                  np.clip(levels, -128, 127))
    ref = np.asarray(reference(out.read_bytes(), [x])[0]).reshape(24, length)
    golden = run_golden(graph, [x])[0]
    np.testing.assert_array_equal(golden, ref)
    np.testing.assert_array_equal(simulate(graph, [x])[0], golden)


def test_a_changed_converter_softmax_is_refused_naming_the_step(tmp_path):
    """One Newton-Raphson constant changed: not the chain the op computes."""
    g = read(convert(softmax_net(2, 16, 0.05, 3), tmp_path).read_bytes())
    name = next(t.name for t in g.tensors.values() if t.data and t.dtype is DType.INT32
                and t.array().size == 1 and int(t.array().reshape(-1)[0]) == 1515870810)
    v = np.array([1515870811], np.int32)
    g.tensors[name] = Tensor(name, g.tensors[name].shape, DType.INT32, as_bytes(v, DType.INT32))
    with pytest.raises(TesselFormatError, match=r"softmax step 20 \(ADD .*not the chain's "
                                                "1515870810"):
        import_tosa(g.write())


def test_the_softmax_intermediates_equal_the_reference_model(tmp_path):
    """The steps the int8 output hides (the sum's rounding shift, CLZ, the Newton-Raphson
    reciprocal, e): the converter's chain with its int32 tensors made graph outputs, run by the
    reference model, against tessel.ops.softmax_tosa on rows from one element at the max to
    511 (sums up to 2^28)."""
    from tessel.frontend.tosa_softmax import TEMPLATE
    from tessel.ops import softmax_tosa as st

    length, rows = 511, 64
    g = read(convert(softmax_net(rows, length, 0.05, 3), tmp_path).read_bytes())
    k = next(j for j, op in enumerate(g.operators) if op.op is TosaOp.REDUCE_MAX)
    chain = [op for op in g.operators[k:] if op.op not in (TosaOp.CONST, TosaOp.CONST_SHAPE)]
    e, s, clz, r = (chain[i].outputs[0] for i in (13, 15, 16, len(TEMPLATE) - 5))
    g.outputs = [e, s, clz, r]
    rng = np.random.default_rng(0)
    levels = rng.integers(-128, 128, (rows, length))
    for i in range(rows):  # i * 8 elements at the max, the others far below it
        levels[i, : i * 8] = 127
        levels[i, i * 8:] = rng.integers(-128, 127 - rng.integers(0, 40), length - i * 8)
    x = (0.05 * (levels - 3)).astype(np.float32)
    got = [np.asarray(v).reshape(-1) for v in reference(g.write(), [x])]
    model, _ = tosa_module(convert(softmax_net(rows, length, 0.05, 3), tmp_path))
    node = next(n for n in model.qdq_graph.nodes if n.op is Op.QSOFTMAX_TOSA)
    table = model.qdq_graph.constant_value(node.inputs[1]).astype(np.int64)
    want_e = table[levels - levels.max(axis=1, keepdims=True) + 255]
    want_s = st.rshift_round(want_e, st.SUM_SHIFT).sum(axis=1)
    want_clz, want_r = st.reciprocal(want_s)
    assert want_s.max() >= 1 << 27 and want_clz.min() == 4
    for w, v in zip((want_e, want_s, want_clz, want_r), got, strict=True):
        np.testing.assert_array_equal(w.reshape(-1), v)


def _chain_ops(g: TosaGraph) -> list[TosaOp]:
    """The operators of the softmax chain: from REDUCE_MAX to the RESCALE to int8."""
    from tessel.frontend.tosa_softmax import TEMPLATE

    k = next(j for j, op in enumerate(g.operators) if op.op is TosaOp.REDUCE_MAX)
    ops = [op.op for op in g.operators[k:] if op.op not in (TosaOp.CONST, TosaOp.CONST_SHAPE)]
    return ops[:len(TEMPLATE)]


def _integer_nodes(graph):
    """(op, attrs, constant operand values) of each node between the boundary quantise /
    dequantise: what an export -> import round trip must keep."""
    return [(n.op, n.attrs, [graph.constant_value(i).tolist() for i in n.inputs
                             if graph.constant_value(i) is not None])
            for n in graph.nodes if not n.is_constant
            and n.op not in (Op.QUANTIZE, Op.DEQUANTIZE)]


@pytest.mark.parametrize("length, scale, zp", [(256, 0.05, 3), (511, 0.3, 0), (7, 0.5, -128)])
def test_an_imported_converter_softmax_exports_as_the_converters_chain(length, scale, zp,
                                                                       tmp_path):
    """import -> export: the `qsoftmax_tosa` is written as the converter's operators (the
    same sequence as the converter's file); the reference model runs the export equal to the
    golden model (and the converter's file) on rows holding every `x - max`; export -> import
    gives the same integer graph (the exp table, the output zero point)."""
    out = convert(softmax_net(24, length, scale, zp), tmp_path)
    graph = tosa_module(out)[0].qdq_graph
    exported = export_tosa(graph)
    data = exported.to_bytes()
    assert _chain_ops(read(data)) == _chain_ops(read(out.read_bytes()))
    levels = softmax_levels(length, zp)
    x = (scale * (levels - zp)).astype(np.float32)
    tosa_in, golden_out = boundary_values(graph, exported, [x])
    np.testing.assert_array_equal(tosa_in[0], levels)
    got = np.asarray(reference(data, tosa_in)[0]).reshape(golden_out[0].shape)
    np.testing.assert_array_equal(got, golden_out[0])
    ref_converter = np.asarray(reference(out.read_bytes(), [x])[0]).reshape(x.shape)
    np.testing.assert_array_equal((got.astype(np.float32) + 128) / 256, ref_converter)
    back = import_tosa(data)
    assert _integer_nodes(back) == _integer_nodes(graph)
    assert [n.op for n in back.nodes if n.op is Op.QSOFTMAX_TOSA] == [Op.QSOFTMAX_TOSA]


def test_a_converter_net_with_its_softmax_exports_and_runs_in_the_reference_model(tmp_path):
    """fc -> softmax -> fc imported from the converter, exported: the reference model equals
    the golden model, and the re-import compiles and simulates bit-exact."""
    out = convert(softmax_between_net(), tmp_path)
    model, inputs = tosa_module(out)
    graph = model.qdq_graph
    exported = export_tosa(graph)
    tosa_in, golden_out = boundary_values(graph, exported, [x.numpy() for x in inputs])
    got = reference(exported.to_bytes(), tosa_in)
    back = import_tosa(exported.to_bytes())
    assert _integer_nodes(back) == _integer_nodes(graph)
    sim = simulate(back, [v.astype(np.float32) for v in tosa_in])
    for r, y, g in zip(got, sim, golden_out, strict=True):
        np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)
        np.testing.assert_array_equal(y.astype(g.dtype), g)


@pytest.mark.parametrize("change, message", [
    ({"axis": 0}, r"softmax over axis 0 \(the converter's chain reduces the last axis"),
    ({"act_min": 0}, r"output clamp to \[0, 127\]"),
])
def test_a_converter_softmax_the_chain_cannot_say_is_refused(change, message, tmp_path):
    graph = tosa_module(convert(softmax_net(2, 16, 0.05, 3), tmp_path))[0].qdq_graph
    node = next(n for n in graph.nodes if n.op is Op.QSOFTMAX_TOSA)
    changed = graph.with_nodes([n.replace(attrs={**n.attr_map, **change}) if n is node else n
                                for n in graph.nodes])
    with pytest.raises(TesselExportError, match=rf"%{node.name} = qsoftmax_tosa.*{message}"):
        export_tosa(changed)


def unit_scale_net(in_zp: int, out_zp: int, out_scale: float) -> Net:
    """Input at scale 1: the converter quantises with CAST (and ADD of the zero point), no MUL
    by 1 / scale; output at scale 1: it dequantises with CAST (and SUB), no MUL by the scale."""
    n = Net(seed=6)
    x = n.input((1, 12), 1.0, in_zp)
    n.output(n.requantize(n.fc(x, 5), out_scale, out_zp))
    return n


@pytest.mark.parametrize("in_zp, out_zp, out_scale", [(0, 0, 1.0), (5, -7, 1.0), (-128, 3, 1.0),
                                                      (5, 0, 0.25)])
def test_the_converter_quantise_at_scale_one_imports(in_zp, out_zp, out_scale, tmp_path):
    """The quantise and dequantise without MUL (scale 1) or without ADD / SUB (zero point 0)
    import as `quantize` / `dequantize`: golden and simulator equal the reference model."""
    out = convert(unit_scale_net(in_zp, out_zp, out_scale), tmp_path)
    g = read(out.read_bytes())
    muls = [op for op in g.operators if op.op is TosaOp.MUL]
    assert len(muls) == (out_scale != 1.0)  # only the dequantise's MUL by a scale other than 1
    model, inputs = tosa_module(out)
    graph = model.qdq_graph
    (q,), (dq,) = ([n for n in graph.nodes if n.op is op] for op in (Op.QUANTIZE, Op.DEQUANTIZE))
    assert (q.attr("scale"), q.attr("zero_point")) == (1.0, in_zp)
    assert (dq.attr("scale"), dq.attr("zero_point")) == (out_scale, out_zp)
    rng = np.random.default_rng(in_zp + 200)
    x = (rng.integers(-128, 128, (1, 12)) - in_zp).astype(np.float32)
    for xs in ([x], [inputs[0].numpy()]):
        ref = np.asarray(reference(out.read_bytes(), xs)[0])
        golden = run_golden(graph, xs)[0]
        np.testing.assert_array_equal(ref.reshape(golden.shape), golden)
        np.testing.assert_array_equal(simulate(graph, xs)[0], golden)
