"""Weight staging: constants a flash-bound step reads are copied, while earlier compute-bound
steps run, from the slow weights memory into free space of a faster activation memory, and the
flash-bound step reads them from there. docs/backend.md, "Weight staging".

Where weights live in a slow memory (u55-256: flash at 1 B/cycle, activations in system SRAM
at 8 B/cycle), a network whose early layers are compute-bound and whose late layers are
weight-bound leaves the flash idle for the first and the matrix engine idle for the second:
the on-chip SRAM is far too small to hold the late layers' weights, the activation memory is
not. A producer step passes pieces of the staged constants through one or two bounce slots
of its free SRAM (above everything it and the prefetch it issues touch, below every on-chip
resident), one piece per tile: DMA_IN loads a piece after the tile's input, DMA_OUT stores it
to the staging area after or before the tile's outputs (the copy ring, emit/step.py; the
copies are planned both ways, `RINGS`, and the faster plan kept). A piece is sized
to the tile's share of the step's idle flash time, so the step is not slowed (checked on its
estimate). The staging area is the activation memory above the arena. A consumer step's loads
of a fully staged range read the staging area instead (the same bytes, so bit-exact); a range
is staged only by steps before its consumer, in the same NPU region, and each producer's copies
end with the step (its ring drains, the step-done tokens follow its stores).

Consumers are ranked by what a staged byte saves (flash time not hidden by the step's matrix
work); everything is greedy in program order and deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tessel.arch import NpuArch
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.footprint import Space, accesses
from tessel.ops import dma
from tessel.ops.step import GroupWork, Slots, StepWork, TileWork, top_slots
from tessel.schedule.estimate import Estimate

# the two ways of planning the copies, the plan with fewer cycles kept: each a producer's copy
# rings tried (bounce slots, stored before the tile's outputs), the one saving most kept, and
# the share of a tile's idle DMA_IN time the first piece tried takes (then smaller)
RINGS = ((((2, False),), 1.5), (((1, True), (2, True)), 3.0))
ALIGN = 64  # bytes: pieces, bounce slots and staged ranges start aligned
MIN_PIECE = 512  # bytes: smaller pieces cost more in DMA latency than they move
MAX_PIECE = 32_768  # bytes: one DMA instruction (ops/dma.py)
SLOWDOWN_SHARE = 0.25  # of the cycles its pieces save their consumers a producer may lose
CONSUMER_SHARE = 0.5  # a consumer's flash time is at least this share of its cycles
PRODUCER_SHARE = 0.9  # a producer's flash time is at most this share of its cycles


@dataclass(frozen=True)
class StagingStep:
    """A step as staging leaves it: its work and estimate (unchanged if it neither copies nor
    reads staged constants), and how many constant bytes it copies / reads staged."""

    work: StepWork
    estimate: Estimate
    copied: int = 0
    staged_reads: int = 0


@dataclass(frozen=True)
class StagingPlan:
    """Every step as staging leaves it, and one past the highest byte of the staging area
    used (its low end if none)."""

    steps: list[StagingStep]
    top: int


@dataclass(frozen=True)
class _Range:
    """Constant-pool bytes [lo, hi) of the weights memory one consumer load reads."""

    lo: int
    hi: int
    consumer: int
    gain: float  # cycles a staged byte saves the consumer (estimated)


def _align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _tiles(work: StepWork) -> list[tuple[int, int]]:
    """The tiles that may carry a copy: all but the step's last and each group's last before a
    group that loads (DMA_IN issues those loads right after it: a copy would delay them)."""
    counts = [work.group_fn(g, 0).tile_count for g in range(work.group_count)]
    out = []
    for g, n in enumerate(counts):
        nxt = work.group_fn(g + 1, 0) if g + 1 < len(counts) else None
        last = n - 1 if nxt is None or nxt.weight_loads or nxt.param_loads else n
        out += [(g, t) for t in range(min(n, last))]
    return out


def _loads(work: StepWork, skip_group0: bool) -> list[Instruction]:
    """Every DMA_LOAD of the step (at its top slots: the tiles its other planners built)."""
    top = top_slots(work.shape)
    out: list[Instruction] = []
    for g in range(work.group_count):
        gr = work.group_fn(g, top.group)
        if not (skip_group0 and g == 0):
            out += gr.weight_loads + gr.param_loads
        for t in range(gr.tile_count):
            out += work.tile_fn(g, t, top).loads
    return [i for i in out if i.opcode is Opcode.DMA_LOAD]


def _first_tile_loads(work: StepWork, skip_group0: bool) -> set[Instruction]:
    """The loads the step's first tile waits for (its group's unless prefetched, its own)."""
    top = top_slots(work.shape)
    if work.group_count == 0:
        return set()
    gr = work.group_fn(0, top.group)
    out = set() if skip_group0 else set(gr.weight_loads + gr.param_loads)
    if gr.tile_count:
        out |= set(work.tile_fn(0, 0, top).loads)
    return out


def _const_range(ins: Instruction, wmem: int, end: int) -> tuple[int, int] | None:
    ext = accesses(ins)[0]
    if ext.space is Space.OFFCHIP and ext.mem == wmem and ext.hi <= end:
        return ext.lo, ext.hi
    return None


def with_copies(work: StepWork, copies: dict[tuple[int, int], list[tuple[Instruction,
                                                                          Instruction]]],
                depth: int, early: bool) -> StepWork:
    """`work` with the copies of each tile (g, t) (`TileWork.copies`) and its copy ring of
    `depth` bounce slots (stored before the tile's outputs if `early`)."""

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        tile = work.tile_fn(g, t, s)
        own = copies.get((g, t))
        if not own:
            return tile
        return TileWork(tile.loads, tile.matrix, tile.vector, tile.stores, list(own))

    def tile_key(g: int, t: int) -> tuple:
        base = work.tile_key(g, t) if work.tile_key is not None else (g, t)
        own = copies.get((g, t), ())
        return base, tuple(ld.d0 * max(ld.d1, 1) for ld, _ in own)

    return StepWork(replace(work.shape, copy_depth=depth, copy_early=early), work.group_count,
                    work.group_fn,
                    tile_fn, tile_key)


def with_staged_reads(work: StepWork, staged: dict[tuple[int, int], int], wmem: int, amem: int,
                      end: int, skip_group0: bool) -> StepWork:
    """`work` with every load of a staged constant range (staged: [lo, hi) -> its address in
    memory `amem`) reading the staging area; group 0's loads unchanged if `skip_group0` (the
    previous step issues them)."""

    def fix(instrs: list[Instruction]) -> tuple[list[Instruction], tuple[bool, ...]]:
        out, which = [], []
        for ins in instrs:
            r = _const_range(ins, wmem, end) if ins.opcode is Opcode.DMA_LOAD else None
            at = staged.get(r) if r is not None else None
            if at is not None:
                ins = ins.replace(mem=amem, ext_addr=ins.ext_addr - r[0] + at)
            out.append(ins)
            which.append(at is not None)
        return out, tuple(which)

    def group_fn(g: int, slot: int) -> GroupWork:
        gr = work.group_fn(g, slot)
        if skip_group0 and g == 0:
            return gr
        return GroupWork(fix(gr.weight_loads)[0], fix(gr.param_loads)[0], gr.vector_setup,
                         gr.tile_count)

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        tile = work.tile_fn(g, t, s)
        return TileWork(fix(tile.loads)[0], tile.matrix, tile.vector, tile.stores, tile.copies)

    top = top_slots(work.shape)

    def tile_key(g: int, t: int) -> tuple:
        base = work.tile_key(g, t) if work.tile_key is not None else (g, t)
        return base, fix(work.tile_fn(g, t, top).loads)[1]

    return StepWork(work.shape, work.group_count, group_fn, tile_fn, tile_key)


@dataclass
class _Producer:
    """What one producer step copies: pieces (src, dst, bytes) per tile, in tile order."""

    k: int
    tiles: list[tuple[int, int]]
    bounce: int  # SRAM address of bounce slot 0
    piece: int


def _copy_pair(wmem: int, amem: int, src: int, dst: int, n: int, slot_addr: int
               ) -> tuple[Instruction, Instruction]:
    (load,) = dma.contiguous(Opcode.DMA_LOAD, wmem, src, slot_addr, n)
    (store,) = dma.contiguous(Opcode.DMA_STORE, amem, dst, slot_addr, n)
    return load, store


def plan_staging(works: Sequence[StepWork], estimates: Sequence[Estimate],
                 regions: Sequence[int], prefetched: Sequence[bool],
                 prefetch: Sequence[Sequence[Instruction]], arch: NpuArch,
                 constants: tuple[int, int], staging: tuple[int, int],
                 live: Sequence[Sequence[tuple[int, int]]],
                 estimate: Callable[[int, StepWork], Estimate],
                 hull: Callable[[int], tuple[int, int] | None]) -> StagingPlan:
    """Per step, its work and estimate with weight staging (module docstring).

    works[k]: step k as emitted (moved by the prefetch planner); estimates[k]: its estimate;
    prefetched[k] / prefetch[k]: its prefetch role (schedule/prefetch.py); constants: (weights
    memory, end of the constant pool); staging: [lo, hi) of the activation memory free for
    the staging area; live[k]: SRAM ranges of every resident tensor live during step k
    (touched by it or not); estimate(k, work): step k's estimate of `work` in its prefetch
    role; hull(k): `prefetch.own_hull` of works[k] outside its resident tensors (raises
    prefetch.NotShiftable where an operand straddles one). Of the plans of RINGS, the one
    with fewer estimated cycles (the first if equal)."""
    best = None
    for rings, slack in RINGS:
        got = _plan(works, estimates, regions, prefetched, prefetch, arch, constants, staging,
                    live, estimate, hull, rings, slack)
        cycles = sum(s.estimate.cycles for s in got.steps)
        if best is None or cycles < best[0]:
            best = (cycles, got)
    return best[1]


def _plan(works, estimates, regions, prefetched, prefetch, arch, constants, staging, live,
          estimate, hull, rings: tuple[tuple[int, bool], ...], slack: float) -> StagingPlan:
    """`plan_staging` with the copy rings `rings` (bounce slots, stored early) and a first
    piece of `slack` of a tile's idle DMA_IN time."""
    from tessel.schedule.prefetch import NotShiftable

    wmem, end = constants
    amem = arch.memory_index(arch.activations_memory)
    out = [StagingStep(w, e) for w, e in zip(works, estimates, strict=True)]
    wbpc = arch.offchip[wmem].bytes_per_cycle
    if wmem == amem or arch.offchip[amem].bytes_per_cycle <= wbpc or staging[1] <= staging[0]:
        return StagingPlan(out, staging[0])
    loads = [_loads(w, p) for w, p in zip(works, prefetched, strict=True)]
    flash = [sum(r[1] - r[0] for ins in ls if (r := _const_range(ins, wmem, end)))
             / wbpc for ls in loads]
    ranges = _rank(works, estimates, prefetched, loads, flash, constants, wbpc)
    ranked = sorted(ranges.values(), key=lambda r: (-r.gain, r.consumer, r.lo))
    if not ranked:
        return StagingPlan(out, staging[0])
    done: dict[tuple[int, int], int] = {}  # staged range -> its address in the staging area
    cursor = _align_up(staging[0])
    partial: tuple[_Range, int, int] | None = None  # (range, bytes copied, its address)
    copies: dict[int, dict[tuple[int, int], list]] = {}
    slots: dict[int, tuple] = {}  # producer -> (bounce slot 0, bytes, (depth, early))
    for p, est in enumerate(estimates):
        if partial is not None and (partial[0].consumer <= p
                                    or regions[partial[0].consumer] != regions[p]):
            _drop_partial(out, works, copies, slots, partial, estimate)  # (too late for it)
            partial = None
        if flash[p] > PRODUCER_SHARE * est.cycles or not ranked:
            continue
        tiles = _tiles(works[p])
        best = None
        for depth, early in rings:
            try:
                bounce, piece = _slots(p, tiles, est, arch, live[p], prefetch[p], hull, depth,
                                       slack)
            except NotShiftable:
                break
            got = _produce(p, works[p], est, tiles, bounce, piece, (depth, early), ranked,
                           partial, cursor, staging[1], regions, wmem, amem, estimate)
            if got is not None and (best is None or got[0] > best[0]):
                best = got
        if best is None:
            continue
        _, staged_work, got_est, per_tile, slot, (partial, cursor, finished) = best
        copies[p] = per_tile
        slots[p] = slot
        out[p] = StagingStep(staged_work, got_est, sum(
            ld.d0 * max(ld.d1, 1) for c in per_tile.values() for ld, _ in c))
        for r, at in finished:
            done[(r.lo, r.hi)] = at
        ranked = [r for r in ranked if (r.lo, r.hi) not in done
                  and (partial is None or r is not partial[0])]
    if partial is not None:  # a range left half-copied: drop the copies of it
        _drop_partial(out, works, copies, slots, partial, estimate)
    by_consumer: dict[int, dict[tuple[int, int], int]] = {}
    for (lo, hi), at in done.items():
        by_consumer.setdefault(ranges[(lo, hi)].consumer, {})[(lo, hi)] = at
    for k, staged in sorted(by_consumer.items()):
        w = with_staged_reads(out[k].work, staged, wmem, amem, end, prefetched[k])
        got = estimate(k, w)
        if got.cycles < out[k].estimate.cycles:  # (else its copies are wasted, not harmful)
            out[k] = StagingStep(w, got, out[k].copied, sum(hi - lo for lo, hi in staged))
    top = max([staging[0]] + [at + hi - lo for (lo, hi), at in done.items()])
    return StagingPlan(out, top)


def _produce(p: int, work: StepWork, est: Estimate, tiles: list[tuple[int, int]], bounce: int,
             piece: int, ring: tuple[int, bool], ranked: list[_Range], partial, cursor: int,
             limit: int,
             regions: Sequence[int], wmem: int, amem: int,
             estimate: Callable[[int, StepWork], Estimate]):
    """Producer `p`'s copies through `ring` (bounce slots, stored early): the largest piece, from
    `piece` down, whose slowdown of the step is at most SLOWDOWN_SHARE of what its pieces save
    their consumers. None if none; else (the cycles saved net of the slowdown, its work, its
    estimate, the copies per tile, (bounce slot 0, piece, ring), (the range left half-copied,
    the staging cursor, the ranges finished with their addresses))."""
    depth = ring[0]
    while piece >= MIN_PIECE:
        plan = _assign(p, tiles, piece, ranked, partial, cursor, limit, regions, wmem, amem,
                       bounce, depth)
        if plan is None:
            return None
        per_tile, new_partial, new_cursor, finished, gain = plan
        staged_work = with_copies(work, per_tile, *ring)
        got = estimate(p, staged_work)
        slow = got.cycles - est.cycles
        if slow <= SLOWDOWN_SHARE * gain:
            return (gain - slow, staged_work, got, per_tile, (bounce, piece, ring),
                    (new_partial, new_cursor, finished))
        piece = piece * 3 // 4 // ALIGN * ALIGN
    return None


def _rank(works: Sequence[StepWork], estimates: Sequence[Estimate],
          prefetched: Sequence[bool], loads: Sequence[list[Instruction]],
          flash: Sequence[float], constants: tuple[int, int], wbpc: int
          ) -> dict[tuple[int, int], _Range]:
    """The constant ranges of the consumers (steps whose flash time is at least
    CONSUMER_SHARE of their cycles) with what a staged byte of each saves."""
    wmem, end = constants
    ranges: dict[tuple[int, int], _Range] = {}
    for k, (est, ls) in enumerate(zip(estimates, loads, strict=True)):
        if not ls or flash[k] < CONSUMER_SHARE * est.cycles:
            continue
        compute = max(est.busy.get(Engine.MATRIX, 0), est.busy.get(Engine.VECTOR, 0))
        gain = max(0.0, 1.0 - compute / flash[k])
        first = _first_tile_loads(works[k], prefetched[k])
        for ins in ls:
            r = _const_range(ins, wmem, end)
            if r is not None and r not in ranges and r[1] - r[0] >= MIN_PIECE:
                # the step's first loads overlap nothing: each of their bytes saves a cycle
                ranges[r] = _Range(r[0], r[1], k, (1.0 if ins in first else gain) / wbpc)
    return ranges


def _slots(p: int, tiles: list[tuple[int, int]], est: Estimate, arch: NpuArch,
           live: Sequence[tuple[int, int]], prefetch: Sequence[Instruction],
           hull: Callable[[int], tuple[int, int] | None], depth: int, slack_share: float
           ) -> tuple[int, int]:
    """(bounce slot 0's address, the first piece size to try) of producer `p`: `depth` slots in
    the largest SRAM gap outside its hull, the prefetch it issues and the live residents; the
    piece `slack_share` of a tile's share of DMA_IN's idle time (a copy's load holds back
    DMA_IN's next SIGNAL, which waits for its transfers), within a slot. Piece 0 where it has
    fewer than two tiles to carry copies."""
    if len(tiles) < 2:
        return 0, 0
    own = hull(p)
    busy = [*live, *([own] if own is not None else [])]
    for ins in prefetch:
        busy += [(a.lo, a.hi) for a in accesses(ins) if a.space is Space.SRAM]
    bounce, room = _bounce(0, arch.onchip.sram_bytes, busy, depth)
    slack = (est.cycles - est.busy.get(Engine.DMA_IN, 0)) / len(tiles) * slack_share
    wbpc = arch.offchip[arch.memory_index(arch.weights_memory)].bytes_per_cycle
    return bounce, min(room, MAX_PIECE, int(slack * wbpc) // ALIGN * ALIGN)


def _bounce(lo: int, hi: int, busy: Sequence[tuple[int, int]], depth: int
            ) -> tuple[int, int]:
    """(address, bytes per slot) of the largest `depth` bounce slots in SRAM [lo, hi) outside
    the `busy` ranges."""
    best = (lo, 0)
    a = lo
    for b0, b1 in sorted(busy) + [(hi, hi)]:
        if b0 > a:
            room = (min(b0, hi) - a) // depth // ALIGN * ALIGN
            if room > best[1]:
                best = (a, room)
        a = max(a, _align_up(b1))
    return best


def _assign(p: int, tiles: list[tuple[int, int]], piece: int, ranked: list[_Range],
            partial: tuple[_Range, int, int] | None, cursor: int, limit: int,
            regions: Sequence[int], wmem: int, amem: int, bounce: int, depth: int):
    """Pieces of at most `piece` bytes for producer `p`'s tiles, one per tile, continuing the
    half-copied range first, then the ranked ranges of later consumers in p's region that fit
    the staging area. None if it copies nothing; else (copies per tile, the range left
    half-copied, the staging cursor, the ranges finished with their addresses, the cycles its
    pieces save their consumers)."""
    queue = [r for r in ranked if r.consumer > p and regions[r.consumer] == regions[p]]
    cur = partial
    gain = 0.0
    finished: list[tuple[_Range, int]] = []
    per_tile: dict[tuple[int, int], list] = {}
    n = 0
    for tile in tiles:
        if cur is None:
            while queue and cursor + (queue[0].hi - queue[0].lo) > limit:
                queue.pop(0)
            if not queue:
                break
            r = queue.pop(0)
            cur = (r, 0, cursor)
            cursor = _align_up(cursor + r.hi - r.lo)
        r, copied, at = cur
        size = min(piece, r.hi - r.lo - copied)
        per_tile[tile] = [_copy_pair(wmem, amem, r.lo + copied, at + copied, size,
                                     bounce + (n % depth) * piece)]
        n += 1
        gain += size * r.gain
        copied += size
        if copied == r.hi - r.lo:
            finished.append((r, at))
            cur = None
        else:
            cur = (r, copied, at)
    if not per_tile:
        return None
    return per_tile, cur, cursor, finished, gain


def _drop_partial(out: list[StagingStep], works: Sequence[StepWork],
                  copies: dict[int, dict[tuple[int, int], list]],
                  slots: dict[int, tuple[int, int]], partial: tuple[_Range, int, int],
                  estimate: Callable[[int, StepWork], Estimate]) -> None:
    """Remove the copies of the range left half-copied (they would only cost flash time); the
    copies kept take the bounce slots in turn again (the ring's order)."""
    r, _, at = partial
    lo, hi = at, at + (r.hi - r.lo)
    for p, per_tile in copies.items():
        if not any(lo <= st.ext_addr < hi for pairs in per_tile.values() for _, st in pairs):
            continue
        bounce, piece, ring = slots[p]
        depth = ring[0]
        kept: dict[tuple[int, int], list] = {}
        n = 0
        for tile, pairs in per_tile.items():
            own = []
            for ld, st in pairs:
                if lo <= st.ext_addr < hi:
                    continue
                addr = bounce + (n % depth) * piece
                own.append((ld.replace(sram_addr=addr), st.replace(sram_addr=addr)))
                n += 1
            if own:
                kept[tile] = own
        copies[p] = kept
        work = with_copies(works[p], kept, *ring) if kept else works[p]
        copied = sum(ld.d0 * max(ld.d1, 1) for c in kept.values() for ld, _ in c)
        out[p] = StagingStep(work, estimate(p, work), copied)
