"""`tessel estimate --operating-point` and `--set`: the same cycles, the time at the point's
clock, every energy component as the CMOS rule scales it (recomputed here from the nominal
estimate and the point's voltage), the off-chip one unchanged."""

from __future__ import annotations

import json

import pytest

from tessel.arch import load_preset
from tessel.cli import main

S = load_preset("tnpu-s")


def _estimate(capsys, *extra: str) -> dict:
    assert main(["estimate", "ds_cnn", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_at_a_point(capsys) -> None:
    nominal = _estimate(capsys)
    half = _estimate(capsys, "--operating-point", "half")
    p = S.point("half")
    assert half["operating_point"] == {"name": "half", "clock_hz": p.clock_hz,
                                       "voltage_v": p.voltage_v}
    assert nominal["operating_point"]["name"] == "nominal"
    assert half["cycles"] == nominal["cycles"] and half["clock_hz"] == p.clock_hz
    assert half["latency_ms"] == pytest.approx(2 * nominal["latency_ms"])
    dyn, leak = (p.voltage_v / S.voltage_v) ** 2, p.voltage_v / S.voltage_v
    for k, v in nominal["energy_pj"].items():
        want = v if k == "lpddr" else v * leak * 2 if k == "static" else v * dyn
        assert half["energy_pj"][k] == pytest.approx(want, rel=1e-9), k
    assert half["energy_pj"]["lpddr"] > 0
    assert _estimate(capsys, "--operating-point", "1")["energy_pj"] == half["energy_pj"]


def test_the_conservative_dram_figure_by_set(capsys) -> None:
    nominal = _estimate(capsys)
    old = _estimate(capsys, "--set", "energy.lpddr_byte_pj=160")
    assert old["energy_pj"]["lpddr"] == pytest.approx(
        nominal["energy_pj"]["lpddr"] * 160 / S.energy.lpddr_byte_pj)
    assert {k: v for k, v in old["energy_pj"].items() if k != "lpddr"} == \
        {k: v for k, v in nominal["energy_pj"].items() if k != "lpddr"}


def test_bad_point_or_setting_is_refused(capsys) -> None:
    assert main(["estimate", "ds_cnn", "--operating-point", "turbo"]) == 1
    assert "no operating point 'turbo'" in capsys.readouterr().err
    assert main(["estimate", "ds_cnn", "--set", "energy.lpddr_byte_pj"]) == 1
    assert "KEY=VALUE" in capsys.readouterr().err
