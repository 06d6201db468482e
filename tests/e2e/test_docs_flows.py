"""The Python flows the README and docs/ show, run on a tiny model: the README's golden model
and binary calibrated on the same samples are bit-exact; a bring-your-own pt2e flow (own
calibration loop) and QAT (a few training steps) compile to binaries that equal their golden
models; every way the README hands Tessel a model gives the same outputs; the report, compare,
per-layer accuracy, C engine and TOSA snippets of docs/analysis.md, python.md, runtime.md and
frontend.md run, and the reports have the columns and keys the docs list."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import tessel
from tessel.arch import load_preset
from tessel.driver import compile_graph


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = Tiny().eval()
    calib = [(torch.randn(1, 3, 8, 8),) for _ in range(4)]
    return model, calib[0], calib


@pytest.mark.slow
def test_readme_flow_golden_equals_binary(setup):
    model, inputs, calib = setup
    cm = tessel.compile(model, inputs, target="tnpu-s", calibration_data=calib)
    qm = tessel.quantize(model, inputs, calibration_data=calib)
    x = inputs[0].numpy()
    assert np.array_equal(cm.run(x)[0], qm.run(x)[0])
    # the README's run_batch line: 8 copies at once equal the single run, bit for bit
    many, = cm.run_batch(*[x[None].repeat(8, *[1] * x.dim()) for x in inputs])
    assert many.shape[0] == 8 and all(np.array_equal(m, cm.run(x)[0]) for m in many)


@pytest.mark.slow
def test_bring_your_own_pt2e(setup):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from tessel.quant.api import from_pt2e
    from tessel.quant.config import QuantConfig
    from tessel.quant.pt2e import export_for_quant
    from tessel.quant.quantizer import TesselQuantizer

    model, inputs, calib = setup
    config = QuantConfig()
    prepared = prepare_pt2e(export_for_quant(model, inputs), TesselQuantizer(config))
    with torch.no_grad():  # your own calibration loop; here in the batches tessel.quantize
        prepared(*calib[0])  # runs (docs/frontend.md: the first sample alone, then batches of
        prepared(torch.cat([s[0] for s in calib]))  # 8 starting with it), so they must agree
    qm = from_pt2e(convert_pt2e(prepared), inputs, config, calibration_samples=len(calib))
    cm = compile_graph(qm.graph, load_preset("tnpu-s"))
    x = inputs[0].numpy()
    assert np.array_equal(cm.run(x)[0], qm.run(x)[0])
    # the README's run_batch line: 8 copies at once equal the single run, bit for bit
    many, = cm.run_batch(*[x[None].repeat(8, *[1] * x.dim()) for x in inputs])
    assert many.shape[0] == 8 and all(np.array_equal(m, cm.run(x)[0]) for m in many)
    ref = tessel.quantize(model, inputs, calibration_data=calib)  # the same flow, built in
    assert ref.calibration_samples == len(calib)
    assert np.array_equal(ref.run(x)[0], qm.run(x)[0])


@pytest.mark.slow
def test_qat(setup):
    from tessel.quant.api import prepare_quantize_qat, quantize_qat

    model, inputs, calib = setup
    torch.manual_seed(1)
    prepared = prepare_quantize_qat(Tiny(), inputs)
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-2)
    for (x,) in calib:  # a few steps of training with the fake-quant graph
        loss = torch.nn.functional.cross_entropy(prepared(x), torch.tensor([3]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    qm = quantize_qat(prepared, inputs, name="tiny_qat")
    cm = compile_graph(qm.graph, load_preset("tnpu-s"))
    x = inputs[0].numpy()
    assert np.array_equal(cm.run(x)[0], qm.run(x)[0])
    # the README's run_batch line: 8 copies at once equal the single run, bit for bit
    many, = cm.run_batch(*[x[None].repeat(8, *[1] * x.dim()) for x in inputs])
    assert many.shape[0] == 8 and all(np.array_equal(m, cm.run(x)[0]) for m in many)


@pytest.mark.slow
def test_every_way_to_hand_tessel_a_model(setup, tmp_path):
    """README, "Every way to hand Tessel a model": an nn.Module, a saved and loaded
    ExportedProgram (its own example inputs), its GraphModule and torch.compile's backend,
    each calibrated on the example input, give the same outputs bit for bit."""
    model, (x,), _ = setup
    cm = tessel.compile(model, (x,))
    ep = torch.export.export(model, (x,))
    torch.export.save(ep, tmp_path / "tiny.pt2")
    from_ep = tessel.compile(torch.export.load(tmp_path / "tiny.pt2"))
    from_gm = tessel.compile(ep.module(), (x,))
    fast = torch.compile(model, backend="tessel",
                         options={"target": "tnpu-s", "calibration_data": [(x,)]})
    y = fast(x)
    want = cm.run(x.numpy())[0]
    for got in (from_ep.run(x.numpy())[0], from_gm.run(x.numpy())[0], y.numpy()):
        assert np.array_equal(got, want)


def _analysis_table_columns(memories: list[str]) -> list[str]:
    """The columns docs/analysis.md's per-layer table lists, `<memory>` spelt out."""
    text = (Path(__file__).parents[2] / "docs/analysis.md").read_text()
    section = text.split("## Per-layer table", 1)[1]
    table = next(b for b in section.split("\n\n") if b.startswith("| column |"))
    columns = []
    for row in table.splitlines()[2:]:
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            columns += [name.replace("<memory>", m) for m in memories] if "<memory>" in name \
                else [name]
    return columns


