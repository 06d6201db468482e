"""`tessel advise --scenario` (tessel.codesign.advise): the limiting model and step read off
the run, and each change's figures recomputed by running the scenario on the changed NPU."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tessel.analysis.advise import Knob, Relaxation, relax, relaxations
from tessel.arch import load_target
from tessel.arch.operating import at_point
from tessel.cli import main
from tessel.codesign.advise import advise_scenario
from tessel.scenario import parse_scenario
from tessel.scenario.run import run_scenario

S = load_target("tnpu-s")
TWO = parse_scenario('name = "two"\n[[model]]\nname = "k"\nmodel = "kws_res8"\nrate_hz = 30\n'
                     "deadline_ms = 1\n[[model]]\nname = \"d\"\nmodel = \"depth\"\nrate_hz = 30\n",
                     "two.toml", None)


@pytest.fixture(scope="module")
def advice():
    return advise_scenario(TWO, S)


def test_the_limiting_model_and_step(advice) -> None:
    base = run_scenario(TWO, S)
    ratios = {m.name: m.max_ms / m.deadline_ms for m in base.models}
    assert advice.model == max(ratios, key=ratios.get)
    prof = base.profiles[advice.model]
    i = max(range(len(prof.steps)), key=lambda j: prof.steps[j])
    assert advice.layer == prof.step_names[i]
    assert advice.layer_share == pytest.approx(prof.steps[i] / sum(prof.steps))
    assert advice.power_mw == pytest.approx(base.power_mw) and advice.misses == base.misses


def test_every_change_is_the_scenario_run_on_the_changed_npu(advice) -> None:
    labels = [c.label for c in advice.changes]
    assert len(labels) == len(relaxations(S)) + len(S.operating_points) - 1
    by = {c.label: c for c in advice.changes}
    half = by["operating point half (500 MHz, 0.547 V)"]
    rep = run_scenario(TWO, at_point(S, "half"))
    assert half.power_mw == pytest.approx(rep.power_mw) and half.misses == rep.misses
    assert half.area_mm2 == S.derived.area_mm2
    rows = relax(S, Relaxation(Knob.MATRIX_ROWS))
    scaled = dataclasses.replace(rows, energy=dataclasses.replace(
        rows.energy, static_power_mw=S.energy.static_power_mw * rows.derived.area_mm2
        / S.derived.area_mm2))
    rep = run_scenario(TWO, scaled)
    r = by["matrix.rows x2"]
    assert r.power_mw == pytest.approx(rep.power_mw) and r.area_mm2 > S.derived.area_mm2
    worst = next(m for m in rep.models if m.name == advice.model)
    assert r.limiting_max_ms == pytest.approx(worst.max_ms)
    # ranked: the changes that add no miss, by power
    ok = [c for c in advice.changes if not c.error and c.misses <= advice.misses]
    assert advice.changes[:len(ok)] == tuple(ok)
    assert [c.power_mw for c in ok] == sorted(c.power_mw for c in ok)


def test_cli(tmp_path, capsys) -> None:
    sc = tmp_path / "k.toml"
    sc.write_text('name = "k"\n[[model]]\nname = "k"\nmodel = "kws_res8"\nrate_hz = 3\n')
    assert main(["advise", "--scenario", str(sc), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "k" and data["changes"]
    assert main(["advise", "ds_cnn", "--scenario", str(sc)]) == 1
    assert "name a MODEL or a --scenario" in capsys.readouterr().err
