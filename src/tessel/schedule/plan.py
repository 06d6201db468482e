"""The schedule stage: NPU nodes -> a `Schedule` (tessel.codegen.scheduled) that codegen emits
once. In order: the mapping search per op with the fusion choice (`plan_units`, `_choose`:
every candidate ranked on a cost model, by default the analytical one; schedule/cost_model.py),
the constant layout (each step's constants packed once, in program order), the DRAM arena
(`plan_dram`) and, with `on_chip_residency`, the tensors kept in SRAM between steps
(schedule/residency.py).

`compile`, `estimate`, `advise` and `explore` all read this value; docs/backend.md ("Schedule").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tessel.arch import NpuArch
from tessel.codegen import ops_conv, ops_fused, resident
from tessel.codegen import prefetch as prefetch_steps
from tessel.codegen.context import CodegenContext, ConstPool, DramTensor, align
from tessel.codegen.ops_fused import FusedChain
from tessel.codegen.registry import DATA_MOVEMENT_OPS, emitter_for, is_view
from tessel.codegen.scheduled import ConstantLayout, Schedule, ScheduledStep, Unit
from tessel.codegen.step import Estimate, StepWork, memoized, top_slots
from tessel.codegen.step_estimate import CostCache, StepProgram, time_program
from tessel.collector import no_collections
from tessel.errors import TesselCompileError
from tessel.ir import Graph, Node
from tessel.isa import Engine
from tessel.isa.costs import Events, cost_key
from tessel.progress import task
from tessel.schedule import search_cache
from tessel.schedule.cost_model import AnalyticalCostModel, CostModel
from tessel.schedule.memory import ArenaPlan, plan_arena
from tessel.schedule.residency import plan_step_residents


@no_collections()  # (a third of the stage's time was the cyclic collector's: tessel.collector)
def plan(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str],
         arch: NpuArch, *, region_sizes: Sequence[int] | None = None,
         on_chip_residency: bool = False, prefetch: bool = True, units: list | None = None,
         cost_model: CostModel | None = None) -> Schedule:
    """The schedule of the NPU nodes `nodes` (in order) of `graph`; `inputs` / `outputs` are
    the boundary values (the program's I/O). `region_sizes`: how many of `nodes` each NPU
    region has (one region if None); regions share one DRAM arena and one constant pool, and
    steps are never fused across a boundary. `units`: the steps and mappings to use instead of
    searching (tests). `on_chip_residency`: keep activations on chip between steps where the
    cost model finds it faster (codegen/resident.py; CompileOptions turns it on by default).
    `prefetch`: load each step's first group during the previous step where SRAM allows
    (codegen/prefetch.py).
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
                     prefetch, units, True, cost_model)
        assert only is not None  # (nothing to beat: a schedule)
        return only
    cache = search_cache.active()  # (an empty cache is falsy: test for None)
    with search_cache.use(cache if cache is not None else search_cache.SearchCache()):
        chained = _plan(graph, nodes, inputs, outputs, arch, region_sizes, True, prefetch,
                        None, True, cost_model)
        assert chained is not None
        if not any(isinstance(s.unit, FusedChain) or _input_resident(s.mapping)
                   for s in chained.steps):
            return chained
        alone = _plan(graph, nodes, inputs, outputs, arch, region_sizes, True, prefetch, None,
                      False, cost_model, chained.cycles)
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
    return isinstance(mapping, ops_conv.ConvMapping) and mapping.order.input_resident


