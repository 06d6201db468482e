"""What the mapping search shares across design points (search.SearchCache.shared): a
candidate's arch-free program (schedule.estimate.StepProgram) on every NPU with the same
`program_key`, and its closed-form bound's terms (schedule.prerank.Terms) on every NPU.

The claim under both: for a given mapping, a step's instructions' cost keys and its program's
shape do not depend on the cost-only parameters (declared `Affects.COSTS`), and a bound's sums do
not depend on the NPU at all. Checked here on every candidate of every step the plan asks
about, on NPUs that differ in every cost-only field: the program built on one NPU, timed on the
other, equals the estimate built there; the terms built on one NPU, evaluated on the other,
equal the bound computed there."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import replace

import pytest

from tessel.analysis.estimate import estimate_graph
from tessel.analysis.explore import quantised_graphs
from tessel.arch import load_target
from tessel.arch.decl import Affects
from tessel.arch.params import FIELDS
from tessel.errors import TesselConfigError
from tessel.ops.fused_geometry import FusedChain
from tessel.schedule import plan as program
from tessel.schedule import prerank, search
from tessel.schedule.cost_model import AnalyticalCostModel
from tessel.schedule.estimate import CostCache, StepProgram, estimate_step, time_program

BASE = load_target("tnpu-s")


def _variant(arch, name):
    """Another valid value of parameter `name` on `arch`."""
    v = arch.param(name)
    if isinstance(v, bool):
        return not v
    if isinstance(v, enum.Enum):
        return next(m for m in type(v) if m is not v)
    for other in (v // 2, 2 * v, v + 1) if isinstance(v, int) else (0.99 * v, 1.01 * v):
        try:
            arch.with_param(name, other)
            return other
        except TesselConfigError:
            pass
    raise AssertionError(f"no other valid value of {name}")


def _names(affects):
    """The with_param names of the settable parameters declared `affects` (on BASE; the
    nominal operating point's clock and voltage are clock_hz and voltage_v, set with them)."""
    return [name for p in FIELDS if p.affects is affects and p.settable
            for name in ([f"{p.entries}.{e.name}.{p.field}" for e in getattr(BASE, p.entries)
                          if e != BASE.nominal_point] if p.per_entry else [p.key])]


# every parameter declared cost-only (Affects.COSTS) changed, nothing else
OTHER = {name: _variant(BASE, name) for name in _names(Affects.COSTS)}


def test_program_key_leaves_out_the_cost_only_fields_and_nothing_else():
    a = BASE
    b = a.with_params(OTHER)
    assert search.program_key(a) == search.program_key(b)
    assert search.timing_key(a) != search.timing_key(b)
    programs = _names(Affects.PROGRAMS)
    assert {"onchip.sram_bytes", "matrix.input_buffer_bytes", "memory.weights"} <= set(programs)
    for name in programs:
        if name.startswith("memory."):  # (tnpu-s has one memory: give it a second one)
            two = a.with_params({}, name="two")
            two = dataclasses.replace(two, offchip=(*a.offchip, replace(a.offchip[0], name="x")))
            assert search.program_key(two.with_param(name, "x")) != \
                search.program_key(two), name
            continue
        assert search.program_key(a.with_param(name, _variant(a, name))) != \
            search.program_key(a), name
    for name in _names(Affects.NONE):  # seconds, joules, mm^2 and prose: no cycle count
        assert search.timing_key(a.with_param(name, _variant(a, name))) == \
            search.timing_key(a), name


@pytest.mark.parametrize("model", ["ds_cnn", pytest.param("mobilenet_v2",
                                                          marks=pytest.mark.slow)])
def test_programs_and_terms_built_on_one_npu_hold_on_another(model, monkeypatch):
    graph = quantised_graphs([model], 2, None)[model]
    a = load_target("tnpu-s")
    b = a.with_params(OTHER)
    checked = {"programs": 0, "terms": 0}
    seen = set()
    real = program._choose

    def spy(node, ctx, *, required=True, cost_model=None, input_resident_orders=True):
        em = program._emitter(node)
        est_ctx = program.estimation_context(ctx)
        sig = search.unit_signature(node, est_ctx)
        if sig not in seen:
            seen.add(sig)
            _check_unit(node, em, est_ctx, b, checked)
        return real(node, ctx, required=required, cost_model=cost_model,
                    input_resident_orders=input_resident_orders)

    with monkeypatch.context() as mp:
        mp.setattr(program, "_choose", spy)
        estimate_graph(graph, a)
    assert checked["programs"] > 100 and checked["terms"] > 50, checked


@pytest.mark.parametrize("model", ["ds_cnn", pytest.param("mobilenet_v2",
                                                          marks=pytest.mark.slow)])
def test_candidate_lists_depend_on_their_key_only(model, monkeypatch):
    """Per cost-only field: an NPU differing from tnpu-s in it alone lists the same candidates
    for every step whose candidate key it leaves alone (and the key changes for some)."""
    graph = quantised_graphs([model], 2, None)[model]
    a = load_target("tnpu-s")
    variants = [a.with_param(k, v) for k, v in OTHER.items()]
    kept = changed = 0
    seen = set()
    real = program._choose

    def spy(node, ctx, *, required=True, cost_model=None, input_resident_orders=True):
        nonlocal kept, changed
        em = program._emitter(node)
        est_a = program.estimation_context(ctx)
        sig = search.unit_signature(node, est_a)
        if sig not in seen:
            seen.add(sig)
            want = list(em.candidates(node, est_a))
            for b in variants:
                est_b = _context_on(b, est_a)
                if search.candidate_key(node, est_b) == \
                        search.candidate_key(node, est_a):
                    assert list(em.candidates(node, est_b)) == want, (str(node), b.name)
                    kept += 1
                else:
                    changed += 1
        return real(node, ctx, required=required, cost_model=cost_model,
                    input_resident_orders=input_resident_orders)

    with monkeypatch.context() as mp:
        mp.setattr(program, "_choose", spy)
        estimate_graph(graph, a)
    assert kept > 50 and changed > 20, (kept, changed)


def _context_on(arch, est):
    from tessel.ops.context import CodegenContext
    return program.estimation_context(CodegenContext(arch, est.graph, dict(est.dram),
                                                     est.consts, est.act_memory))


def _check_unit(node, em, est_a, b, checked) -> None:
    """Every candidate of `node` on a (est_a.arch) that is also one on b."""
    est_b = _context_on(b, est_a)
    on_b = set(em.candidates(node, est_b))
    bound_a, bound_b = prerank.Bounds(node, est_a), prerank.Bounds(node, est_b)
    cost_b = CostCache(b)
    for m in em.candidates(node, est_a):
        if m not in on_b:
            continue
        for sample in (search.SAMPLE_TILES, None):
            prog = StepProgram(em.step(node, m, est_a), sample)
            again = StepProgram(em.step(node, m, est_b), sample)
            assert prog.shape_id == again.shape_id, (str(node), str(m))
            assert [t.keys for t in prog.terms] == [t.keys for t in again.terms]
            want = estimate_step(em.step(node, m, est_b), b, sample=sample)
            assert time_program(prog, cost_b) == want, (str(node), str(m), sample)
            checked["programs"] += 1
            if bound_a.available:
                assert bound_a.terms(m, sample).evaluate(b) == bound_b(m, sample)
                checked["terms"] += 1
    if isinstance(node, FusedChain):
        assert bound_a.available


def test_a_sweep_shares_programs_and_terms_across_points():
    """Points that differ only in cost-only fields search every step again (their timing keys
    differ) but never build a program or a bound's terms twice: what the second point builds
    is only what the first never estimated (other candidates reach its shortlist). Points
    differing in other ways too get figures equal to a search without any cache."""
    graph = quantised_graphs(["ds_cnn"], 2, None)["ds_cnn"]
    a = load_target("tnpu-s")
    b = a.with_params({"vector.pipeline_latency_cycles": 7, "dma.channels": 1,
                       "matrix.fold_pipelining": False, "offchip.lpddr.latency_cycles": 37})
    cache = search.SearchCache()
    first = _count_builds(graph, a, cache)
    misses = cache.misses
    second = _count_builds(graph, b, cache)
    assert cache.misses > misses  # (searched again, not served from the search cache)
    stored = {"programs": 0, "terms": 0}
    for shared in cache._shared.values():
        stored["terms"] += len(shared.bounds)
        stored["programs"] += sum(len(kinds.get("programs", {}))
                                  for kinds in shared.programs.values())
    assert {k: first[k] + second[k] for k in first} == stored  # nothing built twice
    assert second["programs"] < first["programs"] / 4, (first, second)
    for arch in (a.with_params({"matrix.cols": 8}), a.with_params(OTHER)):
        with search.use(cache):
            got = estimate_graph(graph, arch)
        with search.use(None), search.pruning(False):
            ref = estimate_graph(graph, arch)
        assert (got.cycles, got.layers) == (ref.cycles, ref.layers)


def _count_builds(graph, arch, cache) -> dict[str, int]:
    """Programs the searches build (residency and prefetch build their own, one-off) and
    bounds' terms, estimating `graph` on `arch` with `cache`."""
    counts = {"programs": 0, "terms": 0}
    real_program = AnalyticalCostModel.program
    real_conv, real_chain = prerank.conv_terms, prerank.chain_terms

    def counted(kind, fn):
        def wrapper(*args, **kw):
            counts[kind] += 1
            return fn(*args, **kw)
        return wrapper

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AnalyticalCostModel, "program", counted("programs", real_program))
        mp.setattr(prerank, "conv_terms", counted("terms", real_conv))
        mp.setattr(prerank, "chain_terms", counted("terms", real_chain))
        with search.use(cache):
            estimate_graph(graph, arch)
    return counts


