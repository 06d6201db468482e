"""The schedule stage: NPU nodes -> a `Schedule` (tessel.schedule.result) that the emit stage emits
once. In order: the mapping search per op with the fusion choice (`plan_units`, `_choose`:
every candidate ranked on a cost model, by default the analytical one; schedule/cost_model.py),
the constant layout (each step's constants packed once, in program order), the DRAM arena
(`plan_dram`) and, with `on_chip_residency`, the tensors kept in SRAM between steps
(schedule/residency.py).

`compile`, `estimate`, `advise` and `explore` all read this value; docs/backend.md ("Schedule").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tessel.arch import NpuArch
from tessel.collector import no_collections
from tessel.errors import TesselCompileError
from tessel.ir import Graph, Node
from tessel.isa import Engine
from tessel.isa.costs import cost_key
from tessel.ops import Trait, conv_emit, definition, fused_emit
from tessel.ops.context import CodegenContext, ConstPool, DramTensor, align
from tessel.ops.fused_geometry import FusedChain
from tessel.ops.registry import emitter_for, is_view
from tessel.ops.step import StepWork, memoized
from tessel.progress import task
from tessel.schedule import fusion, search, staging
from tessel.schedule import prefetch as prefetch_steps
from tessel.schedule import resident_rewrite as resident
from tessel.schedule.cost_model import AnalyticalCostModel, CostModel
from tessel.schedule.decoded import StreamSizes
from tessel.schedule.estimate import (
    CostCache,
    Estimate,
    StepProgram,
    estimate_step,
    time_program,
)
from tessel.schedule.events import EventTally
from tessel.schedule.memory import ArenaPlan, plan_arena
from tessel.schedule.residency import plan_step_residents
from tessel.schedule.result import ConstantLayout, Schedule, ScheduledStep, Unit


@no_collections()  # (a third of the stage's time was the cyclic collector's: tessel.collector)
def plan(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str],
         arch: NpuArch, *, region_sizes: Sequence[int] | None = None,
         on_chip_residency: bool = False, prefetch: bool = True, units: list | None = None,
         cost_model: CostModel | None = None, stage_weights: bool = True) -> Schedule:
    """The schedule of the NPU nodes `nodes` (in order) of `graph`; `inputs` / `outputs` are
    the boundary values (the program's I/O). `region_sizes`: how many of `nodes` each NPU
    region has (one region if None); regions share one DRAM arena and one constant pool, and
    steps are never fused across a boundary. `units`: the steps and mappings to use instead of
    searching (tests). `on_chip_residency`: keep activations on chip between steps where the
    cost model finds it faster (schedule/resident_rewrite.py; CompileOptions turns it on by default).
    `prefetch`: load each step's first group during the previous step where SRAM allows
    (schedule/prefetch.py). `stage_weights`: copy constants of weight-bound steps into free
    activation memory during earlier steps where weights live in slower memory
    (schedule/staging.py).
    `cost_model`: what the mapping search estimates candidates with (None: the analytical
    model; tessel.schedule.cost_model); residency and prefetch re-estimate steps analytically.

    With residency, cascaded chains and the input-resident conv orders compete with residency
    and prefetch for the same savings (a chain keeps its intermediates on chip but its inputs
    cannot be resident; an input-resident conv's first group loads an activation, which is
    neither prefetched nor resident): the per-step search compares them without residency and
    prefetch, so the region is also planned without chains and with weight-stationary convs
    only, and the schedule with fewer estimated cycles is kept (ties: the first). The second
    plan reuses the first's per-op searches (a search cache), and stops after them when
    their compute alone cannot beat the first (`compute_floor`)."""
    # one analytical model for every search of the schedule: its CostCache (instruction costs,
    # tiles, program timings) is shared by them, and by the residency and prefetch estimates
    cost_model = cost_model if cost_model is not None else AnalyticalCostModel()
    if units is not None or not on_chip_residency:
        only = _plan(graph, nodes, inputs, outputs, arch, region_sizes, on_chip_residency,
                     prefetch, units, True, cost_model, stage_weights=stage_weights)
        assert only is not None  # (nothing to beat: a schedule)
        return only
    cache = search.active()  # (an empty cache is falsy: test for None)
    with search.use(cache if cache is not None else search.SearchCache()):
        chained = _plan(graph, nodes, inputs, outputs, arch, region_sizes, True, prefetch,
                        None, True, cost_model, stage_weights=stage_weights)
        assert chained is not None
        if not any(isinstance(s.unit, FusedChain) or _input_resident(s.mapping)
                   for s in chained.steps):
            return chained
        alone = _plan(graph, nodes, inputs, outputs, arch, region_sizes, True, prefetch, None,
                      False, cost_model, chained.cycles, stage_weights)
    return alone if alone is not None and alone.cycles < chained.cycles else chained


def compute_floor(estimates: Iterable[Estimate]) -> int:
    """At most the cycles of a schedule of steps with these estimates (the search's, without
    residents or prefetch), whatever residency and prefetch make of them: a step's cycles are at
    least each compute engine's busy cycles, and neither changes those (a rewrite for residents
    re-bases instructions or adds COPYs, a prefetch moves DMA loads; instruction costs do not
    read addresses or strides: isa.costs.COST_FIELDS)."""
    return sum(max(e.busy.get(Engine.MATRIX, 0), e.busy.get(Engine.VECTOR, 0))
               for e in estimates)


def _input_resident(mapping: Any) -> bool:
    return isinstance(mapping, conv_emit.ConvMapping) and mapping.order.input_resident


def _plan(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str],
          arch: NpuArch, region_sizes: Sequence[int] | None, on_chip_residency: bool,
          prefetch: bool, units: list | None, chains: bool,
          cost_model: CostModel | None, beat: int | None = None,
          stage_weights: bool = True) -> Schedule | None:
    """The schedule (see `plan`); `beat`: None once its steps' `compute_floor` is not below
    these cycles (it could not have fewer), before residency, prefetch and the arena (with the
    analytical model only: residency and prefetch re-estimate steps analytically, and the
    floor of a simulated estimate is not assumed to bound those)."""
    wmem = arch.memory_index(arch.weights_memory)
    amem = arch.memory_index(arch.activations_memory)
    consts = ConstPool(wmem)
    work_nodes = [n for n in nodes if not is_view(n)]
    data_consts = place_data_constants(graph, work_nodes, consts)
    dram = _Placement(data_consts)
    # constants first when weights and activations share a memory: the arena follows them
    ctx = CodegenContext(arch, graph, dram, consts, amem)
    groups = _split(nodes, region_sizes)
    if units is not None:
        per_region = [list(units)]
    else:
        # chains=False: the conservative plan (no chains, weight-stationary convs; see plan)
        per_region = [plan_units(graph, [n for n in group if not is_view(n)], ctx,
                                 chains=chains, input_resident_orders=chains,
                                 cost_model=cost_model) for group in groups]
    choices = [c for group in per_region for c in group]
    if (beat is not None and isinstance(cost_model, AnalyticalCostModel)
            and compute_floor(est for _, _, est in choices) >= beat):
        return None
    # each step's constants (the emitter's pure `constants`) placed once, in program order;
    # its work reads those addresses, and the DRAM placement when the emit stage (or the residency
    # planner) asks for its instructions
    # (memoized: the residency and prefetch planners and the estimates read the same tiles)
    works = []
    for unit, mapping, _ in choices:
        em = _emitter(unit)
        packed = consts.place(em.constants(unit, mapping, ctx))
        works.append(memoized(em.step(unit, mapping, ctx, packed)))
    decoder = arch.wdecoder.enabled
    arena = plan_dram(graph, nodes, inputs, outputs, arch, choices, len(consts.blob),
                      fit_constants=not decoder)
    dram.bind(arena.tensors)
    if decoder:  # the ranges that pay are stored as streams: the memory holds those bytes
        check_constants(arch, StreamSizes(consts.blob, wmem, arch, works).stored_bytes())
    per_step: list[list[resident.Resident]] = [[] for _ in choices]
    spilled: dict[str, str] | None = None
    rewritten = list(works)
    # the instruction costs of the residency and prefetch estimates (the search's, if analytical)
    cost = (cost_model.cost_cache(arch) if isinstance(cost_model, AnalyticalCostModel)
            else CostCache(arch))
    recs = [_placed(unit, mapping, ctx) for unit, mapping, _ in choices]
    if on_chip_residency:
        tops = [_sram_top(rec, w) for rec, w in zip(recs, works, strict=True)]
        per_step, spilled, rewritten = _plan_residents(graph, nodes, inputs, outputs,
                                                       per_region, works, ctx, cost, tops)
        recs = [_placed(unit, mapping, ctx, res) if res else rec
                for (unit, mapping, _), res, rec in zip(choices, per_step, recs, strict=True)]
    placed = []  # (unit, mapping, estimate, work, region) with residents, in program order
    k = 0
    for r, group in enumerate(per_region):
        for unit, mapping, est in group:
            # a step with residents is estimated below, once its prefetch role is known
            placed.append((unit, mapping, None if per_step[k] else est, rewritten[k], r))
            k += 1
    keeps = ([[(x.sram, x.sram + x.hi - x.lo) for x in per_step[k]] for k in range(len(placed))]
             if on_chip_residency else None)
    planned = prefetch_steps.plan_steps(
        [s[3] for s in placed], [s[4] for s in placed], keeps, arch.onchip.sram_bytes,
        (wmem, len(consts.blob)), prefetch,
        lambda k, work, keep: _hull(recs[k], work, keep))
    ests = []
    for k, ((_, _, est, _, _), p) in enumerate(zip(placed, planned, strict=True)):
        if est is None or p.prefetched or p.prefetch:
            est = _planned_estimate(recs[k], p, cost)
        ests.append(est)
    staged_plan = _stage(planned, ests, [s[4] for s in placed], keeps, per_step, arch, arena,
                         (wmem, len(consts.blob)), cost, recs) if stage_weights else None
    if staged_plan is not None and sum(x.estimate.cycles for x in staged_plan.steps) >= sum(
            e.cycles for e in ests):  # (its producers lost what its consumers gained)
        staged_plan = None
    staged = staged_plan.steps if staged_plan is not None else None
    final = [staged[k].work if staged is not None and staged[k].work is not p.work else None
             for k, p in enumerate(planned)]
    # a target with the weight decoder: each step timed as code generation compresses it
    streams = StreamSizes(consts.blob, wmem, arch, [w or p.work for w, p in zip(
        final, planned, strict=True)]) if arch.wdecoder.enabled else None
    steps = []
    for k, ((unit, mapping, _, _, r), p) in enumerate(zip(placed, planned, strict=True)):
        work, est, tally = p.work, ests[k], EventTally(rewritten[k], recs[k].tally)
        if staged is not None and final[k] is not None:
            work, est, tally = staged[k].work, staged[k].estimate, EventTally(staged[k].work)
        if streams is not None:
            timed = work if final[k] is not None or p.unmoved is None else p.unmoved
            est, tally = streams.step(timed, p.prefetched, p.prefetch, cost)
        steps.append(ScheduledStep(unit, mapping, est, r, work, tuple(per_step[k]),
                                   p.prefetched, p.prefetch, tally))
    # the staging area lies above the arena: the activation memory the program needs
    peak = arena.peak_bytes if staged_plan is None else max(
        arena.peak_bytes, staged_plan.top - arena.base)
    return Schedule(arch, graph, tuple(steps), len(per_region), tuple(inputs), tuple(outputs),
                    dict(dram), peak, arena.naive_bytes,
                    ConstantLayout(wmem, bytes(consts.blob), data_consts), spilled)


def _stage(planned: Sequence[prefetch_steps.PlannedStep], ests: Sequence[Estimate],
           regions: Sequence[int], keeps: Sequence[Sequence[tuple[int, int]]] | None,
           residents: Sequence[Sequence[resident.Resident]], arch: NpuArch, arena: ArenaPlan,
           constants: tuple[int, int], cost: CostCache, recs: Sequence[_Placed]
           ) -> staging.StagingPlan:
    """`staging.plan_staging` of the planned steps: the staging area is the activation memory
    above the arena; a resident tensor is live in SRAM from the first step that touches it
    to the last (a DRAM range reused by two tensors merges their spans: only more is kept)."""
    amem = arch.offchip[arch.memory_index(arch.activations_memory)]
    keeps = keeps if keeps is not None else [[] for _ in planned]
    span: dict[resident.Resident, list[int]] = {}
    for k, res in enumerate(residents):
        for x in res:
            key = replace(x, partial=False, keep=())
            span.setdefault(key, [k, k])[1] = k
    live: list[list[tuple[int, int]]] = [[] for _ in planned]
    for x, (a, b) in span.items():
        for k in range(a, b + 1):
            live[k].append((x.sram, x.sram + x.hi - x.lo))

    def estimate(k: int, work: StepWork) -> Estimate:
        p = planned[k]
        return estimate_step(work, arch, cache=cost, prefetched=p.prefetched,
                             prefetch=p.prefetch)

    def hull(k: int) -> tuple[int, int] | None:
        p = planned[k]
        own = _hull(recs[k], p.unmoved if p.unmoved is not None else p.work, keeps[k])
        return None if own is None else (own[0] + p.shift, own[1] + p.shift)

    return staging.plan_staging(
        [p.work for p in planned], ests, regions, [p.prefetched for p in planned],
        [p.prefetch for p in planned], arch, constants,
        (arena.base + arena.peak_bytes, amem.size_bytes), live, estimate, hull)


class _Placement(dict):
    """Where the tensors live in DRAM, bound once the arena is planned: the steps' works are
    built (and their constants packed) before the arena, and read this mapping lazily when
    their instructions are asked for. Reading a tensor before `bind` is a planner bug."""

    def __init__(self, data: dict[str, DramTensor]):
        super().__init__(data)
        self._bound = False

    def bind(self, tensors: dict[str, DramTensor]) -> None:
        assert not self._bound, "the DRAM placement is bound once"
        for name, t in tensors.items():
            self.setdefault(name, t)  # data constants keep their place in the weights memory
        self._bound = True

    def __missing__(self, name: str) -> DramTensor:
        state = "has no DRAM place" if self._bound else "read before the arena is planned"
        raise KeyError(f"%{name} {state}")


@dataclass
class _Placed:
    """What a placed step is on every NPU with the same program key (`_placed`), filled in on
    first use from the first such step met."""

    top: int | None = None  # resident.sram_top (steps without residents)
    failure: str | None = None  # why its residents cannot be rewritten (once `checked`)
    checked: bool = False
    hull: tuple | None = None  # (prefetch.own_hull or None, why it cannot move or None)
    tally: list = field(default_factory=lambda: [None])  # EventTally's shared counts
    planned: dict = field(default_factory=dict)  # prefetch role -> its StepProgram


def _placed(unit: Unit, mapping: Any, ctx: CodegenContext,
            residents: Sequence[resident.Resident] = ()) -> _Placed:
    """The record of a step of `unit`'s signature and `mapping` with `residents`, shared
    through the active search cache (private without one) by the steps alike on every NPU
    with the same program key (`SearchCache.by_program`). Without residents a step's SRAM
    addresses, instructions' cost keys and program come from its signature, its mapping and
    the NPU's SRAM layout fields alone (DRAM addresses cost nothing); with residents, which of
    its DMAs the rewrite replaces also reads where its tensors live in DRAM (`_placement`;
    its weights live below the arena, plan_dram). tests/unit/schedule/test_program_reuse.py
    checks every shared figure against the step's own on every zoo step."""
    cache = search.active()
    if cache is None:
        return _Placed()
    known = cache.by_program(cache.shared(unit, ctx), ctx.arch, "placed")
    key = (mapping, _placement(unit, ctx.dram), tuple(residents)) if residents else mapping
    rec = known.get(key)
    if rec is None:
        rec = known[key] = _Placed()
    return rec