@pytest.mark.slow
def test_report_snippet_writes_the_documented_columns(setup, tmp_path):
    """docs/analysis.md's Python snippet writes the three reports; the CSV has the columns its
    per-layer table lists, the trace one track per engine in the documented order, and each
    layer of `Profile.to_json()` the documented keys."""
    from tessel.analysis import build_timeline, write_csv, write_html, write_trace

    model, inputs, calib = setup
    cm = tessel.compile(model, inputs, target="tnpu-s", calibration_data=calib)
    tl = build_timeline(cm)
    write_html(cm, tmp_path / "report.html", fps=30, timeline=tl)
    write_trace(cm, tmp_path / "trace.json", timeline=tl)
    write_csv(cm.profile, tmp_path / "layers.csv", sram=tl.sram_peaks.per_layer_working_set)
    assert "<html" in (tmp_path / "report.html").read_text().lower()
    with open(tmp_path / "layers.csv", newline="") as f:
        header = next(csv.reader(f))
    memories = [m.name for m in cm.arch.offchip]
    assert sorted(header) == sorted(_analysis_table_columns(memories))
    trace = json.loads((tmp_path / "trace.json").read_text())
    tracks = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"]
    assert tracks == ["DMA_IN", "MATRIX", "VECTOR", "DMA_OUT"]
    documented = {"layer", "name", "op", "loc", "mapping", "bound", "cycles", "estimated_cycles",
                  "macs", "mac_utilisation", "bytes_read", "bytes_written", "energy_pj",
                  "busy_cycles", "matrix_tiles", "tile_gemm", "first_instr", "last_instr",
                  "memory_bytes"}
    for layer in json.loads(cm.profile.to_json())["layers"]:
        assert set(layer) == documented


@pytest.mark.slow
def test_compare_and_accuracy_snippet(setup, tmp_path):
    """docs/python.md, "Compare targets, per-layer accuracy": the calls it shows run and
    write what they say; two binaries of one compile compare with no layer changed."""
    from tessel.analysis.compare_html import write_compare_html
    from tessel.arch import load_target

    model, inputs, calib = setup
    qm = tessel.quantize(model, inputs, calibration_data=calib)
    cmp = tessel.compare_targets({"tiny": qm.graph},
                                 [load_target("tnpu-s"), load_target("u55-256")])
    assert "u55-256" in cmp.text(100) and json.loads(cmp.to_json())
    write_compare_html(cmp, tmp_path / "compare.html")
    assert (tmp_path / "compare.html").stat().st_size > 0
    cm = tessel.compile(model, inputs, target="tnpu-s", calibration_data=calib)
    cm.save(tmp_path / "a.tsl")
    cm.save(tmp_path / "b.tsl")
    diff = tessel.compare_binaries(tessel.load(tmp_path / "a.tsl"),
                                   tessel.load(tmp_path / "b.tsl"), "a.tsl", "b.tsl")
    assert diff.changed == () and len(diff.layers) == len(cm.profile.layers)
    acc = tessel.layer_accuracy(qm, inputs)
    worst = acc.worst(3)
    assert len(worst) == 3 and worst[0].sqnr_db <= worst[-1].sqnr_db


@pytest.mark.slow
def test_c_engine_snippet(setup, tmp_path):
    """docs/runtime.md, "From Python": the C engine gives the simulator's outputs bit for bit,
    sample by sample in a batch, and reports its arena size and the MACs it ran."""
    from tessel.runtime.cengine import available

    if available() is not None:
        pytest.skip(available())
    model, inputs, calib = setup
    tessel.compile(model, inputs, target="tnpu-s", calibration_data=calib).save(tmp_path / "m.tsl")
    cm = tessel.load(tmp_path / "m.tsl")
    x = inputs[0].numpy()
    y = cm.run(x, engine="c")
    assert np.array_equal(y[0], cm.run(x)[0])
    xs = np.stack([x, 2 * x, -x])
    ys = cm.run_batch(xs, engine="c")
    assert np.array_equal(ys[0], cm.run_batch(xs)[0])
    assert cm.c_engine.arena_size > 0 and cm.c_engine.macs > 0


@pytest.mark.slow
def test_tosa_snippet(setup, tmp_path):
    """docs/frontend.md, "TOSA in and out": the exported file imports, and compiles to a binary
    equal to its golden model."""
    from tessel.frontend.tosa_export import export_tosa
    from tessel.frontend.tosa_import import import_tosa, tosa_module

    model, inputs, calib = setup
    qm = tessel.quantize(model, inputs, calibration_data=calib)
    exported = export_tosa(qm.graph)
    path = str(tmp_path / "model.tosa")
    with open(path, "wb") as f:
        f.write(exported.to_bytes())
    graph = import_tosa(path)
    module, example = tosa_module(path)
    ops = {n.op.value for n in graph.nodes}
    assert "qconv2d" in ops and "qlinear" not in ops  # the linear layer reads back as a 1x1 conv
    cm = tessel.compile(module, example, target="tnpu-s")
    golden = tessel.quantize(module, example)
    assert np.array_equal(cm.run(*example)[0], golden.run(*example)[0])
