"""The analytical estimate of one step's cycles from the per-instruction costs of docs/isa.md
(`tessel.isa.costs`): the step's arch-free program (`StepProgram`: its queues and tokens, each
compute block and transfer a `Term` of instructions), timed by the NPU's timing rules, the
simulator's own (tessel.sim.clock), with the per-arch memos of `CostCache`.
`estimate_step(work, arch)` is the entry point; the schedule stage's search keeps programs to
time them again on other NPUs (tessel.schedule.search)."""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from tessel.arch import NpuArch
from tessel.isa import Engine, Instruction
from tessel.isa.costs import Cost, cost_key, instruction_cost
from tessel.isa.footprint import accesses
from tessel.ops.step import StepWork, top_slots
from tessel.sim import clock


class Bound(enum.Enum):
    """What limits a step (recorded for the report)."""

    COMPUTE = "compute"  # the matrix engine
    VECTOR = "vector"  # the vector engine
    DRAM = "dram"  # off-chip bandwidth
    LATENCY = "latency"  # fixed DMA latencies / pipeline fill of short steps


@dataclass(frozen=True)
class Estimate:
    cycles: int
    bound: Bound
    busy: dict[Engine, int]


# ops of a step's program at tile granularity (StepProgram), the rows of tessel.sim.clock:
# consecutive compute instructions of an engine are one _WORK; every DMA transfer is its own
# _XFER (with its hazard group, `hazard_groups`); a compute engine's tile (its WAITs, its
# instructions, its SIGNALs) is one _TILE. Their
# cycles are arch-free: a _WORK, an _XFER or a _TILE names a term (an index into
# StepProgram.terms) whose cycles on an NPU are its instructions' costs added up
# (`CostCache.term_values`)
_WAIT, _SIGNAL, _WORK, _XFER, _TILE = (clock.ROW_WAIT, clock.ROW_SIGNAL, clock.ROW_WORK,
                                       clock.ROW_XFER, clock.ROW_TILE)


def estimate_step(work: StepWork, arch: NpuArch, *, sample: int | None = None,
                  cache: CostCache | None = None, prefetched: bool = False,
                  prefetch: Sequence[Instruction] = ()) -> Estimate:
    """Cycles of a step from per-instruction costs, following the program the emit stage emits for
    it (emit/step.py): the same queue per engine in the same order, with the rings' WAIT /
    SIGNAL tokens, but each tile's compute instructions on an engine taken as one block of
    their summed cost. Timing follows the simulator's rules (sim/timing.py): WAIT and SIGNAL
    cost one cycle, a DMA engine issues one transfer per cycle with up to `dma_channels` in
    flight and its SIGNAL waits for its transfers; each off-chip memory's data port serves
    transfers (of both DMA engines) first come, first served in order of issue.

    sample: only run the first `sample` tiles of the first two groups and scale the time by
    the share of tiles run (a cheap first ranking of many candidate mappings).

    prefetched / prefetch: as emit/step.py `emit_step` (schedule/prefetch.py): the step's
    group-0 loads were issued by the previous step (they are not in this step's program: the
    previous step's estimate has them), and `prefetch` are the next step's group-0 loads this
    step issues after its last tile's loads, its end waiting for them to land. Each step's
    estimate thus stays the time of its own instructions from an idle start.

    The same as `time_program(StepProgram(work, ...), cache)`: the program is arch-free, so a
    search that meets the same step again on another NPU times it without building it."""
    cost = cache if cache is not None and cache.arch is arch else CostCache(arch)
    return time_program(StepProgram(work, sample, cost.tiles, prefetched, prefetch), cost)


def time_program(prog: StepProgram, cost: CostCache) -> Estimate:
    """The estimate of `prog` on `cost.arch` (see estimate_step)."""
    total, busy = cost.run(prog)
    if prog.sample is not None and prog.run_tiles:
        total, busy = scaled(total, busy, prog.counts, prog.group_count, prog.run_tiles)
    return Estimate(total, limit(busy, total), busy)


def scaled(total: int, busy: dict[Engine, int], counts: Sequence[int], group_count: int,
           run_tiles: int) -> tuple[int, dict[Engine, int]]:
    """A sampled run's cycles and busy cycles scaled to the whole step: groups of a step have
    (nearly) the same tile count, so by the sampled groups' average (`counts`: their tile
    counts) rather than building every group's loads just to count its tiles."""
    scale = sum(counts) / len(counts) * group_count / run_tiles
    return int(total * scale), {e: int(b * scale) for e, b in busy.items()}


