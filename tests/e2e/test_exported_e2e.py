"""Saved ExportedPrograms (torch.export.save -> model.pt2) through the CLI: zoo models compile
and run bit-exact; 30 random programs compile (and run bit-exact) or are refused with a named
tessel error, never a traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from random_torch_models import random_torch_model

from tessel.cli import main
from tessel.models import load

pytestmark = pytest.mark.slow


def _check_bit_exact(binary, capsys) -> dict:
    assert main(["run", str(binary), "--check", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["check"]["bit_exact"] is True
    return run


@pytest.mark.parametrize("name", ["digits_cnn", "ds_cnn"])
def test_zoo_pt2_compiles_from_the_cli_bit_exact(name, tmp_path, capsys):
    model, inputs = load(name)
    pt2 = tmp_path / f"{name}.pt2"
    torch.export.save(torch.export.export(model, inputs), pt2)
    out = tmp_path / f"{name}.tsl"
    assert main(["compile", str(pt2), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "cycles" in captured.out
    assert "calibration: the model's example input only (1 sample)" in captured.err
    run = _check_bit_exact(out, capsys)
    assert min(run["check"]["sqnr_db"].values()) > 10
    # --inputs and --calibration-data: other inputs, real calibration samples
    x = inputs[0].numpy()
    np.savez(tmp_path / "x.npz", x * 0.5)
    np.savez(tmp_path / "calib.npz", *[x * s for s in (0.5, 1.0, 2.0)])
    again = tmp_path / "again.tsl"
    assert main(["compile", str(pt2), "-o", str(again), "--inputs", str(tmp_path / "x.npz"),
                 "--calibration-data", str(tmp_path / "calib.npz")]) == 0
    assert "calibration:" not in capsys.readouterr().err
    assert again.read_bytes() != out.read_bytes()  # other calibration, other scales


@pytest.mark.parametrize("chunk", range(3))
def test_random_pt2_compile_or_named_refusal(chunk, tmp_path, capsys):
    outcomes = {}
    for seed in range(chunk, 30, 3):
        model, inputs = random_torch_model(seed)
        pt2 = tmp_path / f"r{seed}.pt2"
        torch.export.save(torch.export.export(model, inputs), pt2)
        out = tmp_path / f"r{seed}.tsl"
        rc = main(["compile", str(pt2), "-o", str(out), "--calibration", "1"])
        err = capsys.readouterr().err
        if rc == 0:
            _check_bit_exact(out, capsys)
            outcomes[seed] = "compiled"
        else:
            assert rc == 1 and "tessel compile: error:" in err, err
            outcomes[seed] = err.strip().splitlines()[-1][:120]
    print(f"\nchunk {chunk}: {outcomes}")
    assert sum(v == "compiled" for v in outcomes.values()) >= len(outcomes) // 2
