"""2:4-pruned models on the C runtime: a small CNN pruned by tessel.prune_2_4 (int8 and int4
weights, with and without the weight decoder), a small transformer encoder block (its linear
layers as 1x1 sparse convs), compiled for a target with sparse.enabled, and ResNet-18 (int4 2:4
weights as weight streams on tnpu-xs), run on libtessel and the C NPU model to the simulator's
and the golden model's bits, with the simulator's MAC count; the `tessel export c` project of a
sparse model builds and prints the simulator's outputs."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import torch
from c_printed import read_outputs
from zoo_cache import resnet18_2_4_int4

import tessel
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.isa import Opcode
from tessel.isa.instrs.matrix import WeightType
from tessel.quant.config import QuantConfig, WeightDtype
from tessel.runtime import cengine

pytestmark = pytest.mark.skipif(cengine.available() is not None,
                                reason=str(cengine.available()))
SPARSE = load_preset("tnpu-s").with_param("sparse.enabled", True)


class _Cnn(torch.nn.Module):
    """Zoo-style: a dense stem (3 input channels), strided and 1x1 convs, a depthwise conv
    (dense), a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.a = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.c = torch.nn.Conv2d(32, 64, 1)
        self.fc = torch.nn.Linear(64, 10)
        with torch.no_grad():  # heavy-tailed weights, as trained ones are: their codes compress
            for m in (self.stem, self.a, self.b, self.dw, self.c, self.fc):
                m.weight.copy_(torch.randn(m.weight.shape) ** 3 * 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.b(torch.relu(self.a(x))))
        x = torch.relu(self.c(torch.relu(self.dw(x))))
        return self.fc(x.mean(dim=(2, 3)))


def _w_types(cm) -> set[WeightType]:
    return {WeightType(i.w_type) for q in cm.program.streams.values() for i in q
            if i.opcode is Opcode.CONV}


def _same_on_c(cm, qm, inputs: list[tuple[np.ndarray, ...]]) -> None:
    """Every input: the C engine's outputs equal the simulator's and the golden model's; its
    MACs, one run's, are the simulator's."""
    for k, x in enumerate(inputs):
        engine = cengine.CEngine(cm.binary, cm.arch)
        got, want = engine.run(*x), cm.run(*x)
        for g, w, gold in zip(got, want, qm.run(*x), strict=True):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(g, gold)
        if k == 0:
            assert engine.macs == cm.profile.macs_executed


def _small(weights: WeightDtype, arch) -> tuple:
    torch.manual_seed(0)
    pruned, report = tessel.prune_2_4(_Cnn().eval())
    assert set(report.pruned) == {"a", "b", "c", "fc"}
    example = (torch.randn(1, 3, 16, 16),)
    calib = [(torch.randn(1, 3, 16, 16),) for _ in range(3)]
    qm = tessel.quantize(pruned, example, calibration_data=calib,
                         quant_config=QuantConfig(weights=weights))
    return qm, compile_graph(qm.graph, arch, name="cnn24")


@pytest.mark.parametrize("weights", [WeightDtype.INT8, WeightDtype.INT4])
@pytest.mark.parametrize("wdecoder", [False, True])
def test_pruned_cnn_on_c_equals_the_simulator(weights: WeightDtype, wdecoder: bool) -> None:
    qm, cm = _small(weights, SPARSE.with_param("wdecoder.enabled", wdecoder))
    base = WeightType.I4 if weights is WeightDtype.INT4 else WeightType.I8
    assert _w_types(cm) == {base, base.with_sparsity(True)}  # the stem stays dense
    ops = {i.opcode for q in cm.program.streams.values() for i in q}
    assert (Opcode.DMA_LOAD_W in ops) == wdecoder
    rng = np.random.default_rng(int(wdecoder) + 2 * (weights is WeightDtype.INT4))
    _same_on_c(cm, qm, [(rng.standard_normal((1, 3, 16, 16)).astype(np.float32),)
                        for _ in range(3)])