class Term:
    """Instructions whose costs, added up, are one number of a program (a tile's work on an
    engine, one transfer); equal for instruction lists with the same cost keys
    (`isa.costs.cost_key`), so interned by them (`term`). `tid`: unique in the process."""

    __slots__ = ("tid", "keys", "instrs", "engine")

    def __init__(self, tid: int, keys: tuple, instrs: tuple[Instruction, ...],
                 engine: Engine | None):
        self.tid, self.keys, self.instrs, self.engine = tid, keys, instrs, engine


_TERMS: dict[tuple, Term] = {}  # cost keys -> Term (emptied when full; tids are never reused)
_TIDS = itertools.count(1)
_NO_WORK = Term(0, (), (), None)


def term(instrs: Sequence[Instruction], engine: Engine | None = None) -> Term:
    """The term of `instrs` on `engine` (None: its own)."""
    if not instrs:
        return _NO_WORK
    keys = tuple([cost_key(i, engine) for i in instrs])
    t = _TERMS.get(keys)
    if t is None:
        if len(_TERMS) >= 1 << 18:
            _TERMS.clear()
        t = _TERMS[keys] = Term(next(_TIDS), keys, tuple(instrs), engine)
    return t


class _Shape:
    """A program's structure: its queues with term indices (interned: programs alike in all but
    their terms' instructions share one, its `sid` keys their timings) and, once asked for, its
    table of tessel.sim.clock rows."""

    __slots__ = ("sid", "queues", "keys", "table", "arrays", "hazards")

    def __init__(self, sid: int, queues: tuple[tuple[tuple, ...], ...], keys: int):
        self.sid, self.queues, self.keys = sid, queues, keys
        self.table: tuple[list[int], list[int], list[int]] | None = None
        self.arrays: tuple[np.ndarray, ...] | None = None
        # the largest hazard group of its transfers (0: none, no boxes to time)
        self.hazards = max((op[3] for q in queues for op in q if op[0] == _XFER), default=0)


_SHAPES: dict[tuple, _Shape] = {}  # (keys, queues) -> its _Shape (emptied when full)
_SHAPE_IDS = itertools.count()


