"""What torch.export or the IR cannot take: a detector's data-dependent post-processing is cut
off (`--until`, tessel.cut) and stays in PyTorch; complex-valued steps (rfft / irfft) run on the
host as regions between NPU regions. Both run bit-exact against the golden model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tessel.arch import load_preset
from tessel.cli import main
from tessel.driver import compile_graph
from tessel.errors import TesselConfigError, TesselError, TesselExportError
from tessel.frontend.cut import cut, left_out
from tessel.quant.api import quantize

HERE = Path(__file__).parent
SSD = f"{HERE / 'ssdlite_model.py'}:make"
SPECTRAL = f"{HERE / 'spectral_model.py'}:make"


def _ssd():
    import ssdlite_model  # noqa: PLC0415 (tests/e2e is on sys.path under pytest's rootdir)
    return ssdlite_model


@pytest.fixture(autouse=True)
def _on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def test_the_whole_detector_is_refused_with_the_cut_that_avoids_nms():
    model, example = _ssd().make()
    with pytest.raises(TesselExportError) as err:
        quantize(model, example, calibration_samples=1)
    text = str(err.value)
    assert "ssdlite_model.py:" in text and "while order.numel() > 0" in text
    assert "--until MODULE" in text and "head" in text


def test_cut_detector_runs_bit_exact_and_post_processing_matches_pytorch():
    ssd = _ssd()
    model, example = ssd.make()
    cut_model = cut(model, "head")
    assert left_out(cut_model, example) == []  # NMS is code in forward, not a module
    qm = quantize(cut_model, example, calibration_samples=1)
    cm = compile_graph(qm.graph, load_preset("tnpu-s"), name="ssd")
    assert not cm.profile.host_ops
    x = example[0].numpy()
    got = cm.run(x)
    for g, w in zip(got, qm.run(x), strict=True):
        np.testing.assert_array_equal(g, w)
    # the user's post-processing on the compiled outputs, against the float model's detections
    float_logits, float_deltas = cut_model(*example)["head"]
    np.testing.assert_allclose(got[0], float_logits.detach().numpy(), atol=0.05)
    np.testing.assert_allclose(got[1], float_deltas.detach().numpy(), atol=0.05)
    with torch.no_grad():
        boxes = model.anchors + 0.1 * torch.from_numpy(got[1])[0]
        scores, _ = torch.from_numpy(got[0])[0].sigmoid().max(1)
        keep = ssd.nms(boxes[scores > 0.5], scores[scores > 0.5], 0.5)
    assert keep.numel() > 0


def test_cut_names_unknown_modules_and_cuts_that_never_end():
    model, example = _ssd().make()
    with pytest.raises(TesselConfigError, match="did you mean 'head'"):
        cut(model, "hed")
    with pytest.raises(TesselConfigError, match="module paths"):
        cut(model, "head,")
    class Lone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.extra = torch.nn.Linear(2, 2), torch.nn.ReLU()

        def forward(self, x):
            return self.used(x)  # self.extra is registered, never called

    with pytest.raises(TesselError, match="without running extra"):
        cut(Lone(), "extra")(torch.zeros(1, 2))


@pytest.mark.slow
def test_until_from_the_command_line_says_what_stays_in_pytorch(tmp_path, capsys):
    out = tmp_path / "ssd.tsl"
    assert main(["compile", SSD, "--until", "stage1,stage2", "-o", str(out),
                 "--calibration", "1"]) == 0
    text = capsys.readouterr()
    assert "runs in PyTorch, not compiled" in text.err and "(head)" in text.err
    assert "not compiled: the rest of the forward after stage1,stage2 (head)" in text.out
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32))
    # --input: the check re-quantises the model from its source, cut again as recorded
    assert main(["run", str(out), "--input", str(x), "--check", "--json", "--model", SSD]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["check"]["bit_exact"] and report["check"]["reference"] == "re-quantised"
    assert list(report["outputs"]) == ["stage1", "stage2"]


@pytest.mark.slow
def test_complex_steps_run_on_the_host_as_regions(tmp_path, capsys):
    out = tmp_path / "spectral.tsl"
    assert main(["compile", SPECTRAL, "-o", str(out), "--calibration", "1", "--json"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["bit_exact"]
    assert main(["profile", str(out), "--json"]) == 0
    profile = json.loads(capsys.readouterr().out)
    regions = [h for h in profile["host_ops"] if "aten._fft_r2c.default+" in h]
    assert len(regions) == 2, profile["host_ops"]
    assert any("compute complex values" in h for h in regions)


def test_a_complex_output_is_refused_with_the_fix():
    class Out(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x)

    with pytest.raises(TesselError, match="complex64 tensor, which a compiled model cannot "
                       r"return; return a real tensor \(torch.view_as_real"):
        quantize(Out().eval(), (torch.randn(1, 8),), calibration_samples=1)
