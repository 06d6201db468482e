"""What one NPU step is made of, independent of the op: groups of tiles, each tile a few
instructions per engine, plus the buffers (rings) it needs; and the analytical estimate of a
step's cycles from the per-instruction costs of docs/isa.md (`tessel.isa.costs`).

Every op emitter (tessel.codegen.ops_*) describes its step through `StepWork`; the codegen
driver turns it into token-ordered queues, the cost model into cycles. Both use the same
instructions, so the estimate and the program cannot drift apart.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from tessel.arch import NpuArch
from tessel.isa import Engine, Instruction
from tessel.isa.costs import instruction_cost


class Bound(enum.Enum):
    """What limits a step (recorded for the report)."""

    COMPUTE = "compute"  # the matrix engine
    VECTOR = "vector"  # the vector engine
    DRAM = "dram"  # off-chip bandwidth
    LATENCY = "latency"  # fixed DMA latencies / pipeline fill of short steps


@dataclass(frozen=True)
class Slots:
    """Ring slot indices a tile's instructions should address (0 when only estimating)."""

    inp: int = 0
    acc: int = 0
    out: int = 0
    group: int = 0


@dataclass
class TileWork:
    """Instructions of one tile, per stage."""

    loads: list[Instruction] = field(default_factory=list)  # DMA_IN
    matrix: list[Instruction] = field(default_factory=list)
    vector: list[Instruction] = field(default_factory=list)
    stores: list[Instruction] = field(default_factory=list)  # DMA_OUT


@dataclass
class GroupWork:
    """A group of tiles sharing resident data loaded once (weights for MATRIX, parameters or
    tables for VECTOR), e.g. one output-channel chunk of a convolution."""

    weight_loads: list[Instruction]  # DMA_IN, consumed by MATRIX
    param_loads: list[Instruction]  # DMA_IN, consumed by VECTOR
    vector_setup: list[Instruction]  # VECTOR, once per group (e.g. LUT_LOAD)
    tile_count: int


@dataclass(frozen=True)
class StepShape:
    """Ring depths of a step (1 = no double buffering)."""

    uses_matrix: bool
    in_depth: int = 2
    acc_depth: int = 2
    out_depth: int = 2
    group_depth: int = 2


@dataclass
class StepWork:
    """Everything one step does: `group_fn(g, slot)` gives group g's resident loads when they
    go to group slot `slot`; `tile_fn(g, t, slots)` gives tile t of group g."""

    shape: StepShape
    group_count: int
    group_fn: Callable[[int, int], GroupWork]
    tile_fn: Callable[[int, int, Slots], TileWork]
    # optional: (group, tile) -> a key equal for tiles whose instructions cost the same (the
    # estimate then builds one tile per key instead of every tile)
    tile_key: Callable[[int, int], Hashable] | None = None


@dataclass(frozen=True)
class Estimate:
    cycles: int
    bound: Bound
    busy: dict[Engine, int]


TOKEN_CYCLES = 2  # the WAIT + SIGNAL an engine runs around each tile's work


