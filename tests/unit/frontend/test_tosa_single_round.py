"""TOSA RESCALEs that round once (``SINGLE_ROUND``, ExecuTorch's Arm backend writes them): the
convolution's requantisation and the quantised add (ELTWISE) import them in their SINGLE rounding
mode and run bit-exact against the TOSA reference model; where a Tessel op rounds twice only, the
import refuses them.

tests/data/executorch_*.tosa are ExecuTorch's output (tests/data/make_executorch_tosa.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tflite_models
import tosa_reference_model

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselFormatError
from tessel.frontend.tflite_import import tflite_module
from tessel.frontend.tosa_export import export_tosa
from tessel.frontend.tosa_import import import_tosa, tosa_module
from tessel.frontend.tosa_schema import (
    Operator,
    RoundingMode,
    TosaGraph,
    TosaOp,
    as_bytes,
    read,
)
from tessel.ir import Op
from tessel.isa import Engine, Opcode, Rounding
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.api import quantized_import
from tessel.quant.golden import run_golden
from tessel.quant.lower import lower_qdq
from tessel.runtime import cengine
from tessel.runtime.compiled import CompiledModel

DATA = Path(__file__).resolve().parents[2] / "data"


def reference(data: bytes, inputs) -> list[np.ndarray]:
    outputs, status = tosa_reference_model.run(data, [np.ascontiguousarray(x) for x in inputs])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    return outputs


def single_outputs(graph, twice: bool = False):
    """``graph`` with the single-rounding requantisations' results as its outputs; ``twice``:
    with every one of them rounding twice instead (the ``rounding`` attributes gone)."""
    names = [n.name for n in graph.nodes if "rounding" in n.attr_map]
    nodes = [n.replace(attrs={k: v for k, v in n.attr_map.items() if k != "rounding"})
             if twice else n for n in graph.nodes]
    return graph.with_nodes(nodes, names)


def check_bit_exact(path: Path, seeds: range) -> CompiledModel:
    """import -> golden, and import -> compile -> simulate (the Python simulator and, where a C
    compiler is, the C NPU model), all == the reference model; the nodes rounding twice give
    other values (the mode matters on these inputs)."""
    model, inputs = tosa_module(path)
    cm = compile_graph(to_nhwc(lower_qdq(model.qdq_graph)), load_target("tnpu-xs"))
    differs = False
    for seed in seeds:
        rng = np.random.default_rng(seed)
        # the int8 values; Tessel's model takes them as floats of scale 1 (its input quantise)
        ints = [rng.integers(-128, 128, x.shape).astype(np.int8) for x in inputs]
        xs = [v.astype(x.numpy().dtype) for v, x in zip(ints, inputs, strict=True)]
        ref = reference(path.read_bytes(), ints)
        golden = run_golden(model.qdq_graph, xs)
        sim = [np.asarray(y) for y in cm.run(*xs)]
        c_sim = sim if cengine.available() else [np.asarray(y) for y in cm.run(*xs, engine="c")]
        for r, g, y, c in zip(ref, golden, sim, c_sim, strict=True):
            np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)
            np.testing.assert_array_equal(y, g)
            np.testing.assert_array_equal(c, g)
        once = run_golden(single_outputs(model.qdq_graph), xs)
        twice = run_golden(single_outputs(model.qdq_graph, twice=True), xs)
        differs |= any(np.any(t != o) for t, o in zip(twice, once, strict=True))
    assert differs
    return cm


def test_executorch_cnn_imports_single_rounding_and_runs_bit_exact():
    path = DATA / "executorch_cnn.tosa"
    g = read(path.read_bytes())
    modes = {op.attrs["rounding_mode"] for op in g.operators if op.op is TosaOp.RESCALE}
    assert modes == {RoundingMode.SINGLE_ROUND}
    convs = [n for n in import_tosa(path.read_bytes()).nodes if n.op is Op.QCONV2D]
    assert len(convs) == 3  # two convolutions and the linear layer
    assert all(n.attr_map["rounding"] == Rounding.SINGLE for n in convs)
    check_bit_exact(path, range(4))


def test_executorch_residual_add_imports_single_rounding_and_runs_bit_exact():
    """The add's RESCALE -> ADD -> RESCALE (the output's a 50-bit shift, rounded once) is a qadd
    with ELTWISE's SINGLE rounding."""
    path = DATA / "executorch_residual.tosa"
    g = import_tosa(path.read_bytes())
    adds = [n for n in g.nodes if n.op is Op.QADD]
    assert len(adds) == 1 and adds[0].attr_map["rounding"] == Rounding.SINGLE
    assert adds[0].attr_map["out_shift"] < 0  # a right shift beyond 31 bits in TOSA's terms
    cm = check_bit_exact(path, range(4))
    elt = [i for i in cm.program.streams[Engine.VECTOR] if i.opcode is Opcode.ELTWISE]
    assert elt and all(i.rounding == Rounding.SINGLE for i in elt)


