"""`tessel advise --scenario` (tessel.scenario.advise): the limiting job against the timeline,
each knob's figures against a run of the scenario on the relaxed NPU, a missed deadline, the
CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tessel.analysis.advise import relax, relaxations
from tessel.arch import load_target
from tessel.arch.operating import at_point
from tessel.cli import main
from tessel.scenario import load_scenario, parse_scenario
from tessel.scenario.advise import advise_scenario, limiting_job
from tessel.scenario.run import run_scenario

WINDOW_S = 0.05
# the module's tests on one xdist worker: the advice (a run of the scenario per relaxation,
# seconds each) is computed once, not once per worker its tests were handed to
pytestmark = pytest.mark.xdist_group("scenario-advise")


@pytest.fixture(scope="module")
def advice():
    return advise_scenario(load_scenario("xr_glasses"), load_target("tnpu-s"), window_s=WINDOW_S)


def test_the_limiting_job_has_the_largest_response_share_of_its_deadline():
    report = run_scenario(load_scenario("xr_glasses"), load_target("tnpu-s"), window_s=WINDOW_S)
    job, lim = limiting_job(report)
    shares = [j.response / (j.deadline - j.arrival) for j in report.timeline.jobs]
    assert job.response / (job.deadline - job.arrival) == max(shares)
    assert lim.model == job.task
    pm = report.power
    assert lim.slack_ms == pytest.approx(min(pm.ms(j.deadline - j.finish)
                                             for j in report.timeline.task_jobs(job.task)))
    # its window holds its own steps and those that ran before it finished, no more than its
    # response (the NPU never idles while a job is ready)
    assert job.task in lim.window_ms
    assert sum(lim.window_ms.values()) == pytest.approx(lim.response_ms)
    chain = next(c for c in report.scenario.chains() if job.task in c)
    assert set(chain[:chain.index(job.task)]) <= set(lim.window_ms)


@pytest.mark.slow
def test_every_gain_is_a_run_of_the_scenario_on_the_relaxed_npu(advice):
    arch, sc = load_target("tnpu-s"), load_scenario("xr_glasses")
    assert {g.change for g in advice.gains} | {c for c, _ in advice.skipped} == {
        r.label(arch) for r in relaxations(arch)} | {
        f"operating point {p.name} ({p.clock_hz / 1e6:g} MHz, {p.voltage_v:g} V)"
        for p in arch.operating_points if p != arch.nominal_point}
    # an operating point is the same NPU at its clock and voltage, run on the whole scenario
    point = next(p for p in arch.operating_points if p != arch.nominal_point)
    row = next(x for x in advice.gains if x.change.startswith(f"operating point {point.name} "))
    assert row.limit is None and row.area_mm2_delta == 0
    assert row.power_mw == pytest.approx(
        run_scenario(sc, at_point(arch, point), window_s=WINDOW_S).power_mw)
    g = advice.gains[0]
    change = next(r for r in relaxations(arch) if r.label(arch) == g.change)
    relaxed = relax(arch, change)
    scale = relaxed.derived.area_mm2 / arch.derived.area_mm2
    relaxed = dataclasses.replace(relaxed, energy=dataclasses.replace(
        relaxed.energy, static_power_mw=arch.energy.static_power_mw * scale))
    again = run_scenario(sc, relaxed, window_s=WINDOW_S)
    jobs = again.timeline.task_jobs(advice.limiting.model)
    assert g.slack_ms == pytest.approx(again.power.ms(min(j.deadline - j.finish for j in jobs)))
    assert g.power_mw == pytest.approx(again.power_mw)
    assert g.busy_pct == pytest.approx(100 * again.busy)
    assert g.misses == again.misses
    # ranked by the limiting model's slack gained
    gains = [round(x.slack_gain_ms, 6) for x in advice.gains]
    assert gains == sorted(gains, reverse=True)
    assert advice.gains[0].slack_gain_ms > 0


def test_the_layers_are_those_of_the_models_in_the_window(advice):
    assert advice.layers and {x.model for x in advice.layers} <= set(advice.limiting.window_ms)
    cycles = [x.cycles for x in advice.layers]
    assert cycles == sorted(cycles, reverse=True)
    for x in advice.layers:
        assert (x.best_change is None) == (x.best_gain_pct is None)


def test_a_missed_deadline_is_the_limit():
    sc = parse_scenario('[[model]]\nname = "e"\nmodel = "eye_seg"\nrate_hz = 60\n'
                        '[[model]]\nname = "k"\nmodel = "kws_res8"\nrate_hz = 30\n'
                        'deadline_ms = 0.03\n', "x.toml", None)
    report = run_scenario(sc, load_target("tnpu-s"), window_s=WINDOW_S)
    assert report.misses > 0
    _, lim = limiting_job(report)
    assert lim.model == "k" and lim.slack_ms < 0 and lim.response_ms > lim.deadline_ms


def test_cli_advise_scenario(advice, capsys):
    data = json.loads(advice.to_json())  # what --json prints (the CLI runs once, below, as text)
    assert data["limiting"]["model"] in {m.name for m in load_scenario("xr_glasses").models}
    arch = load_target("tnpu-s")
    assert len(data["gains"]) + len(data["skipped"]) == len(relaxations(arch)) + len(
        arch.operating_points) - 1  # every other operating point too
    assert main(["advise", "--scenario", "xr_glasses", "--window-ms", "50", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "limited by" in out and "matrix.rows x2" in out
    assert main(["advise", "gaze", "--scenario", "xr_glasses"]) == 1
    assert "one of them" in capsys.readouterr().err
    assert main(["advise", "gaze", "--policy", "edf"]) == 1
    assert "--policy: only with --scenario" in capsys.readouterr().err
