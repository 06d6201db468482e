"""The order of a fused step's tiles (ops.fused_emit).

Ordering without new tokens (the step's rings as emit/step.py builds them; the
accumulator ring is `depth` = 2 or 3 deep, a mapping choice, the input ring 2): the MATRIX
part of tile k waits for VECTOR to finish tile k - depth (accumulator ring) and DMA_IN's tile
k waits for MATRIX to finish tile k - 2 (input ring); every engine runs its tiles in order. So
a tile reading on MATRIX what VECTOR wrote is placed at least `depth` tiles after its
producer, and a tile whose VECTOR part overwrites what an earlier tile read on MATRIX after
it (`_jobs`: dependencies with distances; `_schedule`: greedy in program order, an empty tile
where nothing is ready). Stripe buffers alternate by stripe parity; the conv's input rows of a
stripe are loaded once (for all chunks) into one of two buffers, in the earliest tile two
after the last conv tile that read that buffer (`Hosts`); data that VECTOR reads from a
DMA_IN load (depthwise input of a depthwise-first chain on VECTOR, residual rows) goes to one
of 2 + depth buffers rotating by tile position (the load of tile k waits, through MATRIX
k - 2, for VECTOR to finish tile k - 2 - depth).

Groups: a pair has one group per channel chunk (its weights double-buffered, as an unfused
conv); a project chain loads all its weights once, in the first group, and its schedule is cut
into groups after each P tile (the search's sampled estimate then sees every tile kind).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tessel.ops.fused_geometry import IN_DEPTH, ChainGeometry, FusedChain, Stripe


class TileKind(enum.Enum):
    CONV = "conv"  # conv rows on MATRIX, into the line buffer (VECTOR)
    DW = "depthwise"  # depthwise conv (VECTOR or MATRIX), into the stripe buffer / output
    CONV_DW = "conv+depthwise"  # both in one tile (depthwise on VECTOR)
    P = "project"  # 1x1 project (+ residual add) of a stripe, stored
    EMPTY = "empty"  # keeps a consumer two tiles after its producer (no instructions)


class Tile(NamedTuple):  # (a tuple: the search builds many)
    kind: TileKind
    stripe: int
    chunk: int
    pos: int  # position in the step (ring slots and VIN buffers follow it)


@dataclass(frozen=True)
class TilePlan:
    """What the tile order depends on (`order` caches it: the search builds many steps)."""

    project: bool
    conv: bool
    depth: int
    dw_matrix: bool
    stripes: tuple[Stripe, ...]
    nchunks: int


def _jobs(geo: TilePlan, nchunks: int) -> tuple[list[tuple[TileKind, int, int]], list[tuple]]:
    """The tiles of `nchunks` chunks (0 .. nchunks - 1) in program order, each with its
    dependencies (job index, minimum distance in tiles): `depth` when VECTOR writes what MATRIX
    reads, 1 when VECTOR overwrites what an earlier tile read (see the module docstring).

    Jobs come in the same order in every stripe (per chunk the conv and / or depthwise jobs,
    then the stripe's project job), so a dependency's index is computed, not looked up."""
    conv, project, dw_matrix = geo.conv, geo.project, geo.dw_matrix
    d = geo.depth  # VECTOR -> MATRIX distance
    per_chunk = 2 if conv and dw_matrix else 1
    per_stripe = nchunks * per_chunk + (1 if project else 0)
    kind_last = per_chunk - 1  # a chunk's depthwise job, its last
    chunks = range(nchunks)
    conv_k, dw_k, conv_dw_k = TileKind.CONV, TileKind.DW, TileKind.CONV_DW
    jobs: list[tuple[TileKind, int, int]] = []
    deps: list[tuple] = []
    for i, st in enumerate(geo.stripes):
        base = i * per_stripe
        prev, prev2 = base - per_stripe, base - 2 * per_stripe  # stripes i - 1, i - 2
        # the stripe's project job overwrites the depthwise stripe buffer of stripe i - 2
        war_dw = ((prev2 + per_stripe - 1, 1),) if project and i >= 2 else ()
        # chunk 0's conv input rows reuse the buffer of stripe i - 2 (Hosts): its last conv job
        xin = ((prev2 + (nchunks - 1) * per_chunk, IN_DEPTH),) if conv and i >= 2 else ()
        first = len(deps)
        if conv and not dw_matrix:  # line buffer (i - 1 -> i) on VECTOR only
            jobs += [(conv_dw_k, i, q) for q in chunks]
            deps += [((prev + q, 1),) + war_dw for q in chunks] if i else [war_dw] * nchunks
        elif conv:  # a rebased line buffer overwrites rows earlier DW tiles read
            rebase = st.off == 0
            for q in chunks:
                at = base + 2 * q
                line = ((((prev + 2 * q, 1), (prev + 2 * q + 1, 1)) if rebase
                         else ((prev + 2 * q, 1),)) if i else ())
                jobs += ((conv_k, i, q), (dw_k, i, q))
                deps += (line, ((at, d),) + war_dw)
        else:
            jobs += [(dw_k, i, q) for q in chunks]
            deps += [war_dw] * nchunks
        if xin:
            deps[first] += xin
        if project:
            jobs.append((TileKind.P, i, 0))
            deps.append(tuple((base + q * per_chunk + kind_last, d) for q in chunks))
    return jobs, deps


def _schedule(deps: list[tuple], pos0: int) -> list[int]:
    """Greedy list schedule from position `pos0`: at each position the first job (program
    order, among the first 64 not placed) whose dependencies are far enough back, else an
    empty tile. Returns the job index at each position (-1: empty)."""
    n = len(deps)
    at = [-1] * n
    # a job's earliest position once all its dependencies are placed (they never move)
    earliest = [-1] * n
    left = list(range(n))
    out: list[int] = []
    pos = pos0
    window = range(64)
    while left:
        for k, job in zip(window, left, strict=False):  # (fewer than 64 left: all)
            e = earliest[job]
            if e < 0:
                e = pos0
                for dep, dist in deps[job]:
                    a = at[dep]
                    if a < 0:
                        e = -1
                        break
                    if a + dist > e:
                        e = a + dist
                if e < 0:
                    continue
                earliest[job] = e
            if pos >= e:
                del left[k]
                at[job] = pos
                out.append(job)
                break
        else:
            out.append(-1)
        pos += 1
    return out


class Groups(Sequence):
    """A step's tiles per group, built when first asked for (a candidate's sampled estimate
    and bound read the first two groups). `order`: the job index at each position of the
    schedule (-1: empty). A pair's groups (one per chunk) are each its first chunk's schedule
    moved on by the tiles before it (`pair`); a project chain's are `order` cut after each
    project tile (`starts`: each group's first position)."""

    def __init__(self, jobs: list[tuple[TileKind, int, int]], order: list[int], pair: bool,
                 starts: list[int]):
        self.jobs, self.order, self.pair, self.starts = jobs, order, pair, starts
        self._built: dict[int, list[Tile]] = {}

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, gi):
        if type(gi) is int:  # (the hot path: a tile's group, asked for per tile)
            got = self._built.get(gi)
            if got is not None:
                return got
        n = len(self.starts)
        if isinstance(gi, slice):
            return [self[k] for k in range(*gi.indices(n))]
        if not -n <= gi < n:
            raise IndexError(gi)
        gi %= n
        got = self._built.get(gi)
        if got is None:
            got = self._built[gi] = self._build(gi)
        return got

    def _build(self, gi: int) -> list[Tile]:
        jobs, order, empty, new = self.jobs, self.order, TileKind.EMPTY, tuple.__new__
        if self.pair:
            pos = gi * len(order)
            return [new(Tile, (jobs[k][0], jobs[k][1], gi, pos + r)) if k >= 0 else
                    new(Tile, (empty, 0, 0, pos + r)) for r, k in enumerate(order)]
        lo = self.starts[gi]
        hi = self.starts[gi + 1] if gi + 1 < len(self.starts) else len(order)
        return [new(Tile, (*jobs[order[p]], p)) if order[p] >= 0 else
                new(Tile, (empty, 0, 0, p)) for p in range(lo, hi)]