def _planned_estimate(rec: _Placed, p: prefetch_steps.PlannedStep, cost: CostCache
                      ) -> Estimate:
    """`p.estimate(cost.arch, cost)`, its arch-free program shared by the steps of `rec` with
    the same prefetch role and prefetched loads (their cost keys and memories)."""
    key = (p.prefetched, tuple((cost_key(i), i.mem) for i in p.prefetch))
    prog = rec.planned.get(key)
    if prog is None:
        work = p.unmoved if p.unmoved is not None else p.work
        prog = rec.planned[key] = StepProgram(work, None, cost.tiles, p.prefetched, p.prefetch)
    return time_program(prog, cost)


def _sram_top(rec: _Placed, work: StepWork) -> int:
    """`resident.sram_top` of the step's `all_instructions`, kept in `rec`."""
    if rec.top is None:
        rec.top = resident.sram_top(resident.all_instructions(work))
    return rec.top


def _hull(rec: _Placed, work: StepWork, keep: Sequence[tuple[int, int]]
          ) -> tuple[int, int] | None:
    """`prefetch.own_hull(work, keep)`, kept in `rec` (from the SRAM top without `keep`)."""
    if not keep:
        top = _sram_top(rec, work)
        return (0, top) if top >= 0 else None
    if rec.hull is None:
        try:
            rec.hull = (prefetch_steps.own_hull(work, keep), None)
        except prefetch_steps.NotShiftable as exc:
            rec.hull = (None, str(exc))
    if rec.hull[1] is not None:
        raise prefetch_steps.NotShiftable(rec.hull[1])
    return rec.hull[0]


