"""Constants kept on chip across frames (tessel.scenario.constants, tessel.scenario.resident):
the plan against the exhaustive choice, a resident model's schedule (no weight from off chip,
its cycles and energy, its program bit-exact), and a scenario run with SRAM reserved for it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.arch import CompileOptions, load_target
from tessel.cli import main
from tessel.errors import TesselConfigError
from tessel.isa.events import Events
from tessel.scenario import load_scenario
from tessel.scenario.constants import Candidate, plan_constants, reserves
from tessel.scenario.profile import profile_model, quantised_graph, schedule_of
from tessel.scenario.resident import RESERVE_MEMORY, resident_arch
from tessel.scenario.run import run_scenario
from tessel.scenario.switch import transfer
from tessel.schedule.events import step_events


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



def test_a_resident_model_loads_no_weight_from_off_chip():
    arch = load_target("tnpu-s")
    smaller = arch.with_param("onchip.sram_bytes", arch.onchip.sram_bytes - 64 * 1024)
    m = load_scenario("xr_glasses").model("kws")
    there = profile_model(m, smaller)
    here = profile_model(m, resident_arch(smaller, 64 * 1024))
    assert 0.9 * there.constant_bytes <= there.constant_reads  # every weight read once at least
    assert here.weights_memory == RESERVE_MEMORY and here.constant_reads >= there.constant_reads
    # the off-chip memory now carries activations only: its bytes fell by the constants' reads
    graph = quantised_graph(m)
    lpddr = {}
    for name, target in (("there", smaller), ("here", resident_arch(smaller, 64 * 1024))):
        schedule, _ = schedule_of(graph, target, CompileOptions())
        ev = Events()
        for step in schedule.steps:
            ev = ev + step_events(step.work, target, step.tally)
        lpddr[name] = (ev.offchip_read_bytes[0], ev.offchip_read_bytes[1:])
        if name == "here":  # every reserve byte charged an SRAM read, none as a memory
            assert RESERVE_MEMORY not in here.dynamic_pj
            assert here.dynamic_pj["sram_read"] == pytest.approx(
                (ev.sram_read_bytes + ev.offchip_read_bytes[1]) * arch.energy.sram_read_byte_pj)
            assert ev.offchip_read_bytes[1] == here.constant_reads
    assert lpddr["here"][0] <= lpddr["there"][0] - there.constant_reads + 64
    assert here.dynamic_pj["lpddr"] < (there.dynamic_pj["lpddr"]
                                       - 0.9 * arch.energy.lpddr_byte_pj * there.constant_reads)
    assert here.cycles < there.cycles  # its weight loads are on-chip copies


def test_a_resident_program_is_bit_exact_and_its_estimate_simulated():
    from tessel.scenario import parse_scenario
    from tessel.scenario.constants import ConstantsPlan
    from tessel.scenario.functional import check_first_frames

    sc = parse_scenario('[[model]]\nname = "k"\nmodel = "kws_res8"\nrate_hz = 3\n', "x.toml",
                        None)
    plan = ConstantsPlan(64 * 1024, ("k",), 21_716)
    (check,) = check_first_frames(sc, load_target("tnpu-s"), constants=plan)
    assert check.bit_exact and check.mismatched == 0
    assert abs(check.simulated_cycles - check.estimated_cycles) <= 0.02 * check.simulated_cycles
    arch = load_target("tnpu-s")
    smaller = arch.with_param("onchip.sram_bytes", arch.onchip.sram_bytes - 64 * 1024)
    assert check.estimated_cycles == profile_model(sc.model("k"),
                                                   resident_arch(smaller, 64 * 1024)).cycles


def test_a_run_with_a_reserve_rescheduled_for_the_smaller_sram():
    arch, sc = load_target("tnpu-s"), load_scenario("xr_glasses")
    report = run_scenario(sc, arch, window_s=0.05, resident_constants=64 * 1024)
    plan = report.constants
    assert plan.resident and plan.resident_bytes <= plan.reserve == 64 * 1024
    smaller = arch.with_param("onchip.sram_bytes", arch.onchip.sram_bytes - 64 * 1024)
    for m in sc.models:
        target = resident_arch(smaller, 64 * 1024) if m.name in plan.resident else smaller
        want = profile_model(m, target)
        got = report.profiles[m.name]
        assert got.steps == want.steps  # every model scheduled for the SRAM left
        assert got.dynamic_pj == pytest.approx(want.dynamic_pj)
    assert plan.resident_bytes == sum(report.profiles[n].constant_bytes for n in plan.resident)
    # the one-time preload: the resident bytes from the weights memory, reported apart
    assert report.preload == transfer(plan.resident_bytes, arch, load=True, memory="lpddr")
    assert report.preload.cycles >= plan.resident_bytes // arch.offchip[0].bytes_per_cycle
    assert "loaded once before the first frame" in report.summary()
    assert report.as_dict()["resident_constants"]["preload_uj"] == pytest.approx(
        report.preload.energy_pj / 1e6)
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