def _tiles(geo: TilePlan) -> Groups:
    """The tiles of each group, in program order: a pair has one group per chunk; a project
    chain one schedule cut into groups after each project tile.

    A pair's chunks have the same jobs and dependencies (all within the chunk), so every
    group's schedule is the first group's, moved on by the tiles before it."""
    jobs, order = _program(geo)
    if not geo.project:
        return Groups(jobs, order, True, list(range(geo.nchunks)))
    p_kind = TileKind.P
    starts = [0] + [pos + 1 for pos, k in enumerate(order) if k >= 0 and jobs[k][0] is p_kind]
    if starts[-1] == len(order):  # nothing after the last project tile
        starts.pop()
    return Groups(jobs, order, False, starts)


def _program(geo: TilePlan) -> tuple[list[tuple[TileKind, int, int]], list[int]]:
    """The jobs (_jobs) of a pair's first chunk or of a project chain's chunks, and their
    schedule (_schedule). Cached by what _jobs reads of the plan: whether it has a project
    and a conv, whether the depthwise tiles after a conv run on MATRIX (CONV and DW tiles:
    then each stripe's rebase is read), the depth only then and in project chains, the chunk
    count only in project chains, the stripe count."""
    conv_dw = geo.conv and geo.dw_matrix
    nchunks = geo.nchunks if geo.project else 1
    key = (geo.project, geo.conv, conv_dw, geo.depth if geo.project or conv_dw else 0, nchunks,
           tuple(s.off == 0 for s in geo.stripes) if conv_dw else len(geo.stripes))
    got = _PROGRAMS.get(key)
    if got is None:
        if len(_PROGRAMS) >= 4096:
            _PROGRAMS.clear()
        jobs, deps = _jobs(geo, nchunks)
        got = _PROGRAMS[key] = jobs, _schedule(deps, 0)
    return got


_PROGRAMS: dict[tuple, tuple[list[tuple[TileKind, int, int]], list[int]]] = {}


