"""The mapping search of one step (`choose`) with closed-form pruning, and a cache of its
results across the steps of a model and across design points.

Search (what the schedule stage's `_choose` always did): every candidate mapping ranked on a
sampled estimate, the best `finalists` (ties: first candidate) estimated in full, the fewest
cycles wins (ties: the better-ranked). Pruning (tessel.schedule.prerank) only skips work
whose result cannot matter: candidates are visited in order of their lower bound, and once
`finalists` of them have a sampled estimate below the next one's bound (ties: candidate
order) no later candidate can make the shortlist; a finalist whose full-estimate bound is not
below the best full estimate so far cannot win. The choice, its estimate and the errors are
those of the unpruned search, except that a candidate skipped this way is never built, so an
error only building it would raise is not raised.

Estimates come from a cost model (tessel.schedule.cost_model, `choose(cost_model=)`; by
default the analytical one); the bounds of the pruning bound the analytical estimate, so a
model that is not `prunable` (the simulated one) is searched without pruning.

Cache (`SearchCache`, on while `use(cache)` is active, e.g. one per `tessel explore` worker):
a step's choice is a function of the cost model's kind (part of the key) and

* the step's signature (`unit_signature`): per node its op, attributes, result type, and per
  operand its type, whether it is a constant (and where a data constant lives), and which
  operands are the same value; constant values only for ops whose estimation reads them
  (softmax / layer-norm plans, LUT tables: `Npu.values_matter` of the op definition);
* the NPU parameters that timing and instruction selection read (`timing_key`): every NpuArch
  parameter but those declared `Affects.NONE` (tessel.arch.decl: name, description, process
  node, clock, energy and area figures, which only turn cycles and event counts into seconds,
  joules and mm^2); for the steps of vector-engine-only ops (`Npu.matrix` false) also
  without the matrix engine's.

Steps with the same signature on NPUs with the same timing key get the same choice, so a
cached choice (mapping and estimate) is returned instead of searching again. Failures are not
cached (the next request searches again and raises the same error
with its own node names).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessel.arch import NpuArch
from tessel.arch.decl import Affects
from tessel.arch.params import candidate_values, key_values
from tessel.ir import Node, Op
from tessel.ops import conv_geometry, definition
from tessel.ops.context import CodegenContext
from tessel.ops.conv_emit import ConvMapping, ConvOrder
from tessel.ops.fused_geometry import FusedChain
from tessel.schedule import prerank
from tessel.schedule.cost_model import (
    AnalyticalCostModel,
    CostModel,
    CostModelKind,
    default_cost_model,
)
from tessel.schedule.estimate import Estimate

SAMPLE_TILES = 3  # tiles per group of the first, cheap ranking of candidates
FINALISTS = 3  # candidates estimated in full



def _canon(value: Any) -> Any:
    """A hashable, exact stand-in for an attribute / type value (numpy arrays by content)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape,
                hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_canon(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _canon(v)) for k, v in value.items())))
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.name)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((f.name, _canon(getattr(value, f.name)))
                                            for f in dataclasses.fields(value)))
    if isinstance(value, (np.generic,)):
        return ("np", value.dtype.str, value.item())
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return (type(value).__name__, value)
    raise Uncacheable(f"no canonical form for {type(value).__name__}")


class Uncacheable(Exception):
    """A step whose signature has a value without an exact canonical form: searched every
    time, never cached."""


def _type_sig(t: Any, quant_free: bool) -> Any:
    return _canon(dataclasses.replace(t, quant=None) if quant_free else t)


_SIGS: dict[int, tuple[Node, Any, tuple]] = {}  # id(node) -> (node, graph, graph-only part)