def _plan(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str],
          arch: NpuArch, region_sizes: Sequence[int] | None, on_chip_residency: bool,
          prefetch: bool, units: list | None, chains: bool,
          cost_model: CostModel | None, beat: int | None = None) -> Schedule | None:
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
    # its work reads those addresses, and the DRAM placement when codegen (or the residency
    # planner) asks for its instructions
    # (memoized: the residency and prefetch planners and the estimates read the same tiles)
    works = []
    for unit, mapping, _ in choices:
        em = _emitter(unit)
        placed = consts.place(em.constants(unit, mapping, ctx))
        works.append(memoized(em.step(unit, mapping, ctx, placed)))
    arena = plan_dram(graph, nodes, inputs, outputs, arch, choices, len(consts.blob))
    dram.bind(arena.tensors)
    per_step, spilled, rewritten = ([[] for _ in choices], None, list(works))
    # the instruction costs of the residency and prefetch estimates (the search's, if analytical)
    cost = (cost_model.cost_cache(arch) if isinstance(cost_model, AnalyticalCostModel)
            else CostCache(arch))
    tops = None
    if on_chip_residency:
        tops = _sram_tops(choices, works, ctx)
        per_step, spilled, rewritten = _plan_residents(graph, nodes, inputs, outputs,
                                                       per_region, works, ctx, cost, tops)
    placed = []  # (unit, mapping, estimate, work, region) with residents, in program order
    k = 0
    for r, group in enumerate(per_region):
        for unit, mapping, est in group:
            # a step with residents is estimated below, once its prefetch role is known
            placed.append((unit, mapping, None if per_step[k] else est, rewritten[k], r))
            k += 1
    keeps = ([[(x.sram, x.sram + x.hi - x.lo) for x in per_step[k]] for k in range(len(placed))]
             if on_chip_residency else None)
    planned = prefetch_steps.plan_steps([s[3] for s in placed], [s[4] for s in placed], keeps,
                                        arch.onchip.sram_bytes, (wmem, len(consts.blob)),
                                        prefetch, tops)
    steps = []
    for k, ((unit, mapping, est, _, r), p) in enumerate(zip(placed, planned, strict=True)):
        if est is None or p.prefetched or p.prefetch:
            est = _planned_estimate(unit, mapping, p, not per_step[k], ctx, cost)
        steps.append(ScheduledStep(unit, mapping, est, r, p.work, tuple(per_step[k]),
                                   p.prefetched, p.prefetch))
    return Schedule(arch, graph, tuple(steps), len(per_region), tuple(inputs), tuple(outputs),
                    dict(dram), arena.peak_bytes, arena.naive_bytes,
                    ConstantLayout(wmem, bytes(consts.blob), data_consts), spilled)


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


def _planned_estimate(unit: Unit, mapping: Any, p: prefetch_steps.PlannedStep, alone: bool,
                      ctx: CodegenContext, cost: CostCache) -> Estimate:
    """`p.estimate(ctx.arch, cost)`; for a step without residents (`alone`) its arch-free
    program is shared through the active search cache by the steps of one signature and
    mapping with the same prefetch role and prefetched loads (their cost keys and memories)
    on every NPU with the same program key, as the search's candidates are."""
    cache = search_cache.active()
    if not alone or cache is None:
        return p.estimate(ctx.arch, cost)
    known = cache.by_program(cache.shared(unit, ctx), ctx.arch, "planned")
    key = (mapping, p.prefetched, tuple((cost_key(i), i.mem) for i in p.prefetch))
    prog = known.get(key)
    if prog is None:
        work = p.unmoved if p.unmoved is not None else p.work
        prog = known[key] = StepProgram(work, None, cost.tiles, p.prefetched, p.prefetch)
    return time_program(prog, cost)


def _sram_tops(choices: Sequence, works: Sequence[StepWork], ctx: CodegenContext
               ) -> list[int]:
    """`resident.sram_top` of each step, shared through the active search cache by the steps
    of one signature and mapping on every NPU with the same program key (SRAM addresses come
    from the unit, the mapping and the SRAM layout fields; tests/unit/schedule/
    test_program_reuse.py checks it on every zoo step)."""
    cache = search_cache.active()
    out = []
    for (unit, mapping, _), work in zip(choices, works, strict=True):
        known = (cache.by_program(cache.shared(unit, ctx), ctx.arch, "sram_top")
                 if cache is not None else {})
        top = known.get(mapping)
        if top is None:
            top = known[mapping] = resident.sram_top(work)
        out.append(top)
    return out


