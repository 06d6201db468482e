"""`tessel estimate`: the analytical path agrees with the simulator on cycles, energy and
traffic (the design-space exploration fast path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_preset
from tessel.cli import main
from tessel.driver import compile_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_driver_e2e import two_conv_net  # noqa: E402


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256", "u65-512", "tnpu-xs"])
def test_estimate_matches_simulated_profile(preset):
    g = two_conv_net(np.random.default_rng(0))
    arch = load_preset(preset)
    est = estimate_graph(g, arch, name="net")
    prof = compile_graph(g, arch, name="net").profile
    assert [x.name for x in est.layers] == [x.name for x in prof.layers]
    assert est.macs == prof.macs
    assert est.bytes_read == prof.bytes_read and est.bytes_written == prof.bytes_written
    assert abs(est.cycles - prof.cycles) <= 0.05 * prof.cycles, (est.cycles, prof.cycles)
    assert abs(est.energy_uj - prof.energy_uj) <= 0.05 * prof.energy_uj


def test_estimate_command_json(capsys):
    assert main(["estimate", "digits_cnn", "--calibration", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "digits_cnn" and data["cycles"] > 0 and data["layers"]


def test_estimate_command_on_chip_residency(capsys):
    """`--[no-]on-chip-residency` reaches the schedule (on by default): with it, fewer cycles
    and DRAM bytes written."""
    runs = []
    for extra in (["--no-on-chip-residency"], []):
        assert main(["estimate", "digits_cnn", "--calibration", "2", "--json", *extra]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    off, on = runs
    assert on["cycles"] < off["cycles"]
    assert sum(on["bytes_written"].values()) < sum(off["bytes_written"].values())
