"""tosa-converter-for-tflite's int16 softmax (TFLite's 16x8 softmax legalised to TOSA: an exp
TABLE, a reciprocal TABLE, CASTs that wrap) imports as one host-run `qsoftmax16_tosa`, equal to
the TOSA reference model on rows covering every int16 difference from the max and sums from one
element to thousands, on input scales whose RESCALE shift is below and beyond 31 bits; it
exports back as the same chain."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tflite
import tosa_reference_model
from tflite_builder import B, TfliteBuilder

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselFormatError
from tessel.frontend.tosa_export import export_tosa
from tessel.frontend.tosa_import import import_tosa, tosa_module
from tessel.frontend.tosa_schema import (
    DType,
    Operator,
    Tensor,
    TosaGraph,
    TosaOp,
    as_bytes,
    read,
)
from tessel.ir import Op
from tessel.isa.fixedpoint import Rounding
from tessel.ops import softmax_tosa as st
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.golden import run_golden
from tessel.quant.lower import lower_qdq

I16, F32 = tflite.TensorType.INT16, tflite.TensorType.FLOAT32
ROWS, LENGTH = 48, 1024


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


def softmax16(scale: float) -> bytes:
    """float -> QUANTIZE int16 (scale, zero point 0) -> SOFTMAX (int16 out, 1 / 32768) ->
    DEQUANTIZE, over rows of LENGTH."""
    b = TfliteBuilder()
    shape = (ROWS, LENGTH)
    f, o = b.tensor("in", shape, F32), b.tensor("out", shape, F32)
    q = b.tensor("q", shape, I16, (scale,), (0,))
    y = b.tensor("y", shape, I16, (1 / 32768,), (0,))
    b.op(B.QUANTIZE, [f], [q])
    b.op(B.SOFTMAX, [q], [y], "SoftmaxOptions", Beta=1.0)
    b.op(B.DEQUANTIZE, [y], [o])
    return b.build([f], [o])


def convert(data: bytes, tmp_path: Path) -> Path:
    src, mlir, out = tmp_path / "m.tflite", tmp_path / "m.mlir", tmp_path / "m.tosa"
    src.write_bytes(data)
    subprocess.run([_tool("tosa-converter-for-tflite"), str(src), "--text", "-o", str(mlir)],
                   check=True, capture_output=True)
    subprocess.run([_tool("tosa-opt"), f"--tosa-serialize=tosa-flatbuffer-filename={out}",
                    str(mlir), "-o", str(tmp_path / "echo.mlir")], check=True,
                   capture_output=True)
    return out


def levels(span: int = 65536) -> np.ndarray:
    """int16 rows: strided sweeps holding every difference from the max (within `span`), rows
    with 1 to 16 * 60 elements at the max and the rest below it (sums from one exponential to
    about a thousand), a constant row, random rows."""
    rng = np.random.default_rng(span)
    lo = 32767 - span + 1
    v = rng.integers(lo, 32768, (ROWS, LENGTH))
    every = np.arange(lo, 32768)
    for r in range(16):
        v[r] = np.resize(np.roll(every, 4099 * r)[r % 4::1 + r % 4], LENGTH)
        v[r, 0] = 32767
    for r in range(16, 32):
        n = 1 + (r - 16) * 60
        v[r, :n] = 32767
        v[r, n:] = 32767 - rng.integers(1, min(2 ** (r - 15), span), LENGTH - n)
    v[32] = 5
    return v


def reference(data: bytes, x: np.ndarray) -> tuple[np.ndarray | None, object]:
    out, status = tosa_reference_model.run(data, [np.ascontiguousarray(x)])
    ok = status == tosa_reference_model.GraphStatus.TOSA_VALID
    return (np.asarray(out[0]).reshape(x.shape) if ok else None), status


def simulate(graph, x: np.ndarray) -> np.ndarray:
    cm = compile_graph(to_nhwc(lower_qdq(graph)), load_target("tnpu-xs"))
    return np.asarray(cm.run(x)[0])


@pytest.mark.parametrize("scale, shift", [(0.001, 28), (0.01, 24), (0.5, 19), (1e-05, 34),
                                          (3e-06, 36)])
def test_the_converter_int16_softmax_is_bit_exact_with_the_reference_model(scale, shift,
                                                                           tmp_path):
    out = convert(softmax16(scale), tmp_path)
    model, _ = tosa_module(out)
    graph = model.qdq_graph
    (node,) = [n for n in graph.nodes if n.op not in (Op.QUANTIZE, Op.DEQUANTIZE, Op.CONSTANT)]
    assert node.op is Op.QSOFTMAX16_TOSA and node.attr("d_shift") == shift
    assert Rounding(node.attr("d_rounding")) is Rounding.DOUBLE  # the converter's choice
    lv = levels()
    x = (lv * np.float32(scale)).astype(np.float32)
    ref, status = reference(out.read_bytes(), x)
    assert ref is not None, status
    golden = run_golden(graph, [x])[0]
    np.testing.assert_array_equal(golden, ref)
    np.testing.assert_array_equal(simulate(graph, x), golden)
    d = lv - lv.max(axis=1, keepdims=True)
    moved = st.rescale32(d, node.attr("d_multiplier"), shift, Rounding.DOUBLE) + st.I16_BIAS
    assert (moved < -32768).any() == (scale >= 0.001)  # the exp TABLE's CAST wraps these


def test_the_int16_chain_is_refused_by_the_reference_model_beyond_its_rescale_range(tmp_path):
    """Input scale 3: the input RESCALE's shift is 16, whose input range TOSA limits to
    [-2^15, 2^15): rows spanning less equal the reference model, a row spanning more is
    UNPREDICTABLE there (qsoftmax16_tosa computes it all the same)."""
    out = convert(softmax16(3.0), tmp_path)
    graph = tosa_module(out)[0].qdq_graph
    lv = levels(span=32768)
    x = (lv * np.float32(3.0)).astype(np.float32)
    ref, status = reference(out.read_bytes(), x)
    assert ref is not None, status
    np.testing.assert_array_equal(run_golden(graph, [x])[0], ref)
    lv[40, :2] = (-32768, 32767)
    ref, status = reference(out.read_bytes(), (lv * np.float32(3.0)).astype(np.float32))
    assert ref is None and status == tosa_reference_model.GraphStatus.TOSA_UNPREDICTABLE


def _chain(g) -> list[TosaOp]:
    k = next(j for j, op in enumerate(g.operators) if op.op is TosaOp.REDUCE_MAX)
    return [op.op for op in g.operators[k:] if op.op not in (TosaOp.CONST, TosaOp.CONST_SHAPE)]


@pytest.mark.parametrize("scale", [0.001, 1e-05])
def test_an_imported_int16_softmax_exports_as_the_converters_chain(scale, tmp_path):
    """import -> export: the converter's operators in its order (DOUBLE_ROUND on the input
    RESCALE, EXT-DOUBLEROUND where its shift passes 31 bits); the reference model runs the
    export equal to the golden model; export -> import gives the same op and tables."""
    out = convert(softmax16(scale), tmp_path)
    graph = tosa_module(out)[0].qdq_graph
    exported = export_tosa(graph)
    data = exported.to_bytes()
    n = len(_chain(read(data)))
    assert n == 21 and _chain(read(data)) == _chain(read(out.read_bytes()))[:n]
    assert ("EXT-DOUBLEROUND" in exported.graph.extensions) == (scale < 1e-4)
    lv = levels()
    ref, status = reference(data, lv.astype(np.int16))
    assert ref is not None, status
    x = (lv * np.float32(scale)).astype(np.float32)
    q = next(n for n in graph.nodes if n.op is Op.QSOFTMAX16_TOSA)
    np.testing.assert_array_equal(run_golden(graph.with_nodes(graph.nodes, [q.name]), [x])[0],
                                  ref)
    back = import_tosa(data)
    (q2,) = [n for n in back.nodes if n.op is Op.QSOFTMAX16_TOSA]
    assert q2.attrs == q.attrs
    for a, b in zip(q.inputs[1:], q2.inputs[1:], strict=True):
        np.testing.assert_array_equal(graph.constant_value(a), back.constant_value(b))


def test_a_changed_int16_softmax_is_refused_naming_the_step(tmp_path):
    """The bias moving `d` into int16 changed: not the chain the op computes."""
    g = read(convert(softmax16(0.001), tmp_path).read_bytes())
    name = next(t.name for t in g.tensors.values() if t.data and t.dtype is DType.INT32
                and t.array().size == 1 and int(t.array().reshape(-1)[0]) == 32767)
    v = np.array([32766], np.int32)
    g.tensors[name] = Tensor(name, g.tensors[name].shape, DType.INT32, as_bytes(v, DType.INT32))
    with pytest.raises(TesselFormatError, match=r"softmax step 3 \(ADD .*not the chain's 32767"):
        import_tosa(g.write())


def test_the_int16_reciprocal_equals_the_reference_model_on_every_table_input(tmp_path):
    """The converter's steps from the sum `s` to the reciprocal `r` (CLZ, the normalising shift,
    the CAST into int16, the reciprocal TABLE), cut out of its file with `s` as the graph input,
    run by the reference model against st.reciprocal16: every value of the normalised sum's top
    bits (each rounding edge, 65536 wrapping to -32768), every sum below 2^17, every power of
    two and its neighbours."""
    g = read(convert(softmax16(0.001), tmp_path).read_bytes())
    k = next(j for j, op in enumerate(g.operators) if op.op is TosaOp.REDUCE_MAX)
    chain = [op for op in g.operators[k:] if op.op not in (TosaOp.CONST, TosaOp.CONST_SHAPE)]
    s_name, r_name = chain[7].outputs[0], chain[16].outputs[0]
    top = (1 << 30) + (np.arange(1 << 16)[:, None] << 14) + np.array([0, 8191, 8192, 16383])
    pots = (1 << np.arange(1, 31))[:, None] + np.array([-1, 0, 1])
    s = np.unique(np.concatenate([top.ravel(), np.arange(1, 1 << 17), pots.ravel()]))
    s = s[s < 2**31].astype(np.int32).reshape(-1, 1)
    steps = chain[8:17]
    used = {n for op in steps for n in op.inputs}
    consts = [op for op in g.operators if op.op is TosaOp.CONST and op.outputs[0] in used]
    tensors = {op.outputs[0]: g.tensors[op.outputs[0]] for op in consts}
    for name in [s_name, *(op.outputs[0] for op in steps)]:
        tensors[name] = Tensor(name, s.shape, g.tensors[name].dtype)
    cut = TosaGraph(consts + steps, tensors, {}, [s_name], [r_name])
    ref, status = reference(cut.write(), s)
    assert ref is not None, status
    recip = next(g.tensors[op.inputs[1]].array() for op in chain[15:16])
    clz, r = st.reciprocal16(s, recip)
    np.testing.assert_array_equal(r, ref)
    assert (st.rshift_round((s.astype(np.int64) << (clz - 1)) - (1 << 30), 14) == 65536).any()


def test_a_reduce_max_outside_the_converters_softmax_is_refused_naming_it():
    """REDUCE_MAX of an int8 tensor itself (no RESCALE to int32 in front): Tessel has no max
    reduction of its own; the message names the operator and what to do."""
    g = TosaGraph([Operator(TosaOp.REDUCE_MAX, ("x",), ("m",), {"axis": 1, "nan_mode": 1})],
                  {"x": Tensor("x", (2, 4), DType.INT8), "m": Tensor("m", (2, 1), DType.INT8)},
                  {}, ["x"], ["m"])
    with pytest.raises(TesselFormatError, match=r"TOSA REDUCE_MAX %m: .*int8 or int16 softmax "
                                                r"only.*compile the model this TOSA graph was "
                                                "legalised from instead"):
        import_tosa(g.write())