def test_programs_of_the_least_recently_used_program_keys_are_dropped():
    """A sweep over many SRAM sizes keeps the programs of the last `max_program_keys` program
    keys only (each is tens of MB for a large model), and its figures stay the reference's."""
    graph = quantised_graphs(["ds_cnn"], 2, None)["ds_cnn"]
    a = load_target("tnpu-s")
    cache = search.SearchCache(max_program_keys=2)
    sizes = (262_144, 393_216, 524_288)
    for size in sizes:
        arch = a.with_param("onchip.sram_bytes", size)
        with search.use(cache):
            got = estimate_graph(graph, arch)
        with search.use(None), search.pruning(False):
            ref = estimate_graph(graph, arch)
        assert (got.cycles, got.layers) == (ref.cycles, ref.layers)
    kept = {pk for shared in cache._shared.values() for pk in shared.programs}
    assert kept == {search.program_key(a.with_param("onchip.sram_bytes", s))
                    for s in sizes[1:]}


@pytest.mark.parametrize("model", ["ds_cnn", pytest.param("mobilenet_v2",
                                                          marks=pytest.mark.slow)])
def test_shared_placed_figures_equal_each_placed_step(model, monkeypatch):
    """Every figure the plan takes from a shared placed-step record (schedule/plan.py
    `_placed`: the SRAM top, the residency rewrite's keyed estimates and its check, the
    prefetch hull, the planned estimates, the energy events' tally) equals the one computed
    from the step as placed on this point, though the record was filled on another point
    (other mappings around it, so other DRAM places and residents)."""
    from tessel.schedule import prefetch
    from tessel.schedule import resident_rewrite as resident
    from tessel.schedule.events import step_events

    graph = quantised_graphs([model], 2, None)[model]
    a = load_target("tnpu-s")
    checked: dict[str, int] = {}

    def outcome(fn, *args):
        try:
            return fn(*args)
        except (resident.NotResidentCapable, prefetch.NotShiftable) as exc:
            return type(exc).__name__, str(exc)

    def spy(name, own):
        real = getattr(program, name)

        def wrapped(*args):
            got = outcome(real, *args)
            assert got == outcome(own, *args), name
            checked[name] = checked.get(name, 0) + 1
            if isinstance(got, tuple) and got and isinstance(got[0], str):
                return real(*args)  # (raises again)
            return got
        monkeypatch.setattr(program, name, wrapped)

    spy("_sram_top", lambda rec, work: resident.sram_top(resident.all_instructions(work)))
    spy("_hull", lambda rec, work, keep: prefetch.own_hull(work, keep))
    check = program._check_residents
    spy("_check_residents", lambda rec, work: check(program._Placed(), work))
    spy("_planned_estimate", lambda rec, p, cost: p.estimate(cost.arch, cost))
    real_cycles, real_plan = program._resident_cycles, program._plan

    def cycles_spy(choices, works, ctx, cost):
        shared = real_cycles(choices, works, ctx, cost)

        def cycles(s, res):
            own = outcome(lambda: estimate_step(resident.rewrite_step(works[s], res, keyed=True),
                                                ctx.arch, cache=cost).cycles)
            assert outcome(shared, s, res) == own
            checked["cycles"] = checked.get("cycles", 0) + 1
            return shared(s, res)
        return cycles

    def plan_spy(graph, nodes, inputs, outputs, arch, *args, **kwargs):
        schedule = real_plan(graph, nodes, inputs, outputs, arch, *args, **kwargs)
        for step in schedule.steps if schedule is not None else ():
            assert step_events(step.work, arch, step.tally) == step_events(step.work, arch)
            checked["events"] = checked.get("events", 0) + 1
        return schedule

    monkeypatch.setattr(program, "_resident_cycles", cycles_spy)
    monkeypatch.setattr(program, "_plan", plan_spy)
    cache = search.SearchCache()
    for arch in (a, a.with_params({"matrix.cols": 8}), a.with_params(OTHER),
                 a.with_params({"vector.lanes": 16, "matrix.rows": 8})):
        with search.use(cache):
            estimate_graph(graph, arch)
    assert set(checked) == {"_sram_top", "_hull", "_check_residents", "_planned_estimate",
                            "cycles", "events"}, checked
    assert min(checked.values()) >= 4, checked


