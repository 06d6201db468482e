"""2:4 sparse weights end to end: a model pruned by tessel.prune_2_4 and compiled for a
target with sparse.enabled stores its exactly-2:4 convs as values and indices (smaller
constants), runs bit-exact against the golden model (also after a write / read of the binary),
takes fewer matrix cycles; the estimate agrees with the simulation per layer; a layer that is
not 2:4 stays dense, and a target without sparsity compiles every conv dense."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessel
from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.isa import Opcode
from tessel.isa.instrs.matrix import WeightType
from tessel.quant.config import QuantConfig, WeightDtype
from tessel.runtime.compiled import CompiledModel


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)  # 3 input channels: dense
        self.a = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)  # depthwise: dense
        self.c = torch.nn.Conv2d(32, 64, 1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.b(torch.relu(self.a(x))))
        x = torch.relu(self.c(torch.relu(self.dw(x))))
        return self.fc(x.mean(dim=(2, 3)))


def _compiled(weights: str, sparse: bool, skip: tuple[str, ...] = ()):
    torch.manual_seed(0)
    pruned, report = tessel.prune_2_4(_Net().eval(), skip=skip)
    inputs = (torch.randn(1, 3, 24, 24),)
    calib = [(torch.randn(1, 3, 24, 24),) for _ in range(4)]
    qcfg = QuantConfig(weights=WeightDtype.INT4 if weights == "int4" else WeightDtype.INT8)
    qm = tessel.quantize(pruned, inputs, calibration_data=calib, quant_config=qcfg)
    arch = load_preset("tnpu-s")
    dense = compile_graph(qm.graph, arch, name="net")
    cm = compile_graph(qm.graph, arch.with_param("sparse.enabled", sparse), name="net")
    return qm, inputs, dense, cm, report


def _w_types(cm) -> list[WeightType]:
    return [WeightType(i.w_type) for q in cm.program.streams.values() for i in q
            if i.opcode is Opcode.CONV]


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_sparse_convs_bit_exact_smaller_faster(weights: str) -> None:
    qm, inputs, dense, cm, report = _compiled(weights, True)
    assert set(report.pruned) == {"a", "b", "c", "fc"}
    types = set(_w_types(cm))
    base = WeightType.I4 if weights == "int4" else WeightType.I8
    assert base.with_sparsity(True) in types and base in types  # the stem stays dense
    assert len(cm.program.constants) < len(dense.program.constants)
    want = qm.run(*inputs)
    again = CompiledModel.from_bytes(cm.binary)
    assert again.arch.sparse.enabled
    for run in (cm.run(*inputs), again.run(*inputs)):
        for got, w in zip(run, want, strict=True):
            np.testing.assert_array_equal(got, w)
    layers = {la.name: la for la in dense.profile.layers}
    faster = [la.name for la in cm.profile.layers
              if la.name in layers and la.cycles < layers[la.name].cycles]
    assert faster  # the sparse convs
    for la in cm.profile.layers:
        assert la.cycles <= layers[la.name].cycles, la.name


def test_estimate_equals_simulation_per_layer() -> None:
    qm, _, _, cm, _ = _compiled("int8", True)
    est = estimate_graph(qm.graph, cm.arch, name="net")
    sim = {la.name: la.cycles for la in cm.profile.layers}
    got = {la.name: la.cycles for la in est.layers}
    assert got.keys() == sim.keys()
    for name, cycles in sim.items():
        assert got[name] == cycles, name


def test_dense_where_not_2_4_or_not_supported() -> None:
    _, _, dense, cm, _ = _compiled("int8", True, skip=("a", "b", "c", "fc"))
    assert WeightType.I8_2_4 not in _w_types(cm)
    assert cm.program.constants == dense.program.constants
    _, _, dense, off, _ = _compiled("int8", False)
    assert set(_w_types(off)) == {WeightType.I8}
