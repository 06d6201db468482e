"""explore(): exhaustive Pareto front on digits_cnn, resume without recomputing, identical
results on 1 and 2 workers, output files, optuna search, the CLI."""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import sys

import pytest
import torch

from tessel.analysis.explore import explore
from tessel.analysis.explore_space import LatencyAgg
from tessel.arch import load_target
from tessel.models.digits import DigitsCNN
from tessel.quant.api import quantize

SPACE = {"matrix": {"rows": [8, 16], "cols": [8, 16, 32]}, "vector": {"lanes": [16, 32]}}


@pytest.fixture(scope="module")
def graphs():
    """digits_cnn's network (random weights: the costs depend on shapes, not values)."""
    torch.manual_seed(0)
    net = DigitsCNN().eval()
    calib = [(torch.rand(1, 1, 8, 8),) for _ in range(2)]
    qm = quantize(net, calib[0], calibration_data=calib, calibration_samples=2)
    return {"digits_cnn": qm.graph}


def _dominated(p, q) -> bool:
    a, b = q.objectives(LatencyAgg.SUM), p.objectives(LatencyAgg.SUM)
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def test_exhaustive_front_is_non_dominated(graphs, tmp_path):
    res = explore(graphs, SPACE, out=tmp_path, workers=0)
    assert len(res.points) == 12 and res.evaluated == 12 and all(p.feasible for p in res.points)
    front_keys = {p.key for p in res.front}
    brute = {p.key for p in res.points if not any(_dominated(p, q) for q in res.points)}
    assert front_keys == brute and 1 <= len(front_keys) < 12
    rows = list(csv.DictReader(open(tmp_path / "pareto.csv")))
    assert [r["arch"] for r in rows] == [p.arch for p in res.front]
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    for p in res.front:
        arch = load_target(tmp_path / "presets" / f"{p.arch}.toml")
        assert arch.name == p.arch and arch.derived.area_mm2 == pytest.approx(p.area_mm2)
    assert "| arch |" in res._repr_markdown_()


def test_resume_computes_only_new_points(graphs, tmp_path):
    small = {"matrix": {"rows": [8, 16], "cols": [8, 16]}}
    first = explore(graphs, small, out=tmp_path, workers=0)
    assert first.evaluated == 4
    bigger = {"matrix": {"rows": [8, 16], "cols": [8, 16, 32]}}
    second = explore(graphs, bigger, out=tmp_path, workers=0)
    assert second.evaluated == 2 and len(second.points) == 6
    old = {p.key: p for p in first.points}
    assert all(second_p == old[second_p.key] for second_p in second.points if second_p.key in old)
    assert len((tmp_path / "study.jsonl").read_text().splitlines()) == 6
    third = explore(graphs, bigger, out=tmp_path, workers=0)
    assert third.evaluated == 0 and {p.key for p in third.front} == {p.key for p in second.front}


def test_one_and_two_workers_give_the_same_front(graphs, tmp_path):
    one = explore(graphs, SPACE, out=tmp_path / "w1", workers=1)
    two = explore(graphs, SPACE, out=tmp_path / "w2", workers=2)
    assert [p.key for p in one.front] == [p.key for p in two.front]
    assert [p.objectives(LatencyAgg.SUM) for p in one.front] == \
        [p.objectives(LatencyAgg.SUM) for p in two.front]


def test_constraints_and_max_latency(graphs):
    space = dict(SPACE, constraints={"max_area_mm2": 0.37}, objectives={"latency": "max"})
    res = explore(graphs, space, workers=0)
    assert res.front and all(p.area_mm2 <= 0.37 for p in res.front)
    assert res.evaluated == 12 and res.files == ()


def test_optuna_search_evaluates_trials_distinct_points_and_resumes(graphs, tmp_path):
    space = {"matrix": {"rows": [4, 8, 16, 32], "cols": [4, 8, 16, 32],
                        "dataflow": ["WEIGHT_STATIONARY", "OUTPUT_STATIONARY"]}}
    res = explore(graphs, space, out=tmp_path, workers=0, trials=10, search="nsga2")
    assert res.search.value == "nsga2" and res.evaluated == 10 and len(res.points) == 10
    again = explore(graphs, space, out=tmp_path, workers=0, trials=14, search="tpe")
    assert again.evaluated == 4 and len(again.points) == 14


