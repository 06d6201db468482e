"""DVFS on a scenario (tessel.codesign.dvfs): the point each policy picks is checked
against every point run by hand, and the report at it is the scenario run at that point."""

from __future__ import annotations

import json

import pytest

from tessel.arch import load_target
from tessel.arch.dvfs import DvfsPolicy
from tessel.arch.operating import at_point
from tessel.cli import main
from tessel.codesign.dvfs import run_dvfs
from tessel.scenario import parse_scenario
from tessel.scenario.run import run_scenario

S = load_target("tnpu-s")


def _eye_seg(deadline_ms: float):
    """eye_seg alone at 60 Hz with a deadline of its own (0.57 ms at tnpu-s's 1 GHz)."""
    return parse_scenario(f'name = "one"\n[[model]]\nname = "eye_seg"\nmodel = "eye_seg"\n'
                          f"rate_hz = 60\ndeadline_ms = {deadline_ms}\n", "one.toml", None)


@pytest.fixture(scope="module")
def by_point():
    """The scenario, with a 1.5 ms deadline, run at every point without gating."""
    sc = _eye_seg(1.5)
    return sc, {p.name: run_scenario(sc, at_point(S, p)) for p in S.operating_points}


def test_slowest_is_the_slowest_point_without_misses(by_point) -> None:
    sc, runs = by_point
    # the point the brute force picks: the slowest with no miss (quarter misses 1.5 ms here)
    meeting = [p for p in S.operating_points if runs[p.name].misses == 0]
    assert runs["quarter"].misses > 0 and meeting
    want = min(meeting, key=lambda p: p.clock_hz)
    got = run_dvfs(sc, S, DvfsPolicy.SLOWEST)
    assert got.choice.point == want == S.point("half") and got.choice.feasible
    assert [r.point.name for r in got.runs] == ["quarter", "half"]
    assert got.report.power_mw == pytest.approx(runs["half"].power_mw)
    assert got.report.power.clock_hz == want.clock_hz
    assert [r.misses for r in got.runs] == [runs["quarter"].misses, 0]


def test_race_runs_the_fastest_point_power_gated(by_point) -> None:
    sc, runs = by_point
    got = run_dvfs(sc, S, DvfsPolicy.RACE, idle_gating=0.0)
    assert got.choice.point == S.point("nominal") and got.report.power.idle_gating == 1.0
    gated = run_scenario(sc, S, idle_gating=1.0)
    assert got.report.power_mw == pytest.approx(gated.power_mw)
    # gating removes the idle leakage: less than the ungated nominal run
    assert got.report.power_mw < runs["nominal"].power_mw


def test_no_point_meets_an_impossible_deadline() -> None:
    got = run_dvfs(_eye_seg(0.1), S, DvfsPolicy.SLOWEST)
    assert not got.choice.feasible and got.choice.point == S.point("nominal")
    assert [r.point.name for r in got.runs] == ["quarter", "half", "nominal"]
    assert "misses deadlines at every point" in got.summary()


def test_cli_dvfs(capsys) -> None:
    assert main(["scenario", "run", "xr_glasses", "--target", "tnpu-s", "--dvfs", "slowest",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dvfs"]["policy"] == "slowest" and data["dvfs"]["feasible"]
    assert data["deadline_misses"] == 0
    chosen = data["dvfs"]["point"]["name"]
    assert data["dvfs"]["runs"][-1]["point"] == chosen
    assert data["average_power_mw"] == pytest.approx(data["dvfs"]["runs"][-1]["average_power_mw"])


def test_cli_html_shows_the_dvfs_decision(tmp_path, capsys) -> None:
    """`scenario run --dvfs ... --html`: the page names the chosen operating point and lists
    every point the policy ran, with its power and misses; without --dvfs, no such section."""
    import re

    page = tmp_path / "xr.html"
    assert main(["scenario", "run", "xr_glasses", "--target", "tnpu-s", "--dvfs", "slowest",
                 "--window-ms", "50", "--json", "--html", str(page)]) == 0
    data = json.loads(capsys.readouterr().out)["dvfs"]
    text = page.read_text()
    chosen = data["point"]["name"]
    assert "<h2>DVFS</h2>" in text and f"operating point <b>{chosen}</b>" in text
    table = text[text.index('id="scenario-dvfs-runs"'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]  # (the header row first)
    assert len(rows) == len(data["runs"])
    for row, run in zip(rows, data["runs"], strict=True):
        assert run["point"] in row and f"{run['average_power_mw']:.3f}" in row
        assert ("yes" in row) == (run["point"] == chosen)
    plain = tmp_path / "plain.html"
    assert main(["scenario", "run", "xr_glasses", "--target", "tnpu-s", "--window-ms", "50",
                 "--json", "--html", str(plain)]) == 0
    capsys.readouterr()
    assert "<h2>DVFS</h2>" not in plain.read_text()