def _check_residents(rec: _Placed, work: StepWork) -> str | None:
    """Why `work` (a step rewritten for its residents) cannot be emitted, or None: every
    tile rewritten (`resident.all_instructions`), once per `rec`."""
    if not rec.checked:
        try:
            resident.all_instructions(work)
        except resident.NotResidentCapable as exc:
            rec.failure = str(exc)
        rec.checked = True
    return rec.failure


def _resident_cycles(choices: Sequence, works: Sequence[StepWork], ctx: CodegenContext,
                     cost: CostCache | None
                     ) -> Callable[[int, list[resident.Resident]], int] | None:
    """The residency planner's `cycles(s, res)` (schedule/residency.py) with the arch-free
    program of each keyed rewrite (`resident.rewrite_step(keyed=True)`) shared through the
    active search cache (None without one) by the steps of one signature and mapping, placed
    alike in DRAM, with the same residents, on every NPU with the same program key: a
    rewrite reads the NPU's SRAM layout fields alone, and which DMAs hit a resident reads the
    DRAM places of the step's activations and data constants (its weights live below the
    arena: plan_dram), which `_placement` keys."""
    cache = search.active()
    if cache is None or cost is None:
        return None

    def cycles(s: int, res: list[resident.Resident]) -> int:
        unit, mapping, _ = choices[s]
        known = cache.by_program(cache.shared(unit, ctx), ctx.arch, "resident")
        key = (mapping, _placement(unit, ctx.dram), tuple(res))
        prog = known.get(key)
        if prog is None:
            try:
                prog = StepProgram(resident.rewrite_step(works[s], res, keyed=True), None,
                                   cost.tiles)
            except resident.NotResidentCapable as exc:
                prog = str(exc)  # (the reason, raised again for every step that meets it)
            known[key] = prog
        if isinstance(prog, str):
            raise resident.NotResidentCapable(prog)
        return time_program(prog, cost).cycles

    return cycles