def _graph_part(node: Node, graph: Any) -> tuple:
    hit = _SIGS.get(id(node))
    if hit is not None and hit[0] is node and hit[1] is graph:
        return hit[2]
    npu = definition(node.op).npu
    free = npu.quant_free if npu is not None else None
    values_matter = npu is None or npu.values_matter
    operands = []
    first_use: dict[str, int] = {}
    for k, name in enumerate(node.inputs):
        value = graph.constant_value(name)
        operands.append((
            _type_sig(graph.type_of(name), free is not None), value is not None,
            _canon(np.asarray(value)) if value is not None and values_matter else None,
            first_use.setdefault(name, k)))
    attrs = node.attrs if free is None else tuple(kv for kv in node.attrs if kv[0] not in free)
    part = (node.op.name, _canon(attrs), _type_sig(node.type, free is not None),
            tuple(operands))
    if len(_SIGS) > 100_000:
        _SIGS.clear()
    _SIGS[id(node)] = (node, graph, part)
    return part


def _node_signature(node: Node, ctx: CodegenContext) -> tuple:
    # where each operand lives: data constants as placed, the rest in act_memory (the
    # estimate's stand-in placement)
    placed = tuple(t.memory if (t := ctx.dram.get(name)) is not None else ctx.act_memory
                   for name in node.inputs)
    return _graph_part(node, ctx.graph), placed


def unit_signature(unit: Node | FusedChain, ctx: CodegenContext) -> tuple:
    """What a step's mapping search reads of the graph (see the module docstring)."""
    if isinstance(unit, FusedChain):
        # the members in order, which roles are present, and how they are wired (an operand
        # is a member's result, by index, or the k-th outside value of the chain)
        names = [n.name for n in unit.nodes]
        outside: dict[str, int] = {}
        wiring = tuple(tuple(names.index(i) if i in names else -1 - outside.setdefault(
            i, len(outside)) for i in n.inputs) for n in unit.nodes)
        roles = (unit.conv is not None, unit.project is not None, unit.add is not None)
        return ("chain", roles, tuple(_node_signature(n, ctx) for n in unit.nodes), wiring)
    return ("node", _node_signature(unit, ctx))



_KEYS: dict[tuple[int, bool], tuple[NpuArch, str]] = {}


def timing_key(arch: NpuArch, matrix: bool = True) -> str:
    """The NpuArch fields mappings and estimates depend on, as canonical JSON (without the
    matrix engine's when `matrix` is False)."""
    hit = _KEYS.get((id(arch), matrix))
    if hit is not None and hit[0] is arch:
        return hit[1]
    d = key_values(arch, lambda p: p.affects is not Affects.NONE
                   and (matrix or p.table != "matrix"))
    key = json.dumps(d, sort_keys=True)
    if len(_KEYS) > 64:
        _KEYS.clear()
    _KEYS[(id(arch), matrix)] = (arch, key)
    return key


# NpuArch parameters declared Affects.COSTS only enter instruction costs and timings: for a
# given mapping, a step's instructions, their cost keys (isa.costs.cost_key) and the shape of
# its program (schedule/estimate.StepProgram) never depend on them (the emitters read them
# to list candidates only; tests/unit/schedule/test_program_reuse.py checks every step of the
# zoo)
_PROGRAM_KEYS: dict[int, tuple[NpuArch, str]] = {}


def program_key(arch: NpuArch) -> str:
    """The NpuArch fields a step's arch-free program (schedule/estimate.StepProgram) depends on for a
    given mapping, as canonical JSON: the timing key without the cost-only fields above. NPUs
    with the same key share the programs of the search's candidates (`SearchCache.shared`)."""
    hit = _PROGRAM_KEYS.get(id(arch))
    if hit is not None and hit[0] is arch:
        return hit[1]
    d = key_values(arch, lambda p: p.affects is Affects.PROGRAMS)
    key = json.dumps(d, sort_keys=True)
    if len(_PROGRAM_KEYS) > 64:
        _PROGRAM_KEYS.clear()
    _PROGRAM_KEYS[id(arch)] = (arch, key)
    return key


# candidates parameters (declared `candidates`, tessel.arch.decl) an emitter does not list its
# candidates by: a chain's and a depthwise conv's lists read the array's columns and the vector
# lanes (their chunk widths), a conv's the columns, the rows and the off-chip bandwidths (which
# decide whether input-resident orders are offered); any other one is in every candidate key
_CHAIN_IGNORES = frozenset({"matrix.rows", "offchip.bytes_per_cycle"})
_CONV_IGNORES = frozenset({"vector.lanes"})


