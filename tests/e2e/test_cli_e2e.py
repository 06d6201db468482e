"""The backend CLI end to end: compile -> run --check (bit-exact vs golden) -> profile with
reports -> disasm/asm round trip of a compiled binary."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tessel.cli import main
from tessel.models import ZOO, resolve
from tessel.runtime.cengine import available


def _no_build():
    raise AssertionError("the model was built: run without --input needs only its inputs")


def test_compile_run_check_profile(tmp_path, capsys, monkeypatch):
    out = tmp_path / "digits.tsl"
    assert main(["compile", "digits_cnn", "--target", "u55-256", "-o", str(out),
                 "--calibration", "2"]) == 0
    wrote = capsys.readouterr().out
    assert "cycles" in wrote
    with monkeypatch.context() as mp:  # the example inputs and stored references suffice
        mp.setitem(ZOO, "digits_cnn", dataclasses.replace(ZOO["digits_cnn"], factory=_no_build))
        assert main(["run", str(out), "--check", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["check"]["bit_exact"] is True
    assert run["check"]["reference"] == "stored"  # no re-quantisation for the example inputs
    assert run["check"]["float_of"] == "pytorch"
    assert min(run["check"]["sqnr_db"].values()) > 20
    x = tmp_path / "x.npy"
    np.save(x, resolve("digits_cnn").factory()[1][0].numpy())
    assert main(["run", str(out), "--input", str(x), "--check", "--json"]) == 0
    again_run = json.loads(capsys.readouterr().out)
    assert again_run["check"]["reference"] == "re-quantised"
    assert again_run["check"]["bit_exact"] is True
    assert again_run["check"]["sqnr_db"] == pytest.approx(run["check"]["sqnr_db"], abs=1e-4)
    if available() is None:  # the C runtime on the C NPU model: bit-exact, the same SQNR
        assert main(["run", str(out), "--engine", "c", "--check", "--json"]) == 0
        c_run = json.loads(capsys.readouterr().out)
        assert c_run["engine"] == "c" and c_run["check"]["bit_exact"] is True
        assert c_run["check"]["sqnr_db"] == run["check"]["sqnr_db"]
    xb = tmp_path / "xb.npy"  # three samples stacked: simulated together, each checked
    np.save(xb, np.stack([s[0].numpy() for s in resolve("digits_cnn").calibration_data(3)]))
    assert main(["run", str(out), "--input", str(xb), "--batch", "--check", "--json"]) == 0
    batch_run = json.loads(capsys.readouterr().out)
    assert batch_run["check"]["bit_exact"] is True
    assert all(o["shape"][0] == 3 for o in batch_run["outputs"].values())
    html, trace, csv = tmp_path / "r.html", tmp_path / "t.json", tmp_path / "l.csv"
    assert main(["profile", str(out), "--json", "--html", str(html), "--trace", str(trace),
                 "--csv", str(csv)]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["cycles"] > 0 and prof["target"] == "u55-256" and prof["layers"]
    # the compile's summary line (cycles from the timing model alone) is the profile's
    assert f"{prof['cycles']:,} cycles = {prof['latency_ms']:.3f} ms on u55-256" in wrote
    assert f"wrote {out} ({out.stat().st_size:,} bytes)" in wrote
    assert html.stat().st_size > 10_000 and json.loads(trace.read_text())["traceEvents"]
    assert len(csv.read_text().splitlines()) == len(prof["layers"]) + 1
    tasm = tmp_path / "p.tasm"
    assert main(["disasm", str(out), "-o", str(tasm)]) == 0
    again = tmp_path / "again.tsl"
    assert main(["asm", str(tasm), "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()


def test_no_fallback_names_the_host_ops(tmp_path, capsys):
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        return torch.cumsum(self.fc(x), dim=1)\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return M().eval(), (torch.randn(1, 8),)\n")
    assert main(["compile", f"{path}:make", "-o", str(tmp_path / "m.tsl"), "--calibration",
                 "1", "--no-fallback"]) == 1
    err = capsys.readouterr().err
    assert "--no-fallback" in err and "m.py:7" in err


def test_auto_weight_precision_from_the_command_line(tmp_path, capsys):
    """--weights auto: the plan is printed (layers, bytes saved, measured SQNR against int8's
    within the budget), the binary records the chosen types, so `run --check` quantises again
    the same way and is bit-exact; a malformed budget is refused with the expected form."""
    out = tmp_path / "digits_auto.tsl"
    assert main(["compile", "digits_cnn", "--target", "tnpu-s", "-o", str(out),
                 "--calibration", "4", "--weights", "auto", "--accuracy-budget", "sqnr=3"]) == 0
    text = capsys.readouterr().out
    head = next(line for line in text.splitlines() if line.startswith("precision auto:"))
    n4 = int(head.split()[2])
    values = [float(v.split()[0]) for v in head.split("sqnr ")[1].split(" against int8's ")]
    assert values[0] >= values[1] - 3.0, head
    assert "int4" in text and "bytes saved" in text
    x = tmp_path / "x.npy"
    np.save(x, resolve("digits_cnn").factory()[1][0].numpy())
    assert main(["run", str(out), "--input", str(x), "--check", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["check"]["bit_exact"] is True
    tasm = tmp_path / "p.tasm"
    assert main(["disasm", str(out), "-o", str(tasm)]) == 0
    assert tasm.read_text().count("_type=I4") >= (1 if n4 else 0)
    assert main(["compile", "digits_cnn", "-o", str(tmp_path / "bad.tsl"), "--weights", "auto",
                 "--accuracy-budget", "psnr=1"]) != 0
    assert "METRIC=LOSS" in capsys.readouterr().err


def test_auto_weight_precision_fits_the_targets_memory(capsys):
    """--weights auto on a target whose weights memory is smaller than the int8 constants: the
    plan takes int4 layers until the compiled constants fit (the budget then not met, said so),
    and the estimate runs; a memory smaller than even all-int4 is refused naming both sizes."""
    args = ["estimate", "digits_cnn", "--target", "tnpu-xs", "--calibration", "4",
            "--weights", "auto", "--accuracy-budget", "sqnr=0"]
    assert main([*args, "--set", "offchip.flash.size_bytes=16000"]) == 0
    text = capsys.readouterr().out
    head = next(line for line in text.splitlines() if line.startswith("precision auto:"))
    assert int(head.split()[2]) >= 1, head  # some layers int4
    constants = int(head.split("constants ")[1].split()[0].replace(",", ""))
    assert constants <= 16000 and "memory 'flash' has 16,000" in head
    assert "is not met" in text
    assert main([*args, "--set", "offchip.flash.size_bytes=4000"]) != 0
    err = capsys.readouterr().err
    assert "with every layer's weights int4" in err and "memory 'flash' has 4,000" in err
    assert "wdecoder.enabled" in err


def test_int4_weights_from_the_command_line(tmp_path, capsys):
    """--weights int4 with a --layer-weights exception: the binary records the choice, so that
    `run --check` on new inputs quantises the model again the same way (bit-exact); the
    assembly text names the weight types and round-trips."""
    out = tmp_path / "digits4.tsl"
    assert main(["compile", "digits_cnn", "--target", "tnpu-s", "-o", str(out),
                 "--calibration", "2", "--weights", "int4", "--layer-weights", "fc*=int8"]) == 0
    capsys.readouterr()
    x = tmp_path / "x.npy"
    np.save(x, resolve("digits_cnn").factory()[1][0].numpy())
    assert main(["run", str(out), "--input", str(x), "--check", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["check"]["reference"] == "re-quantised" and run["check"]["bit_exact"] is True
    if available() is None:  # int4 weights on the C NPU model
        assert main(["run", str(out), "--engine", "c", "--input", str(x), "--check"]) == 0
        assert "check: C runtime vs golden model: bit-exact" in capsys.readouterr().out
    tasm = tmp_path / "p.tasm"
    assert main(["disasm", str(out), "-o", str(tasm)]) == 0
    text = tasm.read_text()
    assert "w_type=I4" in text and "b_type=I8" in text  # convs int4, the fc* head int8
    again = tmp_path / "again.tsl"
    assert main(["asm", str(tasm), "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    assert main(["compile", "digits_cnn", "-o", str(tmp_path / "bad.tsl"), "--weights",
                 "int3"]) != 0
    assert main(["compile", "digits_cnn", "-o", str(tmp_path / "bad.tsl"),
                 "--layer-weights", "fc"]) != 0
    assert "expected PATTERN=TYPE" in capsys.readouterr().err


def test_run_check_of_a_tflite_model_names_its_float_reference(tmp_path, capsys):
    """A TFLite model's float reference is its quantised graph run in float (quantize /
    dequantize kept), not float PyTorch: the check line says so."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "small_cnn.tflite"
    out = tmp_path / "m.tsl"
    assert main(["compile", str(src), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert "SQNR vs the quantised graph in float: " in text and "PyTorch" not in text