def test_cli_json(graphs, tmp_path, capsys, monkeypatch):
    from tessel.analysis import explore as mod
    from tessel.cli.explore import register

    monkeypatch.setattr(mod, "quantised_graphs", lambda *a, **k: graphs)
    (tmp_path / "space.toml").write_text('[matrix]\nrows = [8, 16]\n')
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["explore", "digits_cnn", "--space", str(tmp_path / "space.toml"),
                              "--out", str(tmp_path / "o"), "--workers", "0", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["models"] == ["digits_cnn"] and out["front"]
    assert {"arch", "latency_ms", "energy_uj", "area_mm2", "matrix.rows"} <= set(out["front"][0])


def test_affinity_queues_split_every_point_once_by_what_workers_share():
    """Each point in exactly one worker's run, the runs about equal; a run holds one program
    key (SRAM size here) before the next, then one array width, so a worker's search cache
    serves its points (explore_run.affinity_queues)."""
    from tessel.analysis.explore_run import affinity_queues
    from tessel.analysis.explore_space import parse_space

    space = parse_space({"matrix": {"rows": [8, 16], "cols": [8, 16]},
                         "vector": {"lanes": [16, 32]},
                         "onchip": {"sram_bytes": [262_144, 524_288]}})
    points = list(space.points())
    base = load_target("tnpu-s")
    for n in (1, 2, 3):
        queues = affinity_queues(points, n, base)
        got = [p for q in queues for p in q]
        assert sorted(map(repr, got)) == sorted(map(repr, points))
        assert max(map(len, queues)) - min(map(len, queues)) <= 1
    halves = affinity_queues(points, 2, base)
    for q in halves:  # two SRAM sizes, two workers: one size each
        assert len({p["onchip.sram_bytes"] for p in q}) == 1
    quarters = affinity_queues(points, 4, base)
    for q in quarters:
        assert len({(p["onchip.sram_bytes"], p["matrix.cols"]) for p in q}) == 1


def _runs_points() -> list[dict]:
    """Two SRAM sizes (two program keys) x two array widths x two DRAM bandwidths."""
    from tessel.analysis.explore_space import parse_space

    return list(parse_space({"matrix": {"cols": [8, 16]},
                             "onchip": {"sram_bytes": [262_144, 524_288]},
                             "dram_bytes_per_cycle": [8, 16]}).points())


def test_runs_queue_the_points_as_affinity_queues_does_with_their_keys_made_once(monkeypatch):
    """Runs computes each point's affinity key once (its NpuArch built once) and queues the
    points as affinity_queues does on its own."""
    from tessel.analysis import explore_run

    points, base = _runs_points(), load_target("tnpu-s")
    expected = [[repr(p) for p in q] for q in explore_run.affinity_queues(points, 3, base)]
    made = []
    real = explore_run.affinity_key
    monkeypatch.setattr(explore_run, "affinity_key", lambda p, b: made.append(id(p)) or real(p, b))
    runs = explore_run.Runs(points, 3, base)
    assert [[repr(p) for p in q] for q in runs.queues] == expected
    assert sorted(made) == sorted(map(id, points))


def test_a_worker_done_with_its_run_takes_the_last_point_of_the_longest():
    """Nothing measured yet: a worker done with its run takes the last point of the longest
    other run (explore_run.Runs)."""
    from tessel.analysis.explore_run import Runs

    runs = Runs(_runs_points(), 2, load_target("tnpu-s"))
    own = [list(q) for q in runs.queues]
    assert [runs.next(0) for _ in range(4)] == own[0]
    assert runs.next(0) is own[1][-1] and runs.next(0) is own[1][-2]
    assert runs.next(1) is own[1][0] and runs.next(1) is own[1][1]
    assert runs.next(0) is None and runs.next(1) is None


def test_a_worker_done_with_its_run_takes_a_point_only_where_that_ends_the_sweep_sooner():
    """Measured: a point of another program key costs the thief a cold search (1 s here)
    against 0.1 s for its owner, alike in all but the DRAM: the thief takes it only if the
    owner's whole run left would take longer."""
    from tessel.analysis.explore_run import Runs, Warmth

    def measured() -> tuple[Runs, list[list[dict]]]:
        runs = Runs(_runs_points(), 2, load_target("tnpu-s"))
        own = [list(q) for q in runs.queues]
        for i in (0, 1):  # each worker its first point (cold), then its twin (warm)
            assert runs.warmth(i, own[i][0]) is Warmth.COLD
            runs.done(runs.next(i), 1.0)
            assert runs.warmth(i, own[i][1]) is Warmth.WARM
            runs.done(runs.next(i), 0.1)
        return runs, own

    runs, own = measured()
    assert runs.next(0) is own[0][2]  # (its own: a point of its program key, not seen)
    assert runs.warmth(0, own[0][2]) is Warmth.WARM  # sent: its group is seen now
    runs.done(own[0][2], 0.5)  # PROGRAMS measured: 0.5 s
    assert runs.next(0) is own[0][3]
    runs.done(own[0][3], 0.1)
    # worker 0 is done; worker 1 has 2 points left of a group it has not started (0.5 s each
    # for it, 1 s for worker 0, whose program key is the other): 1 s <= 0.5 + 0.5, taken
    assert runs.warmth(0, own[1][3]) is Warmth.COLD
    assert runs.steals(0, 1) and runs.next(0) is own[1][3]
    # then one point left, 0.5 s for its owner, 0.1 s for worker 0 (the group it has started)
    assert runs.next(0) is own[1][2] and runs.next(0) is None

    runs, own = measured()
    for p in own[0][2:]:
        assert runs.next(0) is p
        runs.done(p, 0.5)
    runs.next(1)  # worker 1 starts its last group: one point left, 0.1 s for it
    assert not runs.steals(0, 1) and runs.next(0) is None  # (1 s for the thief: left alone)
    assert runs.next(1) is own[1][3] and runs.next(1) is None


def test_runs_hand_out_every_point_once_whatever_the_durations():
    """Every point to exactly one worker, each worker's own run in order, whatever the
    measured seconds and the finishing order."""
    import random

    from tessel.analysis.explore_run import Runs

    points = [dict(p) for p in _runs_points() for _ in range(3)]  # (equal, distinct dicts)
    for seed in range(20):
        rnd = random.Random(seed)
        n = rnd.choice([2, 3])
        runs = Runs(points, n, load_target("tnpu-s"))
        own = [list(q) for q in runs.queues]
        given: list[list[dict]] = [[] for _ in range(n)]
        busy: dict[int, dict] = {}
        for i in range(n):
            p = runs.next(i)
            if p is not None:
                busy[i] = p
        while busy:
            i = rnd.choice(sorted(busy))
            p = busy.pop(i)
            given[i].append(p)
            runs.done(p, rnd.choice([0.05, 0.1, 0.5, 2.0]))
            q = runs.next(i)
            if q is not None:
                busy[i] = q
        assert sorted(map(id, (p for g in given for p in g))) == sorted(map(id, points))
        for i in range(n):
            mine = [p for p in given[i] if any(p is q for q in own[i])]
            assert [id(p) for p in mine] == [id(p) for p in own[i]][:len(mine)]


def test_a_worker_with_points_ahead_times_compiled_after_its_first(graphs, monkeypatch):
    """evaluate_point(ahead=k): the programs the point timed, k times over, reaching the tier's
    threshold switch the step timing to the compiled loop (explore_run, step_estimate's
    expect_programs); too few points ahead leave the tier counting; the figures are the
    same either way."""
    from tessel.analysis.explore_run import evaluate_point
    from tessel.schedule import estimate as step_estimate

    base = load_target("tnpu-s")
    point = {"matrix.rows": 8, "matrix.cols": 16, "vector.lanes": 32}
    monkeypatch.setattr(step_estimate, "_TIMED", [0])
    monkeypatch.setattr(step_estimate, "_RUNS", {})  # (time every program again)
    ref = evaluate_point(point, graphs, base, cache=False)
    per_point = step_estimate.programs_run()
    assert per_point > 0
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 3 * per_point)
    for ahead, compiled in ((1, False), (2, True)):  # 1 + 1 points < 3, 1 + 2 points = 3
        monkeypatch.setattr(step_estimate, "_TIMED", [0])
        monkeypatch.setattr(step_estimate, "_RUNS", {})
        got = evaluate_point(point, graphs, base, cache=False, ahead=ahead)
        assert (step_estimate.programs_run() == 3 * per_point) is compiled, ahead
        assert got.models == ref.models and got.per_model == ref.per_model