class StepProgram:
    """The four queues of a step as emit/step.py orders them (rings, group slots, drains,
    step-done tokens), each op a tuple: (_WAIT, key), (_SIGNAL, key, engines to wake as a bit
    mask), (_WORK, term), (_XFER, term, memory, hazard group), (_TILE, wait keys, term, signal
    keys, engines to wake); `terms`: the terms they index. Nothing in it depends on the NPU's
    figures: `time_program` times it on any NPU.

    `tiles`: (cost scope, tile key) -> a tile's terms, shared by the programs of works with a
    `cost_scope` (the candidates of one step)."""

    def __init__(self, work: StepWork, sample: int | None, tiles: dict | None = None,
                 prefetched: bool = False, prefetch: Sequence[Instruction] = ()):
        self.slots = top_slots(work.shape)
        self.sample, self.group_count = sample, work.group_count
        self._q: list[list[tuple]] = [[] for _ in Engine]  # the queues while building
        self.waiter: list[int] = []  # per token key: the engine that waits for it (-1: none)
        self.counts: list[int] = []
        self.run_tiles = 0
        self.terms: list[Term] = [_NO_WORK]
        self._index: dict[int, int] = {0: 0}  # term id -> its index in `terms`
        self._shared = tiles if tiles is not None else {}
        shape = work.shape
        mx = shape.uses_matrix
        first = Engine.MATRIX if mx else Engine.VECTOR
        gw = self._ring(Engine.DMA_IN, Engine.MATRIX, shape.group_depth) if mx else None
        gp = self._ring(Engine.DMA_IN, Engine.VECTOR, shape.group_depth)
        inp = self._ring(Engine.DMA_IN, first, shape.in_depth)
        acc = self._ring(Engine.MATRIX, Engine.VECTOR, shape.acc_depth) if mx else None
        out = self._ring(Engine.VECTOR, Engine.DMA_OUT, shape.out_depth)
        # emit/step.py: the staging copies' ring, DMA_IN -> DMA_OUT (schedule/staging.py)
        cp = self._ring(Engine.DMA_IN, Engine.DMA_OUT, shape.copy_depth) \
            if shape.copy_depth else None
        rings = [r for r in (gw, gp, inp, acc, out, cp) if r is not None]
        q_in, q_mx, q_vec, q_out = self._q
        # the token ops of one tile (Ring.acquire / publish / consume / release)
        in_ready_s, in_free_w = self._signal(inp[4]), (_WAIT, inp[5], 0, 0)
        out_ready_w, out_free_s = (_WAIT, out[4], 0, 0), self._signal(out[5])
        if acc is not None:
            mx_waits = ((inp[4],), (inp[4], acc[5]))  # consume inp [, acquire acc]
            mx_signals = (inp[5], acc[4])  # release inp, publish acc
            vec_waits = ((acc[4],), (acc[4], out[5]))  # consume acc [, acquire out]
            vec_signals = (acc[5], out[4])  # release acc, publish out
        else:
            vec_waits = ((inp[4],), (inp[4], out[5]))
            vec_signals = (inp[5], out[4])
        mx_wake = (1 << Engine.DMA_IN) | (1 << Engine.VECTOR)  # the producer, the consumer
        vec_wake = (1 << (Engine.MATRIX if acc is not None else Engine.DMA_IN)) | (
            1 << Engine.DMA_OUT)
        memo: dict[Hashable, tuple] = {}
        groups = work.group_count if sample is None else min(2, work.group_count)
        unpublished = 0  # copies loaded but not yet published
        for g in range(groups):
            group = work.group_fn(g, 0)
            self.counts.append(group.tile_count)
            self._acquire(gp)
            if gw is not None:
                self._acquire(gw)
            loads = [] if prefetched and g == 0 else group.weight_loads + group.param_loads
            q_in.extend(self._xfers(loads))
            # emit/step.py: a step's first group signals ready after the first tile's loads
            defer = g == 0 and bool(loads) and group.tile_count > 0
            if not defer:
                if gw is not None:
                    self._publish(gw)
                self._publish(gp)
            if gw is not None:
                self._consume(gw)
            self._consume(gp)
            if group.vector_setup:
                q_vec.append((_WORK, self._term(term(group.vector_setup, Engine.VECTOR)), 0,
                              0))
            n = group.tile_count if sample is None else min(sample, group.tile_count)
            self.run_tiles += n
            k0 = inp[3]  # tiles so far in the step (each ring slot acquired once per tile)
            for t in range(n):
                loads, mwork, vwork, stores, cloads, cstores = self._tile(work, g, t, memo)
                k = k0 + t
                if k >= inp[2]:
                    q_in.append(in_free_w)
                q_in.extend(loads)
                if defer and t == 0:
                    if gw is not None:
                        self._publish(gw)
                    self._publish(gp)
                q_in.append(in_ready_s)
                for _ in range(unpublished):  # emit/step.py: with the next tile's input
                    self._publish(cp)
                for x in cloads:
                    self._acquire(cp)
                    q_in.append(x)
                unpublished = len(cloads)
                # a compute engine's tile: its WAITs, its instructions, its SIGNALs
                if acc is not None:
                    q_mx.append((_TILE, mx_waits[k >= acc[2]], mwork, mx_signals, mx_wake))
                q_vec.append((_TILE, vec_waits[k >= out[2]], vwork, vec_signals, vec_wake))
                if shape.copy_early:  # emit/step.py: before the tile's outputs
                    self._store_copies(cp, cstores)
                q_out.append(out_ready_w)
                q_out.extend(stores)
                q_out.append(out_free_s)
                if not shape.copy_early:
                    self._store_copies(cp, cstores)
            for r in (inp, acc, out):
                if r is not None:
                    r[3] += n
            if gw is not None:
                self._release(gw)
            self._release(gp)
        for _ in range(unpublished):
            self._publish(cp)
        q_in.extend(self._xfers(prefetch))  # the next step's group 0 (schedule/prefetch.py)
        for r in rings:  # Streams.end_step: drain every ring, then the step-done tokens
            for _ in range(min(r[2], r[3])):
                self._q[r[0]].append((_WAIT, r[5], 0, 0))
        for e in (Engine.MATRIX, Engine.VECTOR) + ((Engine.DMA_IN,) if prefetch else ()):
            key = self._key(Engine.DMA_OUT)
            self._q[e].append(self._signal(key))
            q_out.append((_WAIT, key, 0, 0))
        q_out.append(self._signal(self._key(-1)))  # to the next step's DMA_IN
        keys = len(self.waiter)
        shape_key = (keys, *(tuple(q) for q in self._q))
        shape = _SHAPES.get(shape_key)
        if shape is None:
            if len(_SHAPES) >= 4096:
                _SHAPES.clear()
            shape = _SHAPES[shape_key] = _Shape(next(_SHAPE_IDS), shape_key[1:], keys)
        self._shape = shape
        self.queues: tuple[tuple[tuple, ...], ...] = shape.queues  # (interned: one copy kept)
        self.keys, self.shape_id = keys, shape.sid
        del self._q, self._index, self._shared, self.waiter, self.slots

    def table(self, compiled: bool) -> tuple:
        """The program as tessel.sim.clock's rows, each engine's first row and the end, each
        token key's first slot in the signals' buffer and the end, and the transfers' boxes
        (one per hazard group, `hazard_groups`; None without any): flat lists for the Python
        source, int64 arrays for the compiled form; one of each per program shape."""
        shape = self._shape
        if shape.table is None:
            rows: list[int] = []
            bounds = [0]
            nsig = [0] * shape.keys
            conv: dict[tuple, tuple] = {}
            for q in shape.queues:
                for op in q:
                    row = conv.get(op)
                    if row is None:
                        row = conv[op] = _row(op)
                    kind = row[0]
                    if kind == _SIGNAL:
                        nsig[row[1]] += 1
                    elif kind == _TILE:
                        for s in op[3]:
                            nsig[s] += 1
                    rows.extend(row)
                bounds.append(len(rows) // clock.COLS)
            off = [0] * (shape.keys + 1)
            for k, n in enumerate(nsig):
                off[k + 1] = off[k] + n
            # per hazard group one box (tessel.sim.clock's BOX ints): a written byte of a
            # memory of its own, so exactly the group's transfers overlap
            boxes = [v for h in range(1, shape.hazards + 1) for v in (0, h, 0, 1, 1)]
            shape.table = (rows, bounds, off, boxes or None)
        if not compiled:
            return shape.table
        if shape.arrays is None:
            shape.arrays = tuple(None if x is None else np.array(x, np.int64)
                                 for x in shape.table)
        return shape.arrays

    def _key(self, waiter: int) -> int:
        self.waiter.append(int(waiter))
        return len(self.waiter) - 1

    def _ring(self, producer: Engine, consumer: Engine, depth: int) -> list:
        # [producer, consumer, depth, acquired, ready key, free key]
        return [producer, consumer, max(1, depth), 0, self._key(consumer), self._key(producer)]

    def _acquire(self, r: list) -> None:
        if r[3] >= r[2]:
            self._q[r[0]].append((_WAIT, r[5], 0, 0))
        r[3] += 1

    def _signal(self, key: int) -> tuple:
        w = self.waiter[key]
        return (_SIGNAL, key, 1 << w if w >= 0 else 0, 0)

    def _publish(self, r: list) -> None:
        self._q[r[0]].append(self._signal(r[4]))

    def _consume(self, r: list) -> None:
        self._q[r[1]].append((_WAIT, r[4], 0, 0))

    def _release(self, r: list) -> None:
        self._q[r[1]].append(self._signal(r[5]))

    def _term(self, t: Term) -> int:
        k = self._index.get(t.tid)
        if k is None:
            k = self._index[t.tid] = len(self.terms)
            self.terms.append(t)
        return k

    def _xfers(self, instrs: Sequence[Instruction]) -> list[tuple]:
        # a group's weight and parameter loads: distinct SRAM slots, no hazard group
        return [(_XFER, self._term(term((ins,))), ins.mem, 0) for ins in instrs]

    def _store_copies(self, cp: list | None, cstores: list[tuple]) -> None:
        for x in cstores:
            self._consume(cp)
            self._q[Engine.DMA_OUT].append(x)
            self._release(cp)

    def _tile(self, work: StepWork, g: int, t: int, memo: dict[Hashable, tuple]) -> tuple:
        key = work.tile_key(g, t) if work.tile_key is not None else None
        terms = scoped = None
        if key is not None:
            ops = memo.get(key)
            if ops is not None:
                return ops
            if work.cost_scope is not None:  # shared with the scope's other works
                scoped = (work.cost_scope, key)
                terms = self._shared.get(scoped)
        if terms is None:
            tile = work.tile_fn(g, t, self.slots)
            terms = (_xfer_terms(tile.loads), term(tile.matrix, Engine.MATRIX),
                     term(tile.vector, Engine.VECTOR), _xfer_terms(tile.stores),
                     tuple([(term((c[0],)), c[0].mem, 0) for c in tile.copies]),
                     tuple([(term((c[1],)), c[1].mem, 0) for c in tile.copies]))
            if scoped is not None:
                self._shared[scoped] = terms
        ix = self._term
        ops = ([(_XFER, ix(x), m, h) for x, m, h in terms[0]], ix(terms[1]), ix(terms[2]),
               [(_XFER, ix(x), m, h) for x, m, h in terms[3]],
               [(_XFER, ix(x), m, h) for x, m, h in terms[4]],
               [(_XFER, ix(x), m, h) for x, m, h in terms[5]])
        if key is not None:
            memo[key] = ops
        return ops


def _xfer_terms(instrs: Sequence[Instruction]) -> tuple[tuple[Term, int, int], ...]:
    """(term, memory, hazard group) of each transfer of a tile's loads or stores."""
    return tuple([(term((i,)), i.mem, h)
                  for i, h in zip(instrs, hazard_groups(instrs), strict=True)])


def hazard_groups(instrs: Sequence[Instruction]) -> tuple[int, ...]:
    """Per transfer of `instrs` (one engine's transfers between two of its SIGNALs), its
    hazard group: 0 for a transfer whose operand boxes overlap none of the others' with either
    writing, else a number > 0 shared with those it overlaps (transitively). The simulator
    starts a transfer only once the transfers of its engine in flight that it overlaps have
    ended (tessel.sim.clock); a DMA engine's SIGNAL waits for all its transfers, so only
    transfers between two SIGNALs can be in flight together. Overlaps of one tensor's own
    boxes (a 5-D pattern split into interleaved 4-D transfers) hold wherever the tensor is
    placed, so the search's stand-in addresses see them too."""
    n = len(instrs)
    if n < 2:
        return (0,) * n
    boxes = [accesses(i) for i in instrs]
    parent = list(range(n))

    def root(a: int) -> int:
        while parent[a] != a:
            a = parent[a]
        return a

    for b in range(1, n):
        for a in range(b):
            if _overlap(boxes[a], boxes[b]):
                parent[root(b)] = root(a)
    roots = [root(a) for a in range(n)]
    shared = sorted({r for r in roots if roots.count(r) > 1})
    return tuple(shared.index(r) + 1 if r in shared else 0 for r in roots)


def _overlap(xs: Sequence, ys: Sequence) -> bool:
    """Two transfers' boxes overlap in one memory with either writing (tessel.sim.clock)."""
    return any(x.space == y.space and x.mem == y.mem and (x.write or y.write)
               and x.lo < y.hi and y.lo < x.hi for x in xs for y in ys)


def _row(op: tuple) -> tuple:
    """An op of StepProgram.queues as a row of tessel.sim.clock (COLS ints)."""
    kind = op[0]
    if kind == _TILE:
        ws, ss = op[1], op[3]
        assert len(ws) <= 2 and len(ss) <= 2, "a tile waits for and signals two keys at most"
        return (_TILE, ws[0], ws[1] if len(ws) > 1 else -1, op[2], ss[0] if ss else -1,
                ss[1] if len(ss) > 1 else -1, op[4], 0)
    if kind == _WAIT:
        return (_WAIT, op[1], 0, 0, 0, 0, 0, 0)
    if kind == _SIGNAL:
        return (_SIGNAL, op[1], op[2], 0, 0, 0, 0, 0)
    if kind == _WORK:
        return (_WORK, op[1], 0, 0, 0, 0, 0, 0)
    if op[3]:  # its hazard group's box: the group-th of StepProgram.table's boxes
        return (_XFER, op[1], op[2], op[3] - 1, op[3], 0, 0, 0)
    return (_XFER, op[1], op[2], 0, 0, 0, 0, 0)


# tiered: a process times programs with the timing rules' Python source until it has timed
# KERNEL_AFTER of them, then with their compiled form (tessel.sim.clock, built ahead of time
# once per machine; numba's just-in-time compile where it cannot be built): one compile does
# not win back a build or numba's start, a design-space exploration worker does after its
# first few points, and switches after its first (`expect_programs`: docs/backend.md). When
# the ahead-of-time module is already built, its load (about a millisecond) and the programs'
# flattening are won back after KERNEL_AFTER_BUILT programs (MobileNetV2's compile times ~600)
KERNEL_AFTER = 1500
KERNEL_AFTER_BUILT = 150
_TIMED = [0]  # programs this process has timed with the Python source


def programs_run() -> int:
    """Programs this process has timed with the Python source (the tier's count; it stops where
    the compiled form takes over)."""
    return _TIMED[0]


def expect_programs(n: int) -> None:
    """Tell the tier this process will time about `n` more programs (an exploration worker
    with points left in its run, tessel.analysis.explore_run): if that takes it to
    KERNEL_AFTER, the compiled form from now on, since its start (a load, or a first build)
    will be paid anyway."""
    if _TIMED[0] < KERNEL_AFTER <= _TIMED[0] + n:
        _TIMED[0] = KERNEL_AFTER


RUN_POINTS_BUILT = 4  # points a run needs (`expect_run`; digits_cnn's point times 41 programs)


def expect_run(points: int) -> None:
    """Before its first point, an exploration worker's run of `points`: with RUN_POINTS_BUILT
    or more (over KERNEL_AFTER_BUILT programs on the smallest zoo models) and the compiled
    form already built, the compiled form from the first program on."""
    if points >= RUN_POINTS_BUILT and _TIMED[0] < KERNEL_AFTER_BUILT and _compiled_built():
        _TIMED[0] = KERNEL_AFTER_BUILT


def _time(prog: StepProgram, vals: Sequence[int], lats: Sequence[int], channels: int,
          compiled: bool | None = None) -> tuple[int, dict[Engine, int]]:
    """The program's cycles (from its first non-control op to the end of its last op) and busy
    cycles per engine by tessel.sim.clock: its Python source, or its compiled form once the
    process has timed KERNEL_AFTER programs, or KERNEL_AFTER_BUILT with the compiled form
    already built (`compiled`: force one)."""
    if compiled is None:
        n = _TIMED[0]
        compiled = (n >= KERNEL_AFTER or (n >= KERNEL_AFTER_BUILT and _compiled_built())) \
            and _compiled_available()
        if not compiled:
            _TIMED[0] += 1
    rows, bounds, sig_off, boxes = prog.table(compiled)
    out, _, _ = clock.time_rows(rows, bounds, sig_off, vals, lats, channels, boxes=boxes,
                                compiled=compiled)
    if out[clock.OUT_BLOCKED]:
        raise AssertionError("estimate_step: the step's token protocol does not complete")
    total = int(out[clock.OUT_TOP]) - min(int(out[clock.OUT_FIRST]),
                                          int(out[clock.OUT_MAX_READY]))
    return total, {e: int(out[clock.OUT_BUSY + e]) for e in Engine}


@functools.cache
def _compiled_available() -> bool:
    """Compiled kernels are on (tessel.sim.jit)."""
    from tessel.sim import jit
    return jit.enabled()


@functools.cache
def _compiled_built() -> bool:
    """The timing rules' ahead-of-time module is already built (tessel.sim.aot): running them
    compiled costs its load alone."""
    from tessel.sim import aot
    return aot.built(clock.run_arrays)


def limit(busy: dict[Engine, int], total: int) -> Bound:
    """What limits a step that ran `total` cycles with these busy cycles per engine."""
    top = max(busy, key=lambda e: busy[e])
    if busy[top] < 0.5 * total:
        return Bound.LATENCY
    return {Engine.MATRIX: Bound.COMPUTE, Engine.VECTOR: Bound.VECTOR}.get(top, Bound.DRAM)


# equal NpuArchs -> one map cost_key -> Cost: every CostCache of an equal arch (the mapping
# searches of a compile, its energy events, repeated compiles, explore's points that repeat an
# arch) shares it
_COST_MEMOS: dict[NpuArch, dict[tuple, Cost]] = {}
_COST_MEMO_ARCHS = 16  # arches whose memo is kept (the registry is emptied when full)
_COST_MEMO_ENTRIES = 1 << 18  # cost keys per arch (its memo is emptied when full)


def cost_memo(arch: NpuArch) -> dict[tuple, Cost]:
    """The instruction-cost memo (`isa.costs.cost_key(i, engine)` -> `instruction_cost(i, arch,
    engine)`) of `arch`, shared by equal arches (NpuArchs are equal iff their parameters are)."""
    return _memo_of(_COST_MEMOS, arch)


_TERM_MEMOS: dict[NpuArch, dict[int, int]] = {}


def term_memo(arch: NpuArch) -> dict[int, int]:
    """Term id -> its cycles on `arch` (`Term`), shared by equal arches as `cost_memo`."""
    return _memo_of(_TERM_MEMOS, arch)


def _memo_of(registry: dict[NpuArch, dict], arch: NpuArch) -> dict:
    """`arch`'s memo in `registry` (bounded: _COST_MEMO_ARCHS arches, _COST_MEMO_ENTRIES each)."""
    memo = registry.get(arch)
    if memo is None:
        if len(registry) >= _COST_MEMO_ARCHS:
            registry.clear()
        memo = registry[arch] = {}
    elif len(memo) >= _COST_MEMO_ENTRIES:
        memo.clear()
    return memo


# (program shape, DMA channels, off-chip latencies, term cycles) -> its timing, for
# every CostCache (bounded by CostCache.RUNS, as one cache's was)
_RUNS: dict[tuple, tuple[int, dict[Engine, int]]] = {}


class CostCache:
    """Per-instruction costs on an engine, memoised by the fields the cost reads (tiles repeat
    the same shapes at other addresses; `cost_memo`: shared by every CostCache of an equal
    arch), and the terms' cycles (`term_memo`); `tiles`: (cost scope, tile key) -> a tile's
    terms in `StepProgram`, shared by the programs of works with a `cost_scope`; and the
    timings of programs already run (a search's candidates often give the same program: a third
    of MobileNetV2's; shared by every CostCache, as the same program on arches alike in what
    the timing reads times alike)."""

    RUNS = 4096  # programs whose timing is kept (the map is emptied when full)

    def __init__(self, arch: NpuArch):
        self.arch = arch
        self._costs = cost_memo(arch)
        self._terms = term_memo(arch)
        self.lats = tuple(m.latency_cycles for m in arch.offchip)
        self.tiles: dict[tuple[Hashable, Hashable], tuple] = {}
        self._runs = _RUNS  # shared by every CostCache: the key holds what timing reads of arch

    def term_values(self, terms: Sequence[Term]) -> tuple[int, ...]:
        """The cycles of each term on this arch."""
        memo = self._terms
        out = []
        for t in terms:
            v = memo.get(t.tid)
            if v is None:
                costs, arch, engine = self._costs, self.arch, t.engine
                v = 0
                for key, ins in zip(t.keys, t.instrs, strict=True):
                    c = costs.get(key)
                    if c is None:
                        c = costs[key] = instruction_cost(ins, arch, engine)
                    v += c.cycles
                memo[t.tid] = v
            out.append(v)
        return tuple(out)

    def run(self, prog: StepProgram) -> tuple[int, dict[Engine, int]]:
        """The program's timing on this arch, memoised by the program's shape, its terms'
        cycles and the two figures the timing reads of the arch (DMA channels, off-chip
        latencies), so arches differing elsewhere share timings."""
        vals = self.term_values(prog.terms)
        channels = self.arch.dma_channels
        key = (prog.shape_id, channels, self.lats, vals)
        out = self._runs.get(key)
        if out is None:
            if len(self._runs) >= self.RUNS:
                self._runs.clear()
            out = self._runs[key] = _time(prog, vals, self.lats, channels)
        return out[0], dict(out[1])

    def cost(self, ins: Instruction, engine: Engine | None = None) -> Cost:
        """`instruction_cost(ins, self.arch, engine)`, memoised."""
        key = cost_key(ins, engine)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = instruction_cost(ins, self.arch, engine)
        return c

    def cycles(self, ins: Instruction, engine: Engine | None = None) -> int:
        return self.cost(ins, engine).cycles