@pytest.fixture(scope="module")
def ds_cnn_steps():
    """(unit, emitter, estimation context) of every distinct step of ds_cnn on BASE."""
    graph = quantised_graphs(["ds_cnn"], 2, None)["ds_cnn"]
    steps, seen = [], set()
    real = program._choose

    def spy(node, ctx, *, required=True, cost_model=None, input_resident_orders=True):
        est_ctx = program.estimation_context(ctx)
        sig = search.unit_signature(node, est_ctx)
        if sig not in seen:
            seen.add(sig)
            steps.append((node, program._emitter(node), est_ctx))
        return real(node, ctx, required=required, cost_model=cost_model,
                    input_resident_orders=input_resident_orders)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(program, "_choose", spy)
        estimate_graph(graph, BASE)
    return steps


def _differing_steps(steps, b) -> tuple[int, list[str]]:
    """How many (step, mapping) pairs listed on both BASE and `b` were compared, and those
    whose instructions differ: each step built on BASE and on `b` for the same mapping."""
    from tessel.schedule.resident_rewrite import all_instructions

    compared, differ = 0, []
    for node, em, est_a in steps:
        est_b = _context_on(b, est_a)
        on_b = set(em.candidates(node, est_b))
        for m in [m for m in em.candidates(node, est_a) if m in on_b]:
            compared += 1
            if all_instructions(em.step(node, m, est_a)) != \
                    all_instructions(em.step(node, m, est_b)):
                differ.append(f"{node} {m}")
    return compared, differ


