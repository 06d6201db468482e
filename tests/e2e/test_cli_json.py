"""Every command with results has --json: each one runs on a tiny model file and its stdout
parses as JSON with the fields a script would read."""

from __future__ import annotations

import json

import pytest

from tessel.cli import main

TINY = """\
import torch
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 8 * 8, 10)
    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))
def make():
    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(1, 3, 8, 8),)
"""


def _json(capsys, argv: list[str]):
    assert main(argv) == 0, argv
    out = capsys.readouterr().out
    try:
        return json.loads(out)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{argv}: stdout is not one JSON value: {out[:400]!r}") from exc


@pytest.mark.slow
def test_every_result_command_prints_json(tmp_path, capsys, monkeypatch):
    model_file = tmp_path / "tiny.py"
    model_file.write_text(TINY)
    model = f"{model_file}:make"
    tsl, tir = tmp_path / "tiny.tsl", tmp_path / "tiny.tir"
    space = tmp_path / "space.toml"
    space.write_text("[matrix]\nrows = [8, 16]\n")
    assert {m["name"] for m in _json(capsys, ["models", "--json"])} >= {"ds_cnn", "mobilenet_v2"}
    assert _json(capsys, ["targets", "--json"])[0]["name"]
    assert _json(capsys, ["import", model, "-o", str(tir), "--json"])["nodes"] > 0
    assert _json(capsys, ["verify", str(tir), "--json"])["ok"] is True
    comp = _json(capsys, ["compile", model, "-o", str(tsl), "--calibration", "2", "--json"])
    assert comp["bytes"] == tsl.stat().st_size and comp["cycles"] > 0
    assert _json(capsys, ["run", str(tsl), "--json"])["outputs"]
    monkeypatch.chdir(tmp_path)  # without -o: tiny.tsl in the working directory
    assert _json(capsys, ["compile", model, "--calibration", "2", "--json"])["output"] == \
        "tiny.tsl" and (tmp_path / "tiny.tsl").read_bytes() == tsl.read_bytes()
    assert _json(capsys, ["profile", str(tsl), "--json"])["cycles"] == comp["cycles"]
    assert _json(capsys, ["estimate", model, "--calibration", "2", "--json"])["cycles"] > 0
    assert _json(capsys, ["accuracy", model, "--calibration", "2", "--samples", "2",
                          "--json"])["sqnr_db"]
    assert _json(capsys, ["advise", model, "--calibration", "2", "--json"])["ranked"]
    cmp = _json(capsys, ["compare", model, "--targets", "tnpu-s,tnpu-m", "--calibration", "2",
                         "--json"])
    assert [(r["model"], r["target"]) for r in cmp["results"]] == [
        ("tiny.py:make", "tnpu-s"), ("tiny.py:make", "tnpu-m")]
    assert _json(capsys, ["compare", str(tsl), str(tsl), "--json"])["a"]["cycles"] == \
        comp["cycles"]
    front = _json(capsys, ["explore", model, "--space", str(space), "--out",
                           str(tmp_path / "x"), "--workers", "0", "--calibration", "2",
                           "--json"])["front"]
    assert front and {"latency_ms", "energy_uj", "area_mm2"} <= set(front[0])


# Commands whose output is a file or program text rather than results.
NO_RESULTS = {"opt", "disasm", "asm"}


def test_every_command_has_json_or_is_a_text_tool():
    from tessel.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        actions = [a for a in p._actions if a.dest == "action"]  # `tessel scenario check`
        for full, q in ([(f"{name} {k}", v) for k, v in actions[0].choices.items()] if actions
                        else [(name, p)]):
            has = any("--json" in a.option_strings for a in q._actions)
            assert has or name in NO_RESULTS, f"tessel {full} has no --json"


def test_accuracy_per_layer_prints_the_advice_and_takes_layer_precision(tmp_path, capsys):
    """--per-layer: the layers' losses and every measured candidate with the option that
    applies it; --layer-precision applies one (the ops stay quantised: no new host op)."""
    model_file = tmp_path / "tiny.py"
    model_file.write_text(TINY)
    model = f"{model_file}:make"
    out = _json(capsys, ["accuracy", model, "--calibration", "2", "--samples", "2",
                         "--per-layer", "--advise", "1", "--json"])["per_layer"]
    assert out["losses"][0]["layer"] in {"conv", "head"}
    assert out["cycles"] > 0 and out["layers"]
    assert out["candidates"] and all(c["flag"].startswith("--layer-") for c in out["candidates"])
    plain = _json(capsys, ["accuracy", model, "--calibration", "2", "--samples", "2",
                           "--layer-precision", "conv=int16", "--json"])
    assert plain["sqnr_db"] and not plain["host_ops"] and "per_layer" not in plain
    assert main(["accuracy", model, "--layer-precision", "conv=int4"]) != 0
