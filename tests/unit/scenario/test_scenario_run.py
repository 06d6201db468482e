"""`tessel scenario run` (tessel.scenario.run / report / switch / trace): the shipped XR
scenario on tnpu-s, its figures recomputed here from the timeline and the models' estimates,
switch costs, release jitter, the CLI's outputs and its errors."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_target
from tessel.cli import main
from tessel.errors import TesselCompileError, TesselConfigError
from tessel.scenario import load_scenario, parse_scenario
from tessel.scenario.profile import quantised_graph
from tessel.scenario.report import STATIC_IDLE, SWITCH
from tessel.scenario.run import run_scenario
from tessel.scenario.scheduler import Policy, SliceKind, Task, simulate
from tessel.scenario.switch import transfer


@pytest.fixture(scope="module")
def xr():
    return run_scenario(load_scenario("xr_glasses"), load_target("tnpu-s"), idle_gating=0.5)


def test_xr_glasses_meets_its_deadlines_on_tnpu_s(xr):
    sc, tl = xr.scenario, xr.timeline
    assert xr.misses == 0
    for m in sc.models:  # one job per period of the hyperperiod
        assert len(tl.task_jobs(m.name)) == round(m.rate_hz * sc.hyperperiod_s)
    for chain in sc.chains():  # a frame's job waits for its predecessor's
        for a, b in zip(chain, chain[1:], strict=False):
            for ja, jb in zip(tl.task_jobs(a), tl.task_jobs(b), strict=True):
                assert jb.start >= ja.finish
    slices = sorted(tl.slices, key=lambda s: s.start)
    assert all(x.end <= y.start for x, y in zip(slices, slices[1:], strict=False))


def test_figures_recomputed_from_the_timeline(xr):
    arch, tl = load_target("tnpu-s"), xr.timeline
    busy = sum(len(tl.task_jobs(n)) * p.cycles for n, p in xr.profiles.items())
    busy += sum(s.end - s.start for s in tl.slices if s.kind is not SliceKind.STEP)
    assert tl.busy() == busy and xr.busy == pytest.approx(busy / xr.span)
    dynamic = sum(len(tl.task_jobs(n)) * sum(p.dynamic_pj.values())
                  for n, p in xr.profiles.items())
    seconds = xr.span / arch.clock_hz
    static_mw = arch.energy.static_power_mw * (busy + 0.5 * (xr.span - busy)) / xr.span
    want_mw = (dynamic + xr.energy_pj[SWITCH]) * 1e-9 / seconds + static_mw
    assert xr.power_mw == pytest.approx(want_mw, rel=1e-9)
    # the most urgent model, released with nothing ahead of it, takes exactly its estimate
    first = min(xr.models, key=lambda m: m.priority)
    assert first.max_ms == pytest.approx(1e3 * first.cycles / arch.clock_hz)


def test_the_profiles_are_the_estimates_of_tessel_estimate(xr):
    arch = load_target("tnpu-s")
    m = xr.scenario.model("hand_det")
    est = estimate_graph(quantised_graph(m), arch)
    prof = xr.profiles["hand_det"]
    assert prof.cycles == est.cycles
    dyn = {k: v for k, v in est.energy_pj.items() if k != "static"}
    assert prof.dynamic_pj == pytest.approx(dyn)


def test_idle_gating_removes_idle_leakage():
    sc, arch = load_scenario("xr_glasses"), load_target("tnpu-s")
    full = run_scenario(sc, arch, window_s=0.05, idle_gating=1.0)
    none = run_scenario(sc, arch, window_s=0.05, idle_gating=0.0)
    assert full.energy_pj[STATIC_IDLE] == 0 and none.energy_pj[STATIC_IDLE] > 0
    assert none.power_mw - full.power_mw == pytest.approx(
        none.power.power_mw(none.energy_pj[STATIC_IDLE], none.span))


def test_a_preempted_job_pays_save_and_restore():
    low = Task("low", Fraction(100), 100, 2, (5, 5), save=(3, 0), restore=(2, 0))
    high = Task("high", Fraction(100), 100, 1, (4,), offset=2)
    tl = simulate([low, high], 50, Policy.FIXED)
    kinds = [(s.task, s.kind, s.start, s.end) for s in tl.slices]
    assert kinds == [("low", SliceKind.STEP, 0, 5), ("low", SliceKind.SAVE, 5, 8),
                     ("high", SliceKind.STEP, 8, 12), ("low", SliceKind.RESTORE, 12, 14),
                     ("low", SliceKind.STEP, 14, 19)]
    assert tl.task_jobs("low")[0].preemptions == 1
    # not preemptible: no switch, the urgent job waits for the whole job
    tl = simulate([low, high], 50, Policy.FIXED, preemptive=False)
    assert tl.task_jobs("high")[0].finish == 14 and tl.busy(SliceKind.SAVE) == 0


def test_transfers_follow_the_memory_parameters():
    arch = load_target("tnpu-s")
    mem = arch.offchip[0]
    one = transfer(64_000, arch, load=True)
    assert one.cycles >= mem.latency_cycles + math.ceil(64_000 / mem.bytes_per_cycle)
    assert one.energy_pj >= 64_000 * arch.energy.offchip_byte_pj(mem.kind)
    assert transfer(0, arch, load=False).cycles == 0
    assert transfer(128_000, arch, load=False).cycles > one.cycles


def test_release_jitter_is_seeded_and_bounded():
    tasks = [Task("a", Fraction(50), 50, 1, (3,), jitter=9), Task("b", Fraction(70), 70, 2, (4,))]
    runs = {seed: simulate(tasks, 2000, seed=seed) for seed in (0, 0, 1)}
    assert runs[0] == simulate(tasks, 2000, seed=0)
    delays = [j.release - j.arrival for j in runs[0].task_jobs("a")]
    assert all(0 <= d <= 9 for d in delays) and len(set(delays)) > 1
    assert delays != [j.release - j.arrival for j in runs[1].task_jobs("a")]
    assert all(j.release == j.arrival for j in runs[1].task_jobs("b"))


def test_a_model_that_does_not_fit_is_named():
    arch = load_target("tnpu-s").with_param("offchip.lpddr.size_bytes", 1 << 20)
    sc = parse_scenario('[[model]]\nname = "g"\nmodel = "gaze"\nrate_hz = 60\n', "x.toml", None)
    with pytest.raises(TesselCompileError, match="scenario model 'g' \\(gaze\\) on tnpu-s: "
                                                 "constants need"):
        run_scenario(sc, arch)


def test_bad_windows_are_refused():
    sc, arch = load_scenario("xr_glasses"), load_target("tnpu-s")
    for bad in (0.0, -1.0, 1e6):
        with pytest.raises(TesselConfigError, match="window"):
            run_scenario(sc, arch, window_s=bad)
    with pytest.raises(TesselConfigError, match="gating"):
        run_scenario(sc, arch, idle_gating=1.5)


def test_cli_run_json_trace_and_html(tmp_path, capsys):
    trace, page = tmp_path / "t.json", tmp_path / "r.html"
    assert main(["scenario", "run", "xr_glasses", "--target", "tnpu-s", "--json",
                 "--policy", "edf", "--window-ms", "100", "--trace", str(trace),
                 "--html", str(page)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policy"] == "edf" and data["deadline_misses"] == 0
    assert data["window_ms"] == pytest.approx(100.0)
    assert [m["name"] for m in data["models"]] == [m.name for m in
                                                  load_scenario("xr_glasses").models]
    assert len(data["jobs"]) == sum(m["jobs"] for m in data["models"])
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["tid"] for e in events if e["name"] == "thread_name"}
    assert len(tracks) == 6  # one track per model
    jobs = [e for e in events if e.get("cat") == "job"]
    assert len(jobs) == len(data["jobs"])
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    text = page.read_text()
    assert 'id="scenario-timeline"' in text and 'id="scenario-power"' in text


def test_cli_run_text(capsys):
    assert main(["scenario", "run", "xr_glasses", "--window-ms", "50", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "deadline misses 0" in out and "eye_seg" in out and "lpddr" in out


def test_functional_first_frames_are_bit_exact():
    from tessel.scenario.functional import check_first_frames

    sc = parse_scenario('[[model]]\nname = "k"\nmodel = "kws_res8"\nrate_hz = 3\n', "x.toml",
                        None)
    (check,) = check_first_frames(sc, load_target("tnpu-s"))
    assert check.bit_exact and check.mismatched == 0
    # the simulator's cycles and the estimate the schedule used agree within 2 %
    assert abs(check.simulated_cycles - check.estimated_cycles) <= 0.02 * check.simulated_cycles


def test_cli_run_never_overwrites_its_inputs(tmp_path, capsys):
    toml = tmp_path / "xr.toml"
    toml.write_text(_shipped_text())
    before = toml.read_bytes()
    assert main(["scenario", "run", str(toml), "--html", str(toml)]) == 1
    assert "refusing to write" in capsys.readouterr().err and toml.read_bytes() == before
    assert main(["scenario", "run", str(toml), "--trace", str(tmp_path / "no" / "t.json")]) == 1
    assert "does not exist" in capsys.readouterr().err


def _shipped_text() -> str:
    from importlib import resources

    return (resources.files("tessel.scenario") / "scenarios" / "xr_glasses.toml").read_text()


def test_errors_name_the_scenario_model_whatever_their_class():
    from tessel.errors import TesselParseError, TesselUnsupportedOpError
    from tessel.scenario.profile import named

    err = named(TesselCompileError("too big"), "scenario model 'g'")
    assert type(err) is TesselCompileError and str(err) == "scenario model 'g': too big"
    err = named(TesselParseError("bad", 3, 4, "x.tir"), "scenario model 'g'")
    assert type(err) is TesselParseError and err.line == 3
    assert str(err) == "scenario model 'g': x.tir:3:4: bad"
    err = named(TesselUnsupportedOpError([("fft", "m.py:3")]), "scenario model 'g'")
    assert str(err).startswith("scenario model 'g': 1 unsupported op(s):\n  fft at m.py:3")
    assert err.unsupported == [("fft", "m.py:3")]


def test_cli_run_unknown_model_is_named_with_its_line(tmp_path, capsys):
    toml = tmp_path / "s.toml"
    toml.write_text('[[model]]\nname = "e"\nmodel = "eye_segg"\nrate_hz = 60\n')
    assert main(["scenario", "run", str(toml)]) == 1
    err = capsys.readouterr().err
    assert "s.toml:3:" in err and "unknown model 'eye_segg'" in err and "eye_seg" in err


def test_a_dynamic_energy_scale_scales_every_dynamic_energy(xr):
    import dataclasses

    half = dataclasses.replace(xr, power=dataclasses.replace(xr.power, dynamic_scale=0.5))
    for k, v in xr.energy_pj.items():
        static = k.startswith("static")
        assert half.energy_pj[k] == pytest.approx(v if static else 0.5 * v)


def test_an_operating_point_changes_every_conversion_together():
    from tessel.scenario.power import PowerModel

    sc, arch = load_scenario("xr_glasses"), load_target("tnpu-s")
    nominal = run_scenario(sc, arch, window_s=0.05)
    slow = run_scenario(sc, arch, window_s=0.05, power=PowerModel(
        arch.clock_hz // 2, arch.energy.static_power_mw / 2, dynamic_scale=0.6))
    first = min(nominal.models, key=lambda m: m.priority).name
    fast_ms = next(m.max_ms for m in nominal.models if m.name == first)
    assert next(m.max_ms for m in slow.models if m.name == first) == pytest.approx(2 * fast_ms)
    for k, v in nominal.energy_pj.items():
        if not k.startswith("static") and v:
            assert slow.energy_pj[k] == pytest.approx(0.6 * v)