@pytest.mark.parametrize("name", sorted(OTHER))
def test_a_cost_only_parameter_changes_no_instruction(name, ds_cnn_steps):
    """Checks the declarations themselves, not the keys built from them: on two NPUs differing
    only in one parameter declared Affects.COSTS, every step of ds_cnn emits the same
    instructions (every field of every instruction) for each mapping both list."""
    compared, differ = _differing_steps(ds_cnn_steps, BASE.with_param(name, OTHER[name]))
    assert compared > 40 and not differ, (name, compared, differ[:3])


@pytest.fixture(scope="module")
def ds_cnn_region():
    """ds_cnn's NPU region (legalised, partitioned) and the steps and mappings BASE chooses."""
    from tessel.lower.legalize import legalize
    from tessel.lower.partition import partition

    graph = legalize(quantised_graphs(["ds_cnn"], 2, None)["ds_cnn"])
    part = partition(graph, no_fallback=True)
    assert len(part.regions) == 1
    schedule = program.plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, BASE)
    return graph, part, [(s.unit, s.mapping, s.estimate) for s in schedule.steps]


def _streams(region, arch) -> str:
    """The instruction streams of ds_cnn compiled for `arch` with BASE's steps and mappings."""
    from compile_region import compile_region
    from tessel.emit.text import streams_text

    graph, part, units = region
    rp = compile_region(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch, {},
                        units=units)
    return streams_text(rp.program)


@pytest.mark.parametrize("name", sorted(OTHER))
def test_a_cost_only_parameter_leaves_the_compiled_program_alone(name, ds_cnn_region):
    """The whole program (placement, constants, prefetches, every instruction) of ds_cnn with
    the same steps and mappings is the same on NPUs differing only in a parameter declared
    Affects.COSTS."""
    assert _streams(ds_cnn_region, BASE.with_param(name, OTHER[name])) == \
        _streams(ds_cnn_region, BASE), name


def test_the_program_comparison_sees_a_program_changing_parameter(ds_cnn_region):
    """The comparison above can fail: with the constants in another memory (memory.weights,
    declared Affects.PROGRAMS) the same steps and mappings emit other DMA instructions."""
    two = dataclasses.replace(BASE, offchip=(*BASE.offchip, replace(BASE.offchip[0], name="x")))
    assert _streams(ds_cnn_region, two) == _streams(ds_cnn_region, BASE)
    assert _streams(ds_cnn_region, two.with_param("memory.weights", "x")) != \
        _streams(ds_cnn_region, two)