def candidate_key(unit: Node | FusedChain, ctx: CodegenContext) -> tuple:
    """What a step's candidate list reads of the NPU besides its signature: the program key
    and the candidates parameters its emitter lists candidates by (above); for other ops the
    whole timing key. tests/unit/schedule/test_program_reuse.py checks every step of the zoo
    against each cost-only parameter."""
    arch = ctx.arch
    if isinstance(unit, FusedChain):
        return (program_key(arch), *candidate_values(arch, _CHAIN_IGNORES))
    if unit.op is Op.QCONV2D:
        ignores = _CHAIN_IGNORES if conv_geometry.geometry(unit, ctx).depthwise else _CONV_IGNORES
        return (program_key(arch), *candidate_values(arch, ignores))
    return (timing_key(arch, _uses_matrix(unit)),)


def _uses_matrix(unit: Node | FusedChain) -> bool:
    """False for steps whose emitter runs on the vector engine alone."""
    if isinstance(unit, FusedChain):
        return True
    npu = definition(unit.op).npu
    return npu is None or npu.matrix


@dataclass
class Entry:
    """One cached search: the choice (None: no mapping of an optional unit fits);
    `input_resident`: whether any candidate took an input-resident conv order (if none did,
    the weight-stationary-only search of the same step is this search)."""

    choice: tuple[Any, Estimate] | None
    input_resident: bool = True


@dataclass
class Shared:
    """What the searches of one step signature share across NPUs (`SearchCache.shared`)."""

    candidates: dict = field(default_factory=dict)  # candidate_key -> the candidate list
    bounds: dict = field(default_factory=dict)  # (mapping, sample) -> prerank.Terms
    programs: dict = field(default_factory=dict)  # program key -> kind -> {key: value}


class SearchCache:
    """Least-recently-used map (timing key, unit signature) -> Entry; and, for the searches
    that had input-resident candidates, their estimates ((mapping, sample) -> Estimate) until
    the weight-stationary-only search of the same step takes them (`estimates`, the last
    `max_estimates` such searches)."""

    def __init__(self, max_entries: int = 50_000, max_estimates: int = 256,
                 max_shared: int = 4096, max_program_keys: int = 4):
        self.max_entries = max_entries
        self.max_estimates = max_estimates
        self.max_shared = max_shared
        self.max_program_keys = max_program_keys
        self._map: OrderedDict[tuple, Entry] = OrderedDict()
        self._estimates: OrderedDict[tuple, dict] = OrderedDict()
        self._shared: OrderedDict[tuple, Shared] = OrderedDict()
        self._program_keys: OrderedDict[str, None] = OrderedDict()
        self.hits = self.misses = 0

    def shared(self, unit: Node | FusedChain, ctx: CodegenContext,
               signature: tuple | None = None) -> Shared:
        """What the searches of steps with `unit`'s signature (`signature` if the caller has it)
        share across NPUs, kept for the last `max_shared` signatures."""
        sig = signature if signature is not None else unit_signature(unit, ctx)
        key = (sig, ctx.consts.memory, ctx.act_memory)
        got = self._shared.get(key)
        if got is None:
            got = self._shared[key] = Shared()
            while len(self._shared) > self.max_shared:
                self._shared.popitem(last=False)
        else:
            self._shared.move_to_end(key)
        return got

    def by_program(self, shared: Shared, arch: NpuArch, kind: str) -> dict:
        """`shared`'s `kind` dict (the search's "programs"; the plan's "placed" steps and
        "resident" keyed-rewrite programs, schedule/plan.py) for NPUs with `arch`'s program
        key. Those of the least recently used program keys beyond `max_program_keys` are
        dropped (MobileNetV2's programs for one key take ~90 MB)."""
        pk = program_key(arch)
        if pk in self._program_keys:
            self._program_keys.move_to_end(pk)
        else:
            self._program_keys[pk] = None
            while len(self._program_keys) > self.max_program_keys:
                old, _ = self._program_keys.popitem(last=False)
                for sh in self._shared.values():
                    sh.programs.pop(old, None)
        return shared.programs.setdefault(pk, {}).setdefault(kind, {})

    def keep_estimates(self, key: tuple, estimates: dict) -> None:
        self._estimates[key] = estimates
        while len(self._estimates) > self.max_estimates:
            self._estimates.popitem(last=False)

    def take_estimates(self, key: tuple) -> dict:
        """The estimates kept for `key`, forgotten here ({} if none)."""
        return self._estimates.pop(key, {})

    def __len__(self) -> int:
        return len(self._map)

    def key(self, unit: Node | FusedChain, ctx: CodegenContext,
            kind: CostModelKind = CostModelKind.ANALYTICAL) -> tuple:
        return kind, timing_key(ctx.arch, _uses_matrix(unit)), unit_signature(unit, ctx)

    def get(self, key: tuple) -> Entry | None:
        entry = self._map.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._map.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, key: tuple, entry: Entry) -> None:
        self._map[key] = entry
        self._map.move_to_end(key)
        while len(self._map) > self.max_entries:
            self._map.popitem(last=False)