def _plan_residents(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
                    outputs: Sequence[str], per_region: list, works: Sequence[StepWork],
                    ctx: CodegenContext, cost: CostCache | None = None,
                    tops: Sequence[int] | None = None
                    ) -> tuple[list[list[resident.Resident]], dict, list[StepWork]]:
    """Per step, the resident tensors it reads or writes on chip (codegen/resident.py); the
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
    while True:
        per_step, plan_ = plan_step_residents(works, writes, reads, regions, ctx.dram,
                                              excluded | set(failed), ctx.arch, base, cost,
                                              tops)
        rewritten, bad = [], None
        for k, (w, res) in enumerate(zip(works, per_step, strict=True)):
            w = memoized(resident.rewrite_step(w, res)) if res else w
            if res and bad is None:
                try:
                    resident.all_instructions(w)
                except resident.NotResidentCapable as exc:
                    bad = (k, str(exc))
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


def plan_dram(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
              outputs: Sequence[str], arch: NpuArch, choices: Sequence,
              consts_bytes: int) -> ArenaPlan:
    """Where constants and activations go in DRAM, checked against the memories' sizes: the one
    check of "does it fit" that `compile` and `estimate` (and so `explore`) share. Raises a
    TesselCompileError naming the memory and the bytes needed."""
    wmem = arch.memory_index(arch.weights_memory)
    amem = arch.memory_index(arch.activations_memory)
    wmemory, amemory = arch.offchip[wmem], arch.offchip[amem]
    if consts_bytes > wmemory.size_bytes:
        raise TesselCompileError(f"constants need {consts_bytes} bytes but memory "
                                 f"'{wmemory.name}' has {wmemory.size_bytes}")
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
        if node.op not in DATA_MOVEMENT_OPS:
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
    (ops_fused); `input_resident_orders`: False leaves convs the weight-stationary order."""
    out: list[tuple[Unit, Any, Estimate]] = []
    alone: dict[str, tuple[Any, Estimate]] = {}

    def single(n: Node) -> tuple[Any, Estimate]:
        if n.name not in alone:
            alone[n.name] = _choose(n, ctx, cost_model=cost_model,
                                    input_resident_orders=input_resident_orders)
        return alone[n.name]

    k = 0
    with task("mapping search", total=len(nodes)) as bar:
        while k < len(nodes):
            fused = ops_fused.best_chain(graph, nodes, k, lambda n: single(n)[1].cycles,
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
    return ops_fused if isinstance(unit, FusedChain) else emitter_for(unit)


def _choose(node: Unit, ctx: CodegenContext, *, required: bool = True,
            cost_model: CostModel | None = None, input_resident_orders: bool = True
            ) -> tuple[Any, Estimate] | None:
    """The mapping with the fewest estimated cycles: every candidate ranked on a sampled
    estimate, the best few estimated in full (ties: first candidate, deterministic); the
    search, its closed-form pruning and its cache: tessel.schedule.search_cache."""
    return search_cache.choose(node, ctx, _emitter(node), estimation_context(ctx),
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
        from tessel.codegen.context import DramTensor
        t = self._ctx.graph.type_of(name)
        self[name] = DramTensor(self._ctx.act_memory, 0, t.shape, t.dtype)
        return self[name]


def step_events(work: StepWork, arch: NpuArch) -> Events:
    """Energy events of every instruction of a step (the chosen mapping, all tiles); tiles
    with the same `tile_key` have the same instructions up to addresses, so the same events
    (each key's are added up once, then counted once per tile: events are integers)."""
    total = _EventSum()
    cost = CostCache(arch).cost  # (instruction costs memoised by their fields, per arch)
    memo: dict = {}  # tile key -> (its events, how many tiles have it)
    for g in range(work.group_count):
        group = work.group_fn(g, 0)
        for ins in group.weight_loads + group.param_loads:
            total.add(cost(ins).events)
        for ins in group.vector_setup:
            total.add(cost(ins, Engine.VECTOR).events)
        for t in range(group.tile_count):
            key = work.tile_key(g, t) if work.tile_key is not None else (g, t)
            got = memo.get(key)
            if got is not None:
                got[1] += 1
                continue
            tile = work.tile_fn(g, t, top_slots(work.shape))
            ev = _EventSum()
            for ins in tile.loads + tile.matrix + tile.stores:
                ev.add(cost(ins).events)
            for ins in tile.vector:
                ev.add(cost(ins, Engine.VECTOR).events)
            memo[key] = [ev, 1]
    for ev, n in memo.values():
        total.add_sum(ev, n)
    return total.events()


_COUNTS = tuple(f.name for f in dataclasses.fields(Events)
                if not isinstance(getattr(Events(), f.name), tuple))
_PER_MEMORY = tuple(f.name for f in dataclasses.fields(Events)
                    if isinstance(getattr(Events(), f.name), tuple))


class _EventSum:
    """Events added up in place (Events + Events builds a new value per addition)."""

    def __init__(self) -> None:
        self.counts = [0] * len(_COUNTS)
        self.per_memory: list[list[int]] = [[] for _ in _PER_MEMORY]

    def add(self, ev: Events) -> None:
        counts = self.counts
        for i, name in enumerate(_COUNTS):
            counts[i] += getattr(ev, name)
        for acc, name in zip(self.per_memory, _PER_MEMORY, strict=True):
            for m, x in enumerate(getattr(ev, name)):
                if m == len(acc):
                    acc.append(0)
                acc[m] += x

    def add_sum(self, other: _EventSum, times: int) -> None:
        """`times` x the events of `other`."""
        for i, x in enumerate(other.counts):
            self.counts[i] += x * times
        for acc, more in zip(self.per_memory, other.per_memory, strict=True):
            for m, x in enumerate(more):
                if m == len(acc):
                    acc.append(0)
                acc[m] += x * times

    def events(self) -> Events:
        values: dict[str, Any] = dict(zip(_COUNTS, self.counts, strict=True))
        values.update((n, tuple(a)) for n, a in zip(_PER_MEMORY, self.per_memory, strict=True))
        return Events(**values)
