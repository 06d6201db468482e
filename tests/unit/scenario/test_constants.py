"""Constants kept on chip across frames (tessel.scenario.constants): the plan against the
exhaustive choice, the energy it moves, and a scenario run with SRAM reserved for it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.arch import load_target
from tessel.cli import main
from tessel.errors import TesselConfigError
from tessel.scenario import load_scenario
from tessel.scenario.constants import Candidate, plan_constants, reserves
from tessel.scenario.profile import profile_model, with_resident_constants
from tessel.scenario.run import run_scenario


def exhaustive(cands, capacity):
    best = 0.0
    for k in range(len(cands) + 1):
        for pick in itertools.combinations(cands, k):
            if sum(c.nbytes for c in pick) <= capacity:
                best = max(best, sum(c.saving_pj_per_s for c in pick))
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 100), st.floats(0, 1e3)), max_size=7),
       st.integers(0, 300))
def test_plan_fits_and_saves_at_least_half_the_best(items, capacity):
    cands = [Candidate(f"m{k}", n, s) for k, (n, s) in enumerate(items)]
    plan = plan_constants(cands, capacity)
    chosen = [c for c in cands if c.name in plan.resident]
    assert plan.resident_bytes == sum(c.nbytes for c in chosen) <= capacity
    assert all(c.saving_pj_per_s > 0 for c in chosen)
    assert 2 * sum(c.saving_pj_per_s for c in chosen) >= exhaustive(cands, capacity) - 1e-9


def test_plan_prefers_the_best_single_model_over_small_dense_ones():
    cands = [Candidate("big", 100, 90.0), Candidate("small", 10, 10.0)]
    assert plan_constants(cands, 100).resident == ("big",)
    assert plan_constants(cands, 110).resident == ("big", "small")
    assert plan_constants(cands, 50).resident == ("small",)


def test_reserves_are_whole_granules_below_the_sram():
    arch = load_target("tnpu-s")
    rs = reserves(arch)
    assert rs[0] == 0 and all(r % 1024 == 0 and r < arch.onchip.sram_bytes for r in rs)


def test_resident_constants_move_their_reads_on_chip():
    arch = load_target("tnpu-s")
    m = load_scenario("xr_glasses").model("hand_det")
    p = profile_model(m, arch)
    assert 0.9 * p.constant_bytes <= p.constant_reads  # every weight is read at least once
    r = with_resident_constants(p, arch)
    moved = p.constant_reads
    assert r.dynamic_pj["lpddr"] == pytest.approx(
        p.dynamic_pj["lpddr"] - arch.energy.lpddr_byte_pj * moved)
    assert r.dynamic_pj["sram_read"] == pytest.approx(
        p.dynamic_pj["sram_read"] + arch.energy.sram_read_byte_pj * moved)
    assert r.steps == p.steps


def test_a_run_with_a_reserve_rescheduled_for_the_smaller_sram():
    arch, sc = load_target("tnpu-s"), load_scenario("xr_glasses")
    report = run_scenario(sc, arch, window_s=0.05, resident_constants=64 * 1024)
    plan = report.constants
    assert plan.resident and plan.resident_bytes <= plan.reserve == 64 * 1024
    smaller = arch.with_param("onchip.sram_bytes", arch.onchip.sram_bytes - 64 * 1024)
    for m in sc.models:
        alone = profile_model(m, smaller)
        got = report.profiles[m.name]
        assert got.steps == alone.steps  # every model scheduled for the SRAM left
        want = with_resident_constants(alone, arch) if m.name in plan.resident else alone
        assert got.dynamic_pj == pytest.approx(want.dynamic_pj)
    # no job was preempted: the models share one arena, the largest
    assert all(j.preemptions == 0 for j in report.timeline.jobs)
    assert report.shared_arena_bytes == max(p.arena_bytes for p in report.profiles.values())


def test_bad_reserves_are_refused(capsys):
    arch, sc = load_target("tnpu-s"), load_scenario("xr_glasses")
    for bad in (1000, arch.onchip.sram_bytes, -1024):
        with pytest.raises(TesselConfigError, match="resident constants"):
            run_scenario(sc, arch, resident_constants=bad)
    assert main(["scenario", "run", "xr_glasses", "--resident-constants", "lots"]) != 0
    assert "--resident-constants must be none, auto or a number of KiB" in \
        capsys.readouterr().err


def test_auto_keeps_the_lowest_power_of_the_reserves_tried():
    from tessel.scenario import parse_scenario
    from tessel.scenario.run import Reserve

    sc = parse_scenario("\n".join(
        f'[[model]]\nname = "{n}"\nmodel = "{n}"\nrate_hz = {r}\n'
        for n, r in (("hand_det", 30), ("kws_res8", 10))), "x.toml", None)
    arch = load_target("tnpu-s")
    report = run_scenario(sc, arch, window_s=0.1, resident_constants=Reserve.AUTO)
    assert [t[0] for t in report.tried] == reserves(arch)
    none = report.tried[0]
    eligible = [t for t in report.tried if t[3] <= none[3]]
    assert report.power_mw == min(t[2] for t in eligible)
    assert report.constants.reserve == min(eligible, key=lambda t: t[2])[0]


def test_the_memory_map_places_every_model_without_overlap():
    arch, sc = load_target("tnpu-s"), load_scenario("xr_glasses")
    report = run_scenario(sc, arch, window_s=0.05, resident_constants=64 * 1024)
    regions = report.memory.regions
    assert {r.what for r in regions} == {f"constants of {m.name}" for m in sc.models} | {
        "shared activation arena"}
    for mem in {r.memory for r in regions}:
        spans = sorted((r.address, r.address + r.nbytes) for r in regions if r.memory == mem)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), mem
        assert all(lo % 64 == 0 for lo, _ in spans)
    for r in regions:
        if r.memory == "sram":  # resident constants sit in the reserve, above the scratchpad
            assert r.what.removeprefix("constants of ") in report.constants.resident
            assert arch.onchip.sram_bytes - 64 * 1024 <= r.address
            assert r.address + r.nbytes <= arch.onchip.sram_bytes
    arena = next(r for r in regions if r.what == "shared activation arena")
    assert arena.nbytes == report.shared_arena_bytes


def test_models_that_fit_alone_but_not_together_are_refused():
    from tessel.errors import TesselCompileError

    arch = load_target("tnpu-s").with_param("offchip.lpddr.size_bytes", 2 << 20)
    with pytest.raises(TesselCompileError, match="the scenario needs .* bytes of lpddr but it "
                                                 "has 2,097,152 .*constants of gaze 1,833,388"):
        run_scenario(load_scenario("xr_glasses"), arch, window_s=0.05)