def _placement(unit: Unit, dram: dict) -> tuple:
    """Where the tensors a step reads and writes live in DRAM (None: a constant the step packs
    with its weights)."""
    members = unit.nodes if isinstance(unit, FusedChain) else (unit,)
    inner = {n.name for n in members[:-1]}
    names = [i for n in members for i in n.inputs if i not in inner] + [members[-1].name]
    return tuple((t.memory, t.address, t.shape, t.dtype) if (t := dram.get(name)) is not None
                 else None for name in names)


def _plan_residents(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
                    outputs: Sequence[str], per_region: list, works: Sequence[StepWork],
                    ctx: CodegenContext, cost: CostCache | None = None,
                    tops: Sequence[int] | None = None
                    ) -> tuple[list[list[resident.Resident]], dict, list[StepWork]]:
    """Per step, the resident tensors it reads or writes on chip (schedule/resident_rewrite.py); the
    candidates kept in DRAM with why; and the steps rewritten for them (memoized).

    The planner ranks candidates on estimates that rewrite one tile per tile key
    (`rewrite_step(keyed=True)`); every tile of every step is rewritten here (the tiles the
    prefetch planner and the emitter read), and should one fail, the tensors of its step are
    kept in DRAM and the plan is made again."""
    alias = {n.name: n.inputs[0] for n in nodes if is_view(n)}

    def root(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    writes, reads, regions = [], [], []
    for r, group in enumerate(per_region):
        for unit, _, _ in group:
            members = unit.nodes if isinstance(unit, FusedChain) else (unit,)
            inner = {n.name for n in members[:-1]}
            writes.append(root(members[-1].name))
            reads.append({root(i) for n in members for i in n.inputs
                          if i not in inner and graph.constant_value(i) is None})
            regions.append(r)
    excluded = {root(n) for n in list(inputs) + list(outputs)}
    # what a cascaded chain reads stays in DRAM: the chain loads its input rows into a padded
    # line buffer whose loads the residency rewrite would re-base wrongly (not bit-exact)
    for k, (unit, _, _) in enumerate(u for g in per_region for u in g):
        if isinstance(unit, FusedChain):
            excluded |= reads[k]
    # the search's estimates of the chosen mappings are the steps' cycles without residents
    base = [est.cycles for g in per_region for _, _, est in g]
    failed: dict[str, str] = {}
    choices = [c for g in per_region for c in g]
    cycles = _resident_cycles(choices, works, ctx, cost)
    while True:
        per_step, plan_ = plan_step_residents(works, writes, reads, regions, ctx.dram,
                                              excluded | set(failed), ctx.arch, base, cost,
                                              tops, cycles)
        rewritten, bad = [], None
        for k, (w, res) in enumerate(zip(works, per_step, strict=True)):
            w = memoized(resident.rewrite_step(w, res)) if res else w
            if res and bad is None:
                unit, mapping, _ = choices[k]
                why = _check_residents(_placed(unit, mapping, ctx, res), w)
                if why is not None:
                    bad = (k, why)
            rewritten.append(w)
        if bad is None:
            return per_step, {**dict(plan_.spilled), **failed}, rewritten
        k, why = bad  # the tensors on chip that step k writes or reads
        names = {n for n in (*plan_.sram, *plan_.part) if n == writes[k] or n in reads[k]}
        assert names, "a step with residents writes or reads a resident tensor"
        for name in sorted(names):
            failed[name] = f"step {k}: {why}"


def _split(nodes: Sequence[Node], sizes: Sequence[int] | None) -> list[list[Node]]:
    """`nodes` cut into consecutive groups of `sizes` (one group if None)."""
    if sizes is None:
        return [list(nodes)]
    if sum(sizes) != len(nodes) or any(k < 1 for k in sizes):
        raise ValueError(f"region sizes {list(sizes)} do not split {len(nodes)} nodes")
    out, k = [], 0
    for size in sizes:
        out.append(list(nodes[k:k + size]))
        k += size
    return out


def check_constants(arch: NpuArch, nbytes: int) -> None:
    """TesselCompileError when `nbytes` of constants do not fit the target's weight memory."""
    memory = arch.offchip[arch.memory_index(arch.weights_memory)]
    if nbytes > memory.size_bytes:
        raise TesselCompileError(f"constants need {nbytes} bytes but memory "
                                 f"'{memory.name}' has {memory.size_bytes}")


def plan_dram(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
              outputs: Sequence[str], arch: NpuArch, choices: Sequence,
              consts_bytes: int, fit_constants: bool = True) -> ArenaPlan:
    """Where constants and activations go in DRAM, checked against the memories' sizes: the one
    check of "does it fit" that `compile` and `estimate` (and so `explore`) share. Raises a
    TesselCompileError naming the memory and the bytes needed. Without `fit_constants` the
    caller checks the constants' memory (`check_constants`: on their stored bytes, weight
    streams); activations sharing it start above the raw `consts_bytes` either way."""
    wmem = arch.memory_index(arch.weights_memory)
    amem = arch.memory_index(arch.activations_memory)
    amemory = arch.offchip[amem]
    if fit_constants:
        check_constants(arch, consts_bytes)
    base = align(consts_bytes, 4096) if wmem == amem else 0
    if base > amemory.size_bytes:
        raise TesselCompileError(f"constants need {base} bytes (aligned to 4096, activations "
                                 f"follow them) but memory '{amemory.name}' has "
                                 f"{amemory.size_bytes}")
    fused = frozenset(n.name for u, _, _ in choices if isinstance(u, FusedChain)
                      for n in u.nodes[:-1])
    return plan_arena(graph, nodes, inputs, outputs, amem, base, amemory.size_bytes, fused)


def place_data_constants(graph: Graph, nodes: Sequence[Node], pool: ConstPool
                         ) -> dict[str, DramTensor]:
    """Constants that data-movement ops read like activations (e.g. ViT's class token, an
    operand of concat) go to the constant pool first, as DRAM tensors."""
    out = {}
    for node in nodes:
        if not definition(node.op).has(Trait.DATA_MOVEMENT):
            continue
        for name in node.inputs:
            value = graph.constant_value(name)
            if value is not None and name not in out:
                t = graph.type_of(name)
                arr = np.ascontiguousarray(value.astype(t.dtype.numpy.newbyteorder("<")))
                out[name] = DramTensor(pool.memory, pool.add(arr), t.shape, t.dtype)
    return out




def plan_units(graph: Graph, nodes: Sequence[Node], ctx: CodegenContext, *,
               chains: bool = True, cost_model: CostModel | None = None,
               input_resident_orders: bool = True) -> list[tuple[Unit, Any, Estimate]]:
    """The steps of the region with their mappings: each node alone, or (`chains`) a fusible
    chain as one cascaded step when its best estimate beats its layers' estimates added up
    (fused_emit); `input_resident_orders`: False leaves convs the weight-stationary order."""
    out: list[tuple[Unit, Any, Estimate]] = []
    alone: dict[str, tuple[Any, Estimate]] = {}

    def single(n: Node) -> tuple[Any, Estimate]:
        if n.name not in alone:
            got = _choose(n, ctx, cost_model=cost_model,
                          input_resident_orders=input_resident_orders)
            assert got is not None  # (required: a step without a mapping raises)
            alone[n.name] = got
        return alone[n.name]

    k = 0
    with task("mapping search", total=len(nodes)) as bar:
        while k < len(nodes):
            fused = fusion.best_chain(graph, nodes, k, lambda n: single(n)[1].cycles,
                                         lambda c: _choose(c, ctx, required=False,
                                                           cost_model=cost_model)
                                         ) if chains else None
            unit = fused if fused is not None else (nodes[k], *single(nodes[k]))
            out.append(unit)
            size = len(fused[0].nodes) if fused is not None else 1
            k += size
            bar.advance(size)
    return out


def _emitter(unit: Unit):
    return fused_emit if isinstance(unit, FusedChain) else emitter_for(unit)


def _choose(node: Unit, ctx: CodegenContext, *, required: bool = True,
            cost_model: CostModel | None = None, input_resident_orders: bool = True
            ) -> tuple[Any, Estimate] | None:
    """The mapping with the fewest estimated cycles: every candidate ranked on a sampled
    estimate, the best few estimated in full (ties: first candidate, deterministic); the
    search, its closed-form pruning and its cache: tessel.schedule.search."""
    return search.choose(node, ctx, _emitter(node), estimation_context(ctx),
                               required=required,
                               cost_model=cost_model,
                               input_resident_orders=input_resident_orders)


def estimation_context(ctx: CodegenContext) -> CodegenContext:
    """The context the mapping search estimates candidates in: `ctx`'s NPU, graph and
    constant pool, with every tensor not placed yet at address 0 of the activation memory
    (`_DummyTensors`; addresses do not change costs)."""
    return CodegenContext(ctx.arch, ctx.graph, _DummyTensors(ctx), ctx.consts, ctx.act_memory)


class _DummyTensors(dict):
    """DRAM placement stand-in for estimation: the tensors already placed (data constants such
    as ViT's class token, in the weights memory) where they are, every other one at address 0
    of the activation memory (addresses do not change costs, memories do)."""

    def __init__(self, ctx: CodegenContext):
        super().__init__(ctx.dram)
        self._ctx = ctx

    def __missing__(self, name: str):
        from tessel.ops.context import DramTensor
        t = self._ctx.graph.type_of(name)
        self[name] = DramTensor(self._ctx.act_memory, 0, t.shape, t.dtype)
        return self[name]