def _with(g: TosaGraph, consts: dict[str, np.ndarray], modes: dict[str, RoundingMode]
          ) -> bytes:
    """``g`` with some constants' values and some RESCALEs' rounding modes replaced."""
    tensors = {k: (replace(t, data=as_bytes(consts[k], t.dtype)) if k in consts else t)
               for k, t in g.tensors.items()}
    ops = [replace(op, attrs={**op.attrs, "rounding_mode": modes[op.outputs[0]]})
           if op.outputs and op.outputs[0] in modes else op for op in g.operators]
    return TosaGraph(ops, tensors, g.shapes, g.inputs, g.outputs).write()


def test_an_add_whose_input_and_output_rescales_round_differently_is_refused():
    """One ELTWISE rounds its three rescales alike: an input RESCALE with a right shift beyond
    31 bits rounding once and the output RESCALE rounding twice have no one mode."""
    g = read((DATA / "executorch_residual.tosa").read_bytes())
    data = _with(g, {"tosa_rescale_default_3_shifts": np.array([40], np.int8)},
                 {"tosa_rescale_default_4": RoundingMode.DOUBLE_ROUND})
    with pytest.raises(TesselFormatError, match=r"RESCALE %tosa_rescale_default_4: rounds "
                                                r"double, the qadd's input RESCALEs single"):
        import_tosa(data)


def test_an_export_with_single_rounding_convolutions_runs_bit_exact(tmp_path):
    """A hand-made graph: the exporter's ResNet-style net with every RESCALE behind a
    convolution switched to SINGLE_ROUND (the multipliers now mean one rounding)."""
    model, _ = tflite_module(tflite_models.resnet18_style().build())
    g = export_tosa(quantized_import(model).graph).graph
    conv_outs: set[str] = set()  # accumulators, reshaped ones (the fc) too
    for op in g.operators:
        if op.op in (TosaOp.CONV2D, TosaOp.DEPTHWISE_CONV2D) or (
                op.op is TosaOp.RESHAPE and op.inputs[0] in conv_outs):
            conv_outs.add(op.outputs[0])
    ops = [Operator(op.op, op.inputs, op.outputs,
                    {**op.attrs, "rounding_mode": RoundingMode.SINGLE_ROUND}, op.location)
           if op.op is TosaOp.RESCALE and op.inputs[0] in conv_outs else op
           for op in g.operators]
    single = TosaGraph(ops, g.tensors, g.shapes, g.inputs, g.outputs)
    path = tmp_path / "single.tosa"
    path.write_bytes(single.write())
    convs = [n for n in import_tosa(path.read_bytes()).nodes if n.op is Op.QCONV2D]
    assert convs and all(n.attr_map["rounding"] == Rounding.SINGLE for n in convs)
    check_bit_exact(path, range(2))


def test_a_rounding_outside_the_two_modes_is_a_verifier_error():
    from tessel.errors import TesselVerifyError
    from tessel.ir.verifier import verify

    g = import_tosa((DATA / "executorch_cnn.tosa").read_bytes())
    verify(g)
    conv = next(n for n in g.nodes if n.op is Op.QCONV2D)
    bad = g.with_nodes([n.replace(attrs={**n.attr_map, "rounding": 7}) if n is conv else n
                        for n in g.nodes])
    with pytest.raises(TesselVerifyError, match="rounding 7 is not one of"):
        verify(bad)


def test_an_add_whose_input_rescales_round_differently_is_refused():
    g = read((DATA / "executorch_residual.tosa").read_bytes())
    long_shift = np.array([40], np.int8)  # a right shift of 9 bits beyond 31
    data = _with(g, {"tosa_rescale_default_3_shifts": long_shift,
                     "tosa_rescale_default_1_shifts": long_shift},
                 {"tosa_rescale_default_1": RoundingMode.DOUBLE_ROUND})
    with pytest.raises(TesselFormatError, match=r"ADD %tosa_add_default: one input RESCALE "
                                                r"rounds once, the other twice"):
        import_tosa(data)


def test_the_residual_net_exports_back_with_single_round_rescales_only():
    """import -> export: every RESCALE (the qadd's three too) SINGLE_ROUND, no EXT-DOUBLEROUND,
    and the reference model runs the re-export as the golden model does."""
    g = import_tosa((DATA / "executorch_residual.tosa").read_bytes())
    exported = export_tosa(g)
    data = exported.to_bytes()
    modes = {op.attrs["rounding_mode"] for op in read(data).operators if op.op is TosaOp.RESCALE}
    assert modes == {RoundingMode.SINGLE_ROUND} and exported.graph.extensions == ()
    x = np.random.default_rng(0).integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    golden = run_golden(g, [x.astype(np.float32)])[0]
    np.testing.assert_array_equal(np.asarray(reference(data, [x])[0]).reshape(golden.shape),
                                  golden)