class _Block(torch.nn.Module):
    """A transformer encoder block: attention (one head), layer norms, a GELU FFN whose hidden
    width (68) is not a multiple of the array."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(32, 32) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(32), torch.nn.LayerNorm(32)
        self.up, self.down = torch.nn.Linear(32, 68), torch.nn.Linear(68, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        att = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2) / 32 ** 0.5, -1)
        x = self.ln1(x + self.o(att @ self.v(x)))
        return self.ln2(x + self.down(torch.nn.functional.gelu(self.up(x))))


@pytest.mark.parametrize("weights", [WeightDtype.INT8, WeightDtype.INT4])
def test_pruned_transformer_block_on_c_equals_the_simulator(weights: WeightDtype) -> None:
    torch.manual_seed(1)
    pruned, report = tessel.prune_2_4(_Block().eval())
    assert len(report.pruned) == 6
    calib = [(torch.randn(1, 10, 32),) for _ in range(3)]
    qm = tessel.quantize(pruned, calib[0], calibration_data=calib,
                         quant_config=QuantConfig(weights=weights))
    cm = compile_graph(qm.graph, SPARSE.with_param("wdecoder.enabled", True), name="block24")
    base = WeightType.I4 if weights is WeightDtype.INT4 else WeightType.I8
    assert _w_types(cm) == {base.with_sparsity(True)}  # every linear layer, sparse
    dense = compile_graph(qm.graph, load_preset("tnpu-s"), name="block24")
    assert len(cm.program.constants) < len(dense.program.constants)
    assert cm.profile.cycles < dense.profile.cycles
    rng = np.random.default_rng(weights is WeightDtype.INT4)
    _same_on_c(cm, qm, [(rng.standard_normal((1, 10, 32)).astype(np.float32),)
                        for _ in range(2)])


@pytest.mark.slow
@pytest.mark.xdist_group("resnet18-2-4")  # the model is shared with test_sparse_weight_streams
def test_pruned_resnet18_on_c_equals_the_simulator() -> None:
    qm, cm, inputs, pruned = resnet18_2_4_int4()  # int4 2:4 weights, tnpu-xs, weight streams
    assert pruned > 15
    convs = [WeightType(i.w_type) for q in cm.program.streams.values() for i in q
             if i.opcode is Opcode.CONV]
    assert convs.count(WeightType.I4_2_4) > convs.count(WeightType.I4)
    assert Opcode.DMA_LOAD_W in {i.opcode for q in cm.program.streams.values() for i in q}
    _same_on_c(cm, qm, [inputs])


def test_exported_project_of_a_sparse_model_builds_and_runs(tmp_path, capsys) -> None:
    """`tessel export c` of a 2:4 sparse int4 model with weight streams: the header enables
    sparsity and the decoder, the project (its Makefile) builds and prints the outputs the
    simulator computes on the stored example inputs."""
    from tessel.cli import main
    from tessel.runtime.compiled import load
    from tessel.runtime.reference import KEY, reference_metadata, stored_reference

    arch = SPARSE.with_param("wdecoder.enabled", True)
    qm, _ = _small(WeightDtype.INT4, arch)
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    golden = qm.run(x)
    meta = {KEY: reference_metadata(golden, golden, (), [x])}
    binary = tmp_path / "cnn24.tsl"
    compile_graph(qm.graph, arch, name="cnn24", metadata=meta).save(binary)
    cm = load(binary)
    assert WeightType.I4_2_4 in _w_types(cm)
    project = tmp_path / "cnn24_c"
    assert main(["export", "c", str(binary), "-o", str(project)]) == 0
    capsys.readouterr()
    header = (project / "cnn24_model.h").read_text()
    assert "#define CNN24_NPU_SPARSE 1u" in header and "#define CNN24_NPU_WDECODER 1u" in header
    assert shutil.which("make")
    subprocess.run(["make", "-C", str(project), "cnn24_demo"], check=True, capture_output=True,
                   text=True)
    printed = subprocess.run([str(project / "cnn24_demo")], check=True, capture_output=True,
                             text=True).stdout
    got = read_outputs(printed)
    want = cm.run(*stored_reference(cm.program.metadata).inputs)
    assert list(got) == cm.output_names
    for name, w, gold in zip(cm.output_names, want, golden, strict=True):
        np.testing.assert_array_equal(w, gold)
        np.testing.assert_array_equal(got[name].astype(np.float32), w.reshape(-1))