def estimate_step(work: StepWork, arch: NpuArch, *, sample: int | None = None,
                  cache: CostCache | None = None) -> Estimate:
    """Cycles of a step from per-instruction costs, with the rings' overlap: a pipeline of
    DMA_IN -> [MATRIX] -> VECTOR -> DMA_OUT where each stage of tile t starts when the stage
    before it has finished tile t and its own ring has a free slot (depth). DMA transfers
    keep up to `dma_channels` in flight and share each off-chip memory's data port.

    sample: only run the first `sample` tiles of the first two groups and scale the time by
    the share of tiles run (a cheap first ranking of many candidate mappings)."""
    cost = cache if cache is not None and cache.arch is arch else CostCache(arch)
    stages = [Engine.DMA_IN] + ([Engine.MATRIX] if work.shape.uses_matrix else []) + [
        Engine.VECTOR, Engine.DMA_OUT]
    depth = {Engine.DMA_IN: work.shape.in_depth, Engine.MATRIX: work.shape.acc_depth,
             Engine.VECTOR: work.shape.out_depth, Engine.DMA_OUT: 1}
    free = {e: 0 for e in stages}
    busy = {e: 0 for e in Engine}
    finish: dict[Engine, list[int]] = {e: [] for e in stages}
    ports = [_Port() for _ in arch.offchip]
    groups = range(work.group_count) if sample is None else range(min(2, work.group_count))
    run_tiles, counts = 0, {}
    tiles: dict[Hashable, TileWork] = {}
    released: list[int] = []  # when each group's slot is free again (its last tile consumed)
    for g in groups:
        group = work.group_fn(g, 0)
        counts[g] = group.tile_count
        loads = group.weight_loads + group.param_loads
        # the program acquires the group's buffer slot first (codegen/emit.py): with
        # group_depth slots, group g waits until group g - group_depth has been consumed
        begin = free[Engine.DMA_IN]
        if loads and len(released) >= work.shape.group_depth:
            begin = max(begin, released[-work.shape.group_depth])
        end = _dma_stage(loads, begin, ports, cost) if loads else begin
        busy[Engine.DMA_IN] += end - begin
        free[Engine.DMA_IN] = end
        free[Engine.VECTOR] = max(free[Engine.VECTOR], end) + cost.sum(group.vector_setup,
                                                                       Engine.VECTOR)
        n = group.tile_count if sample is None else min(sample, group.tile_count)
        run_tiles += n
        for t in range(n):
            tile = _tile(work, g, t, tiles)
            per = {Engine.DMA_IN: tile.loads, Engine.MATRIX: tile.matrix,
                   Engine.VECTOR: tile.vector, Engine.DMA_OUT: tile.stores}
            prev_done = 0
            for i, e in enumerate(stages):
                start = max(free[e], prev_done)
                nxt = stages[i + 1] if i + 1 < len(stages) else None
                if nxt is not None and len(finish[nxt]) >= depth[e]:
                    start = max(start, finish[nxt][-depth[e]])  # wait for a free slot
                if e in (Engine.DMA_IN, Engine.DMA_OUT):
                    end = _dma_stage(per[e], start, ports, cost) if per[e] else start
                else:
                    end = start + cost.sum(per[e], e)
                end += TOKEN_CYCLES
                busy[e] += end - start
                free[e] = end
                finish[e].append(end)
                prev_done = end
        released.append(max(free[Engine.VECTOR], free.get(Engine.MATRIX, 0)))
    total = max(free.values())
    if sample is not None and run_tiles:
        # groups of a step have (nearly) the same tile count: scale by the sampled groups'
        # average rather than building every group's loads just to count its tiles
        total_tiles = sum(counts.values()) / len(counts) * work.group_count
        scale = total_tiles / run_tiles
        total = int(total * scale)
        busy = {e: int(b * scale) for e, b in busy.items()}
    return Estimate(total, _bound(busy, total, work), busy)


def _tile(work: StepWork, g: int, t: int, memo: dict[Hashable, TileWork]) -> TileWork:
    if work.tile_key is None:
        return work.tile_fn(g, t, Slots())
    key = work.tile_key(g, t)
    tile = memo.get(key)
    if tile is None:
        tile = memo[key] = work.tile_fn(g, t, Slots())
    return tile


def _dma_stage(instrs: Sequence[Instruction], start: int, ports: list[_Port],
               cost: CostCache) -> int:
    """When the last of `instrs` (one DMA engine, in order) completes, starting at `start`."""
    channels = cost.arch.dma_channels
    inflight: list[int] = []
    t, end = start, start
    for ins in instrs:
        if len(inflight) >= channels:
            inflight.sort()
            t = max(t, inflight.pop(0))
        c = cost.cycles(ins)
        lat = cost.arch.offchip[ins.mem].latency_cycles
        s = ports[ins.mem].book(t, lat, c)
        inflight.append(s + c)
        end = max(end, s + c)
        t += 1  # one transfer issued per cycle
    return end


class _Port:
    """Busy intervals (sorted, disjoint) of one memory's data port; a transfer's data phase
    takes the first gap at or after its latency phase."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def book(self, start: int, latency: int, cycles: int) -> int:
        """Earliest start >= `start` whose data phase [start+latency, start+cycles) is free."""
        data = cycles - latency
        t = start + latency
        k = bisect.bisect_right(self.ends, t)  # intervals ending at or before t are irrelevant
        while k < len(self.starts) and t + data > self.starts[k]:
            t = max(t, self.ends[k])
            k += 1
        self.starts.insert(k, t)
        self.ends.insert(k, t + data)
        return t - latency


def _bound(busy: dict[Engine, int], total: int, work: StepWork) -> Bound:
    top = max(busy, key=lambda e: busy[e])
    if busy[top] < 0.5 * total:
        return Bound.LATENCY
    return {Engine.MATRIX: Bound.COMPUTE, Engine.VECTOR: Bound.VECTOR}.get(top, Bound.DRAM)


class CostCache:
    """Per-instruction cycles on an engine, memoised (tiles repeat the same shapes)."""

    def __init__(self, arch: NpuArch):
        self.arch = arch
        self._cycles: dict[tuple[Instruction, Engine | None], int] = {}

    def cycles(self, ins: Instruction, engine: Engine | None = None) -> int:
        c = self._cycles.get((ins, engine))
        if c is None:
            c = instruction_cost(ins, self.arch, engine).cycles
            self._cycles[(ins, engine)] = c
        return c

    def sum(self, instrs: Sequence[Instruction], engine: Engine | None = None) -> int:
        return sum(self.cycles(i, engine) for i in instrs)