class Hosts:
    """Where the conv's input rows are loaded: each stripe's rows (per chunk for a pair) once,
    into one of two buffers (stripe parity), in the earliest tile at least two after the last
    conv tile that read the buffer before (DMA_IN's tile k waits for MATRIX to finish tile
    k - 2) and not after the stripe's first conv tile. `at(pos)`: the [(stripe, buffer)] a
    tile position loads; `buffer((chunk or -1, stripe))`: its buffer. A pair's are worked
    out group by group as asked (a candidate's sampled estimate and bound read the first
    two groups)."""

    def __init__(self, groups: Groups | None, geo: TilePlan):
        self.hosts: dict[int, list[tuple[int, int]]] = {}
        self.buffers: dict[tuple[int, int], int] = {}
        self._at, self._last = 0, [-2, -2]  # per buffer: the last conv tile reading it
        self._n = len(geo.stripes)
        self._done = self._groups = 0
        if groups is None:  # no conv: nothing loaded
            return
        # positions in order, so each key's first reader is its earliest and the keys come
        # in the order of their first readers
        new = [s.new > 0 for s in geo.stripes]
        conv, conv_dw = TileKind.CONV, TileKind.CONV_DW
        jobs, order = groups.jobs, groups.order
        self._first = [(r, jobs[k][1]) for r, k in enumerate(order) if k >= 0 and (
            jobs[k][0] is conv or jobs[k][0] is conv_dw) and new[jobs[k][1]]]
        self._span = len(order)
        if groups.pair:  # one conv tile per stripe and chunk, at chunk 0's positions moved on
            self._groups = len(groups)
            return
        spans: dict[int, list[int]] = {}  # (-1, stripe): every chunk's tiles read its rows
        for r, i in self._first:
            got = spans.get(i)
            if got is None:
                spans[i] = [r, r]
            else:
                got[1] = r
        self._place([((-1, i), lo, hi) for i, (lo, hi) in spans.items()])

    def _place(self, readers: list[tuple[tuple[int, int], int, int]]) -> None:
        hosts, buffers, last, n = self.hosts, self.buffers, self._last, self._n
        at = self._at
        for key, lo, hi in readers:
            # stripe parity, as the schedule's dependencies (_jobs); a pair's groups
            # (chunks) count their stripes on from the previous group's
            b = ((key[0] if key[0] > 0 else 0) * n + key[1]) % 2
            x = last[b] + IN_DEPTH
            if x > at:
                at = x
            assert at <= lo, "cascade schedule: input rows cannot be loaded in time"
            got = hosts.get(at)
            if got is None:
                hosts[at] = [(key[1], b)]
            else:
                got.append((key[1], b))
            buffers[key] = b
            last[b] = hi
        self._at = at

    def _fill(self, gi: int) -> None:
        """A pair: place the rows of every group up to `gi`."""
        while self._done <= gi and self._done < self._groups:
            j, base = self._done, self._done * self._span
            self._place([((j, i), base + r, base + r) for r, i in self._first])
            self._done += 1

    def at(self, pos: int) -> list[tuple[int, int]]:
        # a group's rows may be loaded in an earlier group's tiles, but load positions never
        # go back: once one is past `pos`, no later rows are loaded at `pos`
        while self._done < self._groups and self._at <= pos:
            self._fill(self._done)
        return self.hosts.get(pos, [])

    def buffer(self, key: tuple[int, int]) -> int:
        if self._done < self._groups:
            self._fill(key[0])
        return self.buffers.get(key, 0)

    def complete(self) -> tuple[dict[int, list[tuple[int, int]]], dict[tuple[int, int], int]]:
        """Every group's: tile position -> [(stripe, buffer)], (chunk or -1, stripe) -> buffer."""
        self._fill(self._groups - 1)
        return self.hosts, self.buffers


def order(plan: TilePlan) -> tuple[Groups, Hosts]:
    """The step's tiles per group, and where the conv's input rows are loaded (Hosts: tile
    position -> [(stripe, buffer)], (chunk or -1, stripe) -> buffer). Cached by what they
    read of the plan: of each stripe only whether it rebases its line buffer and whether it
    computes new conv rows (_jobs, Hosts), so chains of other shapes share orders."""
    key = (plan.project, plan.conv, plan.depth, plan.dw_matrix, plan.nchunks,
           tuple((s.off == 0, s.new > 0) for s in plan.stripes))
    got = _ORDERS.get(key)
    if got is None:
        if len(_ORDERS) >= 4096:
            _ORDERS.clear()
        groups = _tiles(plan)
        got = _ORDERS[key] = groups, Hosts(groups if plan.conv else None, plan)
    return got


_ORDERS: dict[tuple, tuple[Groups, Hosts]] = {}


def tile_plan(chain: FusedChain, geo: ChainGeometry) -> TilePlan:
    """What the order of the chain's tiles depends on, for one mapping's geometry."""
    return TilePlan(chain.project is not None, geo.g1 is not None, geo.depth, geo.dw_matrix,
                    tuple(geo.stripes), len(geo.chunks))