def test_the_weight_decoder_is_a_design_parameter(graphs, tmp_path):
    """`wdecoder.enabled` varies like any explorable parameter: its points named wd0 / wd1,
    the decoder's area counted, each point's latency the compression-aware estimate."""
    from tessel.analysis.estimate import estimate_graph
    from tessel.analysis.explore_space import build_arch

    res = explore(graphs, {"wdecoder": {"enabled": [False, True]}}, out=tmp_path, workers=0)
    by = {p.arch.rsplit("-", 1)[1]: p for p in res.points}
    assert set(by) == {"wd0", "wd1"}
    assert by["wd1"].area_mm2 > by["wd0"].area_mm2
    base = load_target("tnpu-s")
    for on, p in ((False, by["wd0"]), (True, by["wd1"])):
        arch = build_arch(base, {"wdecoder.enabled": on})
        est = estimate_graph(graphs["digits_cnn"], arch, timing_only=True)
        assert p.latency_ms(LatencyAgg.SUM) == pytest.approx(est.latency_ms)


@pytest.mark.skipif(sys.platform == "darwin" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="local workers are forked only where the platform forks safely")
def test_local_workers_are_forked_whatever_the_default_start_method(graphs, monkeypatch):
    """A local worker is forked from this process, so it inherits the compile path's imports
    and state, also where the default start method is spawn (in a process multiprocessing
    spawned; forkserver on newer Pythons): here a stand-in for evaluate_point, set in this
    process only, answers the point."""
    from tessel.analysis import explore_run

    def stand_in(point, graphs, base, context, ahead=0):
        return explore_run._infeasible("key", point, tuple(graphs), "stand-in", "inherited", 0.0)

    monkeypatch.setattr(explore_run, "evaluate_point", stand_in)
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        runner = explore_run.LocalRunner(graphs, load_target("tnpu-s"), 1)
        try:
            got = list(runner.run([{"matrix.rows": 8}]))
        finally:
            runner.close()
    finally:
        multiprocessing.set_start_method(before, force=True)
    assert [(r.arch, r.reason) for r in got] == [("stand-in", "inherited")]
