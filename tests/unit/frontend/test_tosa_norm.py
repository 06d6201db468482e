"""The planned chains through TOSA (tessel.frontend.tosa_norm, tosa_planned): the layer norm's
integer inverse square root in int32 operators equals UNARY RSQRT in the reference model on every
edge of its range and either side of each root's step; a layer norm and a softmax export bit-exact
and import back as one op each; a chain whose operators differ from its plan's is refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
import tosa_reference_model

from tessel.errors import TesselFormatError
from tessel.frontend.tosa_build import PROFILE, Builder
from tessel.frontend.tosa_export import export_tosa, mlir_text
from tessel.frontend.tosa_import import import_tosa
from tessel.frontend.tosa_norm import rsqrt
from tessel.frontend.tosa_schema import DType, TosaGraph, TosaOp
from tessel.ir import Op, run_graph
from tessel.isa.fields import UnaryOp
from tessel.ops import intops
from tessel.quant.api import quantize
from tessel.quant.golden import GOLDEN_KERNELS, run_golden


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    edges = [-(2**31), -5, 0, 1, 2, 3, 4, 5, 15, 16, 17, 2**20 - 1, 2**20, 2**29, 2**30,
             2**30 + 1, 2**31 - 2, 2**31 - 1]
    squares = np.arange(1, 1500, dtype=np.int64) ** 2
    roots = rng.integers(1, 2**30, 1000, dtype=np.int64)
    steps = 2**60 // (roots * roots)  # the largest v whose root is still >= that root
    steps = steps[(steps > 0) & (steps < 2**31 - 1)]
    return np.concatenate([edges, rng.integers(0, 2**31 - 1, 500), squares - 1, squares,
                           squares + 1, steps, steps + 1]).astype(np.int32)


def test_rsqrt_chain_equals_unary_rsqrt_in_the_reference_model():
    v = _values()
    shape = (1, v.size, 1)
    b = Builder(None)
    b.tensor("v", shape, DType.INT32)
    out = rsqrt(b, "v", "r", "rsqrt")
    graph = TosaGraph(b.ops, b.tensors, b.shapes, ["v"], [out], PROFILE)
    got, status = tosa_reference_model.run(graph.write(), [v.reshape(shape)])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID
    want = intops.unary(v, UnaryOp.RSQRT, 30)
    np.testing.assert_array_equal(np.asarray(got[0]).reshape(-1), want)


class _NormNet(torch.nn.Module):
    """linear -> layer norm -> softmax: the two planned chains once each."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 24)
        self.norm = torch.nn.LayerNorm(24)

    def forward(self, x):
        return torch.softmax(self.norm(self.fc(x)) * 2.0, dim=-1)


@cache
def _norm_net():
    torch.manual_seed(0)
    x = torch.randn(1, 5, 16)
    qm = quantize(_NormNet().eval(), (x,), calibration_data=[(torch.randn(1, 5, 16),)
                                                             for _ in range(3)])
    graph = qm.graph
    exported = export_tosa(graph)
    names = list(exported.inputs) + list(exported.outputs)
    values = run_graph(graph.with_nodes(graph.nodes, names), (x.numpy(),), kernels=GOLDEN_KERNELS)
    return graph, exported, values[:1], values[1:]


def test_layer_norm_and_softmax_export_run_bit_exact_and_import_as_one_op_each():
    graph, exported, tosa_in, golden_out = _norm_net()
    assert {Op.QLAYER_NORM, Op.QSOFTMAX} <= {n.op for n in graph.nodes}
    data = exported.to_bytes()
    ref, status = tosa_reference_model.run(data, [np.ascontiguousarray(x) for x in tosa_in])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID
    np.testing.assert_array_equal(np.asarray(ref[0]).reshape(golden_out[0].shape), golden_out[0])
    imported = import_tosa(data)
    ops = [n.op for n in imported.nodes]
    assert ops.count(Op.QLAYER_NORM) == 1 and ops.count(Op.QSOFTMAX) == 1
    y = run_golden(imported, [x.astype(np.float32) for x in tosa_in])
    np.testing.assert_array_equal(y[0], golden_out[0])


def test_a_changed_operator_of_a_planned_chain_is_refused():
    _, exported, _, _ = _norm_net()
    g = exported.graph
    k = next(i for i, op in enumerate(g.operators)
             if op.op is TosaOp.INTDIV and "qlayer_norm" in op.location)
    ops = list(g.operators)
    ops[k] = replace(ops[k], op=TosaOp.MAXIMUM, attrs={"nan_mode": 1})
    changed = TosaGraph(ops, g.tensors, g.shapes, g.inputs, g.outputs)
    with pytest.raises(TesselFormatError, match="where its plan writes INTDIV"):
        import_tosa(changed.write())


def test_the_chains_validate_against_the_profile_and_extensions(tmp_path):
    """tosa-opt's validation (the operators' data types and attributes against the spec) of the
    layer norm and softmax chains under PRO-INT with EXT-INT16 and EXT-DOUBLEROUND."""
    _, exported, _, _ = _norm_net()
    path = tmp_path / "norm.tosa"
    path.write_bytes(exported.to_bytes())
    tool = shutil.which("tosa-opt") or str(Path(sys.executable).parent / "tosa-opt")
    (tmp_path / "norm.mlir").write_text(mlir_text(path))  # what `--mlir` writes
    done = subprocess.run([tool, "--tosa-attach-target=profiles=pro_int "
                           "extensions=int16,doubleround", "--tosa-validate=strict-op-spec-alignment",
                           str(tmp_path / "norm.mlir"), "-o", str(tmp_path / "out.mlir")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[:2000]
    assert exported.graph.extensions == ("EXT-DOUBLEROUND", "EXT-INT16")