_ACTIVE: contextvars.ContextVar[SearchCache | None] = contextvars.ContextVar(
    "tessel_search_cache", default=None)


_PRUNE: contextvars.ContextVar[bool] = contextvars.ContextVar("tessel_search_prune",
                                                            default=True)


@contextlib.contextmanager
def pruning(on: bool) -> Iterator[None]:
    """Closed-form pruning on (the default) or off (the reference search) for the block."""
    token = _PRUNE.set(on)
    try:
        yield
    finally:
        _PRUNE.reset(token)


def active() -> SearchCache | None:
    """The cache `choose` uses now (None: none)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def use(cache: SearchCache | None) -> Iterator[SearchCache | None]:
    """Make `cache` the active one for the block (None: no cache)."""
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


def choose(node: Node | FusedChain, ctx: CodegenContext, emitter: Any,
           est_ctx: CodegenContext, *, required: bool = True, prune: bool | None = None,
           cost_model: CostModel | None = None, input_resident_orders: bool = True
           ) -> tuple[Any, Estimate] | None:
    """The mapping with the fewest estimated cycles (the module docstring); `est_ctx`: the
    estimation context (DRAM placement stand-in) candidates are built in; `cost_model`: what
    estimates the candidates (None: a new AnalyticalCostModel; a model that is not
    `prunable` is searched without pruning); `input_resident_orders`: False leaves a conv
    the weight-stationary order only (conv_emit.ConvOrder)."""
    model = default_cost_model(cost_model)
    cache = active()
    key = None
    only_ws = not input_resident_orders and isinstance(node, Node) and node.op is Op.QCONV2D
    if cache is not None:
        try:
            key = cache.key(node, ctx, model.kind) + ((ConvOrder.WEIGHTS,) if only_ws else ())
        except Uncacheable:
            cache = None
    estimates: dict = {}  # (mapping, sample) -> Estimate, known or made by this search
    if cache is not None and key is not None:
        entry = cache.get(key)
        if entry is None and only_ws:  # the full search, if it had no input-resident order
            full = cache.get(key[:-1])
            entry = full if full is not None and not full.input_resident else None
            if full is not None and full.input_resident:  # its estimates are this search's
                estimates = cache.take_estimates(key[:-1])
        if entry is not None:
            if entry.choice is None and required:
                _no_mapping(node, ctx)
            return entry.choice
    prune = _PRUNE.get() if prune is None else prune
    shared = cache.shared(node, est_ctx, key[2]) if cache is not None and key else Shared()
    programs = cache.by_program(shared, ctx.arch, "programs") if cache is not None else {}
    best, input_resident = _search(node, ctx, emitter, est_ctx, prune and model.prunable, model,
                                   only_ws, estimates, shared, programs)
    if best is None and required:
        _no_mapping(node, ctx)
    if cache is not None and key is not None:
        cache.put(key, Entry(best, input_resident))
        if input_resident and not only_ws:
            cache.keep_estimates(key, estimates)
    return best


def _no_mapping(node: Node | FusedChain, ctx: CodegenContext) -> None:
    from tessel.errors import TesselCompileError
    what = node.described() if isinstance(node, Node) else \
        f"{node.last.described()}, fused as {node}"
    raise TesselCompileError(f"{what}: no mapping fits the NPU's SRAM "
                             f"({ctx.arch.onchip.sram_bytes} bytes) and accumulator")


def _search(node: Node | FusedChain, ctx: CodegenContext, em: Any, est_ctx: CodegenContext,
            prune: bool, model: CostModel, weight_stationary: bool = False,
            estimates: dict | None = None, shared: Shared | None = None,
            programs: dict | None = None) -> tuple[tuple[Any, Estimate] | None, bool]:
    """The choice, and whether any candidate took an input-resident conv order. `estimates`:
    (mapping, sample) -> Estimate of this step by `model`, read before estimating a
    candidate and filled with the estimates made; `shared`: what searches of the step's
    signature share on every NPU (`SearchCache.shared`); `programs`: (mapping, sample) -> the
    candidate's arch-free program, on every NPU alike in program_key
    (`SearchCache.by_program`)."""
    known = {} if estimates is None else estimates
    works: dict[Any, Any] = {}  # mapping -> its step (a finalist's full estimate reuses it)
    arch = ctx.arch
    shared = shared if shared is not None else Shared()
    if not isinstance(model, AnalyticalCostModel):
        programs = None  # (only the analytical model's estimates are arch-free programs)
    elif programs is None:
        programs = {}

    def work_of(mapping: Any) -> Any:
        work = works.get(mapping)
        if work is None:
            work = works[mapping] = em.step(node, mapping, est_ctx)
        return work

    def estimate(mapping: Any, sample: int | None) -> Estimate:
        est = known.get((mapping, sample))
        if est is None:
            if programs is None:
                est = model.estimate(work_of(mapping), arch, sample=sample)
            else:
                assert isinstance(model, AnalyticalCostModel)
                prog = programs.get((mapping, sample))
                if prog is None:
                    prog = programs[mapping, sample] = model.program(work_of(mapping), arch,
                                                                     sample=sample)
                est = model.time(prog, arch)
            known[mapping, sample] = est
        return est

    ckey = candidate_key(node, est_ctx)
    cands = shared.candidates.get(ckey)
    if cands is None:
        cands = shared.candidates[ckey] = list(em.candidates(node, est_ctx))
    input_resident = any(isinstance(m, ConvMapping) and m.order.input_resident for m in cands)
    if weight_stationary:
        cands = [m for m in cands if not m.order.input_resident]
    if not cands:
        return None, input_resident
    bound = prerank.Bounds(node, est_ctx, shared.bounds) if prune else None
    if bound is None or not bound.available:  # every candidate in order (k: the tie-break)
        order = list(enumerate(cands))
        lows = None
    else:
        lows = [bound(m, SAMPLE_TILES) for m in cands]
        order = sorted(enumerate(cands), key=lambda km: (lows[km[0]], km[0]))
    ranked: list[tuple[int, int, Any]] = []
    for k, mapping in order:
        if lows is not None and len(ranked) >= FINALISTS:
            ranked.sort(key=lambda r: (r[0], r[1]))
            if (ranked[FINALISTS - 1][0], ranked[FINALISTS - 1][1]) < (lows[k], k):
                break  # this and every later candidate rank below the shortlist
        ranked.append((estimate(mapping, SAMPLE_TILES).cycles, k, mapping))
    best = None
    for _, _, mapping in sorted(ranked, key=lambda r: (r[0], r[1]))[:FINALISTS]:
        if best is not None and lows is not None:
            low = bound(mapping, None)
            if low is not None and low >= best[1].cycles:
                continue  # cannot be strictly faster than the best so far
        est = estimate(mapping, None)
        if best is None or est.cycles < best[1].cycles:
            best = (mapping, est)
    return best, input_resident
