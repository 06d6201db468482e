"""Cross-layer fusion (cascading): a chain of consecutive layers around a depthwise conv (or a
max pool, or a second conv) runs as one step in row stripes of that windowed layer's output,
so the chain's intermediate tensors never leave SRAM. Chains (tessel.schedule.fusion), all batch 1, int8, each
intermediate read only by the next member (not a graph output):

* conv -> depthwise: an ordinary conv (MobileNetV2's 1x1 expand, or a stem 3x3) and the
  depthwise conv reading it ("pair");
* conv -> depthwise -> 1x1 project [-> qadd]: a MobileNetV2 inverted residual as one step, the
  residual add (its other operand any DRAM tensor of the output's shape) as an epilogue;
* depthwise -> 1x1 project [-> qadd] (blocks without an expand);
* conv -> int8 max pool (ResNet's stem): a pair whose windowed member is the pool (`pooled`):
  its POOL runs on VECTOR over the line buffer's window into the output slot (no weights, no
  requantisation, no depthwise accumulators); the pool's geometry as a depthwise conv's;
* conv -> ordinary conv of kernel height > 1 (`halo_conv`): one chunk of all the first conv's
  channels in the line buffer; the second conv's CONV (all channels) runs on MATRIX over
  each stripe's window (a DW tile on MATRIX), requantised and stored.

Tiles, per stripe of depthwise output rows and channel chunk:

* CONV: DMA_IN loads the conv's input rows for the depthwise input rows no earlier stripe
  computed; MATRIX runs the conv on them; VECTOR requantises them into the chunk's line
  buffer. The line buffer fills downwards and carries the depthwise halo from stripe to
  stripe (no row is computed twice); when a window would pass its end, the rows still needed
  move to its top (one COPY) and it fills again ("rebase");
* DW: DWCONV over the window (on MATRIX, the array's depthwise mode, or on VECTOR: a mapping
  choice) and its requantisation, into the output slot (pair, stored) or into a stripe buffer
  of all channels (project chains). With the depthwise conv on VECTOR, CONV and DW are one
  tile (CONV_DW). A depthwise-first chain loads the depthwise window from DRAM;
* P (project chains, per stripe): MATRIX runs the 1x1 CONV over the stripe buffer, VECTOR
  requantises (and runs the qadd's ELTWISE with the residual rows DMA_IN loaded), DMA_OUT
  stores the stripe.

Each layer keeps the instructions of its own qconv2d / qadd, so the result is bit-identical.

Ordering without new tokens (the step's rings as emit/step.py builds them; the
accumulator ring is `depth` = 2 or 3 deep, a mapping choice, the input ring 2): the MATRIX
part of tile k waits for VECTOR to finish tile k - depth (accumulator ring) and DMA_IN's tile
k waits for MATRIX to finish tile k - 2 (input ring); every engine runs its tiles in order. So
a tile reading on MATRIX what VECTOR wrote is placed at least `depth` tiles after its
producer, and a tile whose VECTOR part overwrites what an earlier tile read on MATRIX after
it (`_jobs`: dependencies with distances; `_schedule`: greedy in program order, an empty tile
where nothing is ready). Stripe buffers alternate by stripe parity; the conv's input rows of a
stripe are loaded once (for all chunks) into one of two buffers, in the earliest tile two
after the last conv tile that read that buffer (`_hosts`); data that VECTOR reads from a
DMA_IN load (depthwise input of a depthwise-first chain on VECTOR, residual rows) goes to one
of 2 + depth buffers rotating by tile position (the load of tile k waits, through MATRIX
k - 2, for VECTOR to finish tile k - 2 - depth).

Groups: a pair has one group per channel chunk (its weights double-buffered, as an unfused
conv); a project chain loads all its weights once, in the first group, and its schedule is cut
into groups after each P tile (the search's sampled estimate then sees every tile kind).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tessel.errors import TesselCompileError
from tessel.ir import DType, Node, Op
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.fields import AccMode, AccSrc, EltOp, ParamMode, PoolOp
from tessel.ops import conv_geometry, conv_weights, dma, eltwise_emit, pool_emit
from tessel.ops.context import (
    ALIGN,
    ISA_DTYPE,
    CodegenContext,
    PlacedConstants,
    SramPlan,
    StepConstants,
    align,
    const_addresses,
)
from tessel.ops.quantise import rounding_of
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

DEPTHS = (2, 3)  # accumulator ring depths the search tries
IN_DEPTH = 2  # the input ring: DMA_IN's tile k waits for MATRIX to finish tile k - 2


@dataclass(frozen=True)
class FusedChain:
    """Consecutive ops compiled as one step; every member's result but the last stays on chip.
    `conv`: the ordinary conv before the depthwise conv (None: the chain starts with it);
    `dw`: the depthwise conv, or the max pool of a conv -> max pool chain (`pooled`);
    `project`: the 1x1 conv after it; `add`: the residual qadd after the project."""

    conv: Node | None
    dw: Node
    project: Node | None = None
    add: Node | None = None

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in (self.conv, self.dw, self.project, self.add) if n is not None)

    @property
    def first(self) -> Node:
        return self.nodes[0]

    @property
    def last(self) -> Node:
        return self.nodes[-1]

    @property
    def name(self) -> str:
        return "+".join(n.name for n in self.nodes)

    @property
    def pooled(self) -> bool:
        """The windowed member is a max pool (conv -> max pool), not a depthwise conv."""
        return self.dw.op is Op.MAX_POOL2D

    @property
    def halo_conv(self) -> bool:
        """The windowed member is an ordinary conv (conv -> conv with halo rows)."""
        return self.dw.op is Op.QCONV2D and self.dw.attr_map["groups"] == 1

    @property
    def residual(self) -> str | None:
        """The add's operand that is not the project's result."""
        if self.add is None:
            return None
        return next(i for i in self.add.inputs if i != self.project.name)


@dataclass(frozen=True)
class FusedMapping:
    rows: int  # depthwise output rows per stripe
    chunk: int  # depthwise channels per chunk
    dw_engine: Engine = Engine.VECTOR  # where DWCONV runs
    line: int = 4  # line buffer: one window plus this many stripes of new rows
    depth: int = 2  # accumulator ring slots: MATRIX's tile k waits for VECTOR's tile k - depth

    def __str__(self) -> str:
        dw = " dw=matrix" if self.dw_engine is Engine.MATRIX else ""
        return (f"cascade stripes rows={self.rows} ch_chunk={self.chunk} line=+{self.line}"
                + ("" if self.depth == 2 else f" acc_depth={self.depth}") + dw)


# ------------------------------------------------------------------------ the step


@dataclass(frozen=True)
class _Stripe:
    oy0: int  # first depthwise output row
    rows: int
    r0: int  # depthwise input rows [r0, r0 + n) this stripe reads, tile pad_top
    n: int
    pad_top: int
    keep: int  # rows [r0, r0 + keep) were computed by earlier stripes
    new0: int  # conv output rows [new0, new0 + new) computed by this stripe
    new: int
    off: int  # line-buffer row of input row r0
    moved: int  # >= 0: the line buffer is rebased here; the kept rows come from this row


@functools.lru_cache(maxsize=4096)
def _stripes(g2, rows: int, cap: int | None) -> tuple[_Stripe, ...]:
    """Stripes of depthwise output rows; `cap`: line-buffer rows (None: no line buffer, each
    stripe reads its whole window). The line buffer fills downwards; when a window would pass
    its end, the rows still needed move to the top (one COPY) and it fills again."""
    out: list[_Stripe] = []
    prev = None  # (r0, r1) of the previous stripe
    base = 0  # input row at line-buffer row 0
    for oy0 in range(0, g2.oh, rows):
        rn = min(rows, g2.oh - oy0)
        r0, n, pt = g2.in_rows(oy0, rn)
        r1 = r0 + n - 1
        keep, new0, moved = 0, r0, -1
        if cap is not None and prev is not None and r0 <= prev[1]:
            keep, new0 = prev[1] - r0 + 1, prev[1] + 1
        if cap is not None and (prev is None or r1 - base + 1 > cap):
            if keep:
                moved = r0 - base
            base = r0
        out.append(_Stripe(oy0, rn, r0, n, pt, keep, new0, r1 - new0 + 1, r0 - base, moved))
        prev = (r0, r1)
    return tuple(out)


class _Lines(NamedTuple):
    """A mapping's stripes, their conv windows and the maxima _layout reads (`_line_stripes`)."""

    cap: int | None  # line-buffer rows (None: no conv, no line buffer)
    stripes: tuple[_Stripe, ...]
    windows: dict[int, tuple[int, int, int]]  # id(stripe) -> the conv's input rows of its new rows
    n_max: int  # the largest window a stripe reads
    new_max: int  # the most new conv rows a stripe computes
    x_max: int  # the most conv input rows a stripe computing new rows reads (1: none, no conv)


@functools.lru_cache(maxsize=4096)
def _line_stripes(g1, g2, rows: int, line: int) -> _Lines:
    """The stripes of a mapping: with a conv (`g1`), the line buffer holds the largest window a
    stripe reads (a stripe's `n` does not depend on the line buffer) plus `line` stripes of
    new rows."""
    n_max = max(s.n for s in _stripes(g2, rows, None))
    cap = min(g2.h, n_max + line * rows * g2.sh) if g1 is not None else None
    stripes = _stripes(g2, rows, cap)
    windows: dict[int, tuple[int, int, int]] = {}
    x_max = 1
    if g1 is not None:
        windows = {id(s): g1.in_rows(s.new0, s.new) for s in stripes}
        x_max = max((windows[id(s)][1] for s in stripes if s.new), default=1)
    return _Lines(cap, stripes, windows, n_max, max(s.new for s in stripes), x_max)


class TileKind(enum.Enum):
    CONV = "conv"  # conv rows on MATRIX, into the line buffer (VECTOR)
    DW = "depthwise"  # depthwise conv (VECTOR or MATRIX), into the stripe buffer / output
    CONV_DW = "conv+depthwise"  # both in one tile (depthwise on VECTOR)
    P = "project"  # 1x1 project (+ residual add) of a stripe, stored
    EMPTY = "empty"  # keeps a consumer two tiles after its producer (no instructions)


class _Tile(NamedTuple):  # (a tuple: the search builds many)
    kind: TileKind
    stripe: int
    chunk: int
    pos: int  # position in the step (ring slots and VIN buffers follow it)


@dataclass(frozen=True)
class _Layout:
    w1: tuple[int, ...]  # per chunk (project chains) or per group slot (pairs)
    w2: tuple[int, ...]
    w3: int
    inp: int
    inp_stride: int
    xin: int  # the conv's input rows of a stripe, two buffers (stripe parity)
    xin_stride: int
    vin: int
    vin_stride: int
    line: tuple[int, ...]  # per chunk
    dwbuf: int
    dwbuf_stride: int
    tmp: int
    out: int
    out_stride: int
    acc: int
    acc_stride: int
    acc2: int


class ChainGeometry:
    """Geometries of the chain's convs and its stripes / chunks for one mapping."""

    def __init__(self, chain: FusedChain, m: FusedMapping, ctx: CodegenContext,
                 geoms: tuple | None = None):
        self.g1, self.g2, self.g3 = geoms if geoms is not None else geometries(chain, ctx)
        self.lines = _line_stripes(self.g1, self.g2, m.rows, m.line)
        self.cap, self.stripes = self.lines.cap, self.lines.stripes
        c = self.g2.c  # the windowed member's input channels (the line buffer's)
        self.chunks = [(c0, min(m.chunk, c - c0)) for c0 in range(0, c, m.chunk)]
        self.dw_matrix = m.dw_engine is Engine.MATRIX
        self.depth = m.depth
        # buffers for data VECTOR reads from a load: the load of tile k waits, through MATRIX
        # k - IN_DEPTH, for VECTOR to finish tile k - IN_DEPTH - depth
        self.vin_slots = IN_DEPTH + m.depth

    def conv_window(self, s: _Stripe) -> tuple[int, int, int]:
        """The conv's input rows for the stripe's new rows (one of `self.stripes`)."""
        return self.lines.windows[id(s)]

    def plan(self, chain: FusedChain) -> _Plan:
        return _Plan(chain.project is not None, self.g1 is not None, self.depth,
                     self.dw_matrix, tuple(self.stripes), len(self.chunks))


def geometries(chain: FusedChain, ctx: CodegenContext) -> tuple:
    """(conv, depthwise, project) geometries of the chain (None where a member is absent)."""
    # dense weights: the chain's CONVs read dense HWIO blocks
    return (conv_geometry.geometry(chain.conv, ctx, False) if chain.conv is not None else None,
            _pool_geometry(chain.dw, ctx) if chain.pooled
            else conv_geometry.geometry(chain.dw, ctx, False),
            conv_geometry.geometry(chain.project, ctx, False) if chain.project is not None else None)


def _pool_geometry(node: Node, ctx: CodegenContext) -> conv_geometry.ConvGeometry:
    """A max pool's window as a depthwise conv's geometry (no weights)."""
    p = pool_emit.pool_geometry(node, ctx)
    return conv_geometry.ConvGeometry(**p.window_attrs(), h=p.h, w=p.w, c=p.c, cout=p.c,
                                  groups=p.c, n=p.n)


def order(plan: _Plan) -> tuple[_Groups, _Hosts]:
    """The step's tiles per group, and where the conv's input rows are loaded (_Hosts: tile
    position -> [(stripe, buffer)], (chunk or -1, stripe) -> buffer). Cached by what they
    read of the plan: of each stripe only whether it rebases its line buffer and whether it
    computes new conv rows (_jobs, _Hosts), so chains of other shapes share orders."""
    key = (plan.project, plan.conv, plan.depth, plan.dw_matrix, plan.nchunks,
           tuple((s.off == 0, s.new > 0) for s in plan.stripes))
    got = _ORDERS.get(key)
    if got is None:
        if len(_ORDERS) >= 4096:
            _ORDERS.clear()
        groups = _tiles(plan)
        got = _ORDERS[key] = groups, _Hosts(groups if plan.conv else None, plan)
    return got


_ORDERS: dict[tuple, tuple[_Groups, _Hosts]] = {}


def candidates(chain: FusedChain, ctx: CodegenContext) -> list[FusedMapping]:
    geoms = geometries(chain, ctx)
    g2 = geoms[1]
    cols = ctx.arch.matrix.cols
    acc_entries = ctx.arch.onchip.acc_bytes // 4
    out = []
    # a max pool runs on VECTOR only, a second conv on MATRIX over all its input channels
    engines = ((Engine.VECTOR,) if chain.pooled else (Engine.MATRIX,) if chain.halo_conv
               else (Engine.MATRIX, Engine.VECTOR))
    for engine in engines:
        width = cols if engine is Engine.MATRIX else ctx.arch.vector.lanes
        chunks = sorted({min(g2.cout, k * width) for k in (1, 2, 4, 8, 16)} | {g2.cout})
        for chunk in [g2.c] if chain.halo_conv else chunks:
            for rows in sorted({min(g2.oh, r) for r in (1, 2, 4, 8, 16, 32)}):
                for depth in DEPTHS:
                    if _acc_floor(geoms, rows, chunk, engine, depth,
                                  chain.pooled, chain.halo_conv) > acc_entries:
                        continue  # _layout would refuse it at every line length
                    for line in (4, 1, 0):  # shorter line buffers where longer do not fit
                        m = FusedMapping(rows, chunk, engine, line, depth)
                        try:
                            _layout(chain, ChainGeometry(chain, m, ctx, geoms), m, ctx)
                        except TesselCompileError:
                            continue
                        out.append(m)
                        break
    return out


def _acc_floor(geoms: tuple, rows: int, chunk: int, engine: Engine, depth: int,
               pooled: bool = False, halo_conv: bool = False) -> int:
    """At most the accumulator entries _layout allocates for such a mapping at any line
    length (its first stripe computes every conv row it reads: keep = 0), so a mapping above
    the accumulator's capacity is skipped without building its stripes."""
    g1, g2, g3 = geoms
    rows = min(rows, g2.oh)
    entries = 1
    if g1 is not None:
        entries = max(entries, g2.in_rows(0, rows)[1] * g2.w * chunk)
    if engine is Engine.MATRIX:
        entries = max(entries, rows * g2.ow * (g2.cout if halo_conv else chunk))
    if g3 is not None:
        entries = max(entries, rows * g3.ow * g3.cout)
    return depth * entries + (0 if engine is Engine.MATRIX or pooled
                              else rows * g2.ow * chunk)


def _layout(chain: FusedChain, geo: ChainGeometry, m: FusedMapping, ctx: CodegenContext) -> _Layout:
    g1, g2, g3 = geo.g1, geo.g2, geo.g3
    plan = SramPlan(ctx.arch, chain.name)
    chain_mode = g3 is not None
    ch = m.chunk
    wb1 = align(g1.weight_bytes(ch) + 12 * ch) if g1 is not None else 0
    wout = g2.cout if chain.halo_conv else ch  # the windowed member's output channels
    wb2 = 0 if chain.pooled else align(g2.weight_bytes(wout) + 12 * wout)
    if chain_mode:  # every chunk's weights, loaded once
        w1 = _per_chunk(plan, geo.chunks, lambda cn: align(g1.weight_bytes(cn) + 12 * cn),
                        "conv weights") if g1 is not None else ()
        w2 = _per_chunk(plan, geo.chunks, lambda cn: align(g2.weight_bytes(cn) + 12 * cn),
                        "depthwise weights")
        w3 = plan.sram(align(g3.weight_bytes(g3.cout) + 12 * g3.cout), "project weights")
    else:  # one chunk's, double-buffered (conv -> conv: one chunk, one group, one buffer)
        slots = 1 if chain.halo_conv else 2
        w1 = ()
        if g1 is not None:
            base1 = plan.sram(slots * wb1, "conv weights")
            w1 = (base1, base1 + wb1 * (slots - 1))
        base = plan.sram(slots * wb2, "depthwise weights") if wb2 else 0
        w2, w3 = (base, base + wb2 * (slots - 1)), 0
    nmax = geo.lines.n_max
    ibytes = xbytes = 0
    if g1 is not None:
        xbytes = align(geo.lines.x_max * g1.w * _pixel(g1))
    elif geo.dw_matrix:  # the depthwise input window, read by MATRIX
        ibytes = align(nmax * g2.w * ch)
    inp = plan.sram(2 * ibytes, "input rows") if ibytes else 0
    xin = plan.sram(2 * xbytes, "conv input rows") if xbytes else 0
    vbytes = 0
    if g1 is None and not geo.dw_matrix:  # the depthwise input window, read by VECTOR
        vbytes = align(nmax * g2.w * ch)
    if chain.add is not None:
        vbytes = max(vbytes, align(m.rows * g3.ow * g3.cout))
    vin = plan.sram(geo.vin_slots * vbytes, "vector input rows") if vbytes else 0
    line: tuple[int, ...] = ()
    if g1 is not None:
        lbytes = align(geo.cap * g2.w * ch)
        line = _per_chunk(plan, geo.chunks, lambda cn: lbytes, "line buffer")
    dbytes = align(m.rows * g2.ow * g2.cout) if chain_mode else 0
    dwbuf = plan.sram(2 * dbytes, "depthwise stripe") if chain_mode else 0
    tmp = plan.sram(align(m.rows * g3.ow * g3.cout), "project stripe") if (
        chain.add is not None) else 0
    obytes = align(m.rows * g2.ow * (g3.cout if chain_mode else wout))
    out = plan.sram(2 * obytes, "output stripe")
    entries = 1
    if g1 is not None:
        entries = max(entries, geo.lines.new_max * g2.w * ch)
    if geo.dw_matrix:
        entries = max(entries, m.rows * g2.ow * wout)
    if chain_mode:
        entries = max(entries, m.rows * g3.ow * g3.cout)
    acc = plan.acc(m.depth * entries, "accumulators")
    acc2 = 0 if geo.dw_matrix or chain.pooled else plan.acc(m.rows * g2.ow * ch,
                                                             "depthwise accumulators")
    return _Layout(w1, w2, w3, inp, ibytes, xin, xbytes, vin, vbytes, line, dwbuf, dbytes, tmp, out,
                   obytes, acc, entries, acc2)


def _per_chunk(plan: SramPlan, chunks: list[tuple[int, int]], nbytes: Callable[[int], int],
               name: str) -> tuple[int, ...]:
    """plan.sram(nbytes(cn), name) for each chunk (c0, cn) in turn: one allocation per run of
    chunks of one width (sizes aligned, so the regions are back to back at the same addresses);
    where one does not fit, the per-chunk allocations again, for the same error."""
    out: list[int] = []
    k = 0
    while k < len(chunks):
        cn = chunks[k][1]
        j = k + 1
        while j < len(chunks) and chunks[j][1] == cn:
            j += 1
        size, used = nbytes(cn), plan.sram_used
        try:
            base = plan.sram((j - k) * size, name)
        except TesselCompileError:
            plan.sram_used = used
            for _ in range(k, j):
                plan.sram(size, name)
            raise
        out += [base + r * size for r in range(j - k)]
        k = j
    return tuple(out)


@dataclass(frozen=True)
class _Plan:
    """What the tile order depends on (`order` caches it: the search builds many steps)."""

    project: bool
    conv: bool
    depth: int
    dw_matrix: bool
    stripes: tuple[_Stripe, ...]
    nchunks: int


def _jobs(geo: _Plan, nchunks: int) -> tuple[list[tuple[TileKind, int, int]], list[tuple]]:
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
        # chunk 0's conv input rows reuse the buffer of stripe i - 2 (_hosts): its last conv job
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


class _Groups(Sequence):
    """A step's tiles per group, built when first asked for (a candidate's sampled estimate
    and bound read the first two groups). `order`: the job index at each position of the
    schedule (-1: empty). A pair's groups (one per chunk) are each its first chunk's schedule
    moved on by the tiles before it (`pair`); a project chain's are `order` cut after each
    project tile (`starts`: each group's first position)."""

    def __init__(self, jobs: list[tuple[TileKind, int, int]], order: list[int], pair: bool,
                 starts: list[int]):
        self.jobs, self.order, self.pair, self.starts = jobs, order, pair, starts
        self._built: dict[int, list[_Tile]] = {}

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

    def _build(self, gi: int) -> list[_Tile]:
        jobs, order, empty, new = self.jobs, self.order, TileKind.EMPTY, tuple.__new__
        if self.pair:
            pos = gi * len(order)
            return [new(_Tile, (jobs[k][0], jobs[k][1], gi, pos + r)) if k >= 0 else
                    new(_Tile, (empty, 0, 0, pos + r)) for r, k in enumerate(order)]
        lo = self.starts[gi]
        hi = self.starts[gi + 1] if gi + 1 < len(self.starts) else len(order)
        return [new(_Tile, (*jobs[order[p]], p)) if order[p] >= 0 else
                new(_Tile, (empty, 0, 0, p)) for p in range(lo, hi)]


def _tiles(geo: _Plan) -> _Groups:
    """The tiles of each group, in program order: a pair has one group per chunk; a project
    chain one schedule cut into groups after each project tile.

    A pair's chunks have the same jobs and dependencies (all within the chunk), so every
    group's schedule is the first group's, moved on by the tiles before it."""
    jobs, order = _program(geo)
    if not geo.project:
        return _Groups(jobs, order, True, list(range(geo.nchunks)))
    p_kind = TileKind.P
    starts = [0] + [pos + 1 for pos, k in enumerate(order) if k >= 0 and jobs[k][0] is p_kind]
    if starts[-1] == len(order):  # nothing after the last project tile
        starts.pop()
    return _Groups(jobs, order, False, starts)


def _program(geo: _Plan) -> tuple[list[tuple[TileKind, int, int]], list[int]]:
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


def _pixel(g1) -> int:
    """SRAM bytes per pixel of the conv's input rows: padded, so that the load is not a plain
    translation of DRAM (the residency rewrite would drop it and re-base only its own tile,
    but the rows are read by the conv tiles of every chunk)."""
    return g1.c + ALIGN


class _Hosts:
    """Where the conv's input rows are loaded: each stripe's rows (per chunk for a pair) once,
    into one of two buffers (stripe parity), in the earliest tile at least two after the last
    conv tile that read the buffer before (DMA_IN's tile k waits for MATRIX to finish tile
    k - 2) and not after the stripe's first conv tile. `at(pos)`: the [(stripe, buffer)] a
    tile position loads; `buffer((chunk or -1, stripe))`: its buffer. A pair's are worked
    out group by group as asked (a candidate's sampled estimate and bound read the first
    two groups)."""

    def __init__(self, groups: _Groups | None, geo: _Plan):
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


def _const_chunks(chain: FusedChain, geo: ChainGeometry) -> tuple[list, list, list]:
    """Channel chunks of the conv's, the windowed member's and the project's constant blobs
    (a max pool has none; a halo conv and the project are one chunk)."""
    g2, g3 = geo.g2, geo.g3
    return (geo.chunks if geo.g1 is not None else [],
            [] if chain.pooled else [(0, g2.cout)] if chain.halo_conv else geo.chunks,
            [(0, g3.cout)] if g3 is not None else [])


def constants(chain: FusedChain, m: FusedMapping, ctx: CodegenContext) -> StepConstants:
    """The step's constant blobs in read order: the conv's chunks, the windowed member's
    chunks, the project's (each a chunk's pre-tiled weights and parameters, conv_weights)."""
    geo = ChainGeometry(chain, m, ctx)
    members = (chain.conv, chain.dw, chain.project)
    blobs = [b for node, g, chunks in zip(members, (geo.g1, geo.g2, geo.g3),
                                          _const_chunks(chain, geo), strict=True)
             if chunks for b in conv_weights.blobs(node, g, chunks, ctx)]
    return StepConstants(tuple(blobs))


def step(chain: FusedChain, m: FusedMapping, ctx: CodegenContext,
         placed: PlacedConstants | None = None) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    geo = ChainGeometry(chain, m, ctx)
    lay = _layout(chain, geo, m, ctx)
    g1, g2, g3 = geo.g1, geo.g2, geo.g3
    n1, n2, n3 = (len(c) for c in _const_chunks(chain, geo))
    addrs = const_addresses(placed, n1 + n2 + n3)
    a1 = addrs[:n1]
    a2 = addrs[n1:n1 + n2] if n2 else (0,) * len(geo.chunks)
    a3 = addrs[n1 + n2] if n3 else 0
    groups, hosts = order(geo.plan(chain))
    mem = ctx.consts.memory

    def wload(addr: int, sram: int, g, cn: int) -> list[Instruction]:
        return dma.contiguous(Opcode.DMA_LOAD, mem, addr, sram, g.weight_bytes(cn) + 12 * cn)

    alike: dict[tuple[int, int, int], GroupWork] = {}  # (slot, chunk, tiles) -> a pair's group

    def group_fn(gi: int, slot: int) -> GroupWork:
        count = len(groups[gi])
        if chain.project is not None:
            if gi:
                return GroupWork([], [], [], count)
            wl = [ins for j, (_, cn) in enumerate(geo.chunks) if g1 is not None
                  for ins in wload(a1[j], lay.w1[j], g1, cn)]
            wl += wload(a3, lay.w3, g3, g3.cout)
            dwl = [ins for j, (_, cn) in enumerate(geo.chunks)
                   for ins in wload(a2[j], lay.w2[j], g2, cn)]
            return GroupWork(wl + dwl, [], [], count) if geo.dw_matrix else (
                GroupWork(wl, dwl, [], count))
        cn = geo.chunks[gi][1]
        key = (slot, cn, count)
        if placed is None and key in alike:  # estimating: every constant at address 0
            return alike[key]
        w1 = wload(a1[gi], lay.w1[slot], g1, cn) if g1 is not None else []
        w2 = [] if chain.pooled else wload(a2[gi], lay.w2[slot], g2,
                                               g2.cout if chain.halo_conv else cn)
        group = GroupWork(w1 + w2, [], [], count) if geo.dw_matrix else (
            GroupWork(w1, w2, [], count))
        if placed is None:
            alike[key] = group
        return group

    def tile_fn(gi: int, t: int, s: Slots) -> TileWork:
        tl = groups[gi][t]
        if tl.kind is TileKind.EMPTY:
            work = TileWork()
        elif tl.kind is TileKind.P:
            work = _project_tile(chain, geo, lay, tl, s, ctx)
        else:
            key = (tl.chunk if chain.project is None else -1, tl.stripe)
            work = _e_tile(chain, geo, lay, tl, s, ctx, hosts.buffer(key))
        for i, b in hosts.at(tl.pos):
            work.loads.append(_conv_rows_load(chain, geo, lay, geo.stripes[i], b, ctx))
        return work

    def tile_key(gi: int, t: int) -> tuple:
        tl = groups[gi][t]
        st = geo.stripes[tl.stripe]
        cn = geo.chunks[tl.chunk][1]
        # what the tile's costs and events read: shapes, not rows' positions or paddings, and
        # of the mapping only the depthwise engine (the others are addresses or in the shapes:
        # the key holds across the chain's candidates, StepWork.cost_scope)
        win = geo.conv_window(st)[1] if g1 is not None and st.new else 0
        hosted = tuple(geo.conv_window(geo.stripes[i])[1] for i, _ in hosts.at(tl.pos))
        return (tl.kind, geo.dw_matrix, cn, st.rows, st.n, st.keep, st.moved >= 0, st.new, win,
                hosted)

    shape = StepShape(uses_matrix=True, in_depth=IN_DEPTH, acc_depth=m.depth, group_depth=2)
    return StepWork(shape, len(groups), group_fn, tile_fn, tile_key, ctx.cost_scope(chain))


def _conv_req(node: Node, acc: int, rows: int, ch: int, dst: int, dst_stride: int,
              params: int) -> Instruction:
    a = node.attr_map
    return Instruction.make(
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc, src_stride=ch, rows=rows, ch=ch,
        out_dtype=ISA_DTYPE[node.type.dtype], dst_addr=dst, dst_stride=dst_stride,
        param_addr=params, param_mode=ParamMode.PER_CHANNEL, out_zp=a["out_zp"],
        act_min=a["act_min"], act_max=a["act_max"], rounding=rounding_of(a))


def _conv_rows_load(chain: FusedChain, geo: ChainGeometry, lay: _Layout, st: _Stripe, b: int,
                    ctx: CodegenContext) -> Instruction:
    g1 = geo.g1
    r0, in_rows, _ = geo.conv_window(st)
    x = ctx.tensor(chain.conv.inputs[0])
    ps = _pixel(g1)
    return dma.pattern(Opcode.DMA_LOAD, x, r0 * g1.w * g1.c, lay.xin + b * lay.xin_stride,
                       ((g1.c, 1, 1), (g1.w, g1.c, ps), (in_rows, g1.w * g1.c, g1.w * ps)))


def _e_tile(chain: FusedChain, geo: ChainGeometry, lay: _Layout, tl: _Tile, s: Slots,
            ctx: CodegenContext, xbuf: int) -> TileWork:
    """A CONV, DW or CONV_DW tile of stripe `tl.stripe`, chunk `tl.chunk`."""
    g1, g2 = geo.g1, geo.g2
    st = geo.stripes[tl.stripe]
    c0, cn = geo.chunks[tl.chunk]
    chain_mode = chain.project is not None
    w1 = lay.w1[tl.chunk if chain_mode else s.group] if g1 is not None else 0
    w2 = lay.w2[tl.chunk if chain_mode else s.group]
    acc = lay.acc + s.acc * lay.acc_stride
    iaddr = lay.inp + s.inp * lay.inp_stride
    loads: list[Instruction] = []
    matrix: list[Instruction] = []
    vector: list[Instruction] = []
    stores: list[Instruction] = []
    a2 = chain.dw.attr_map
    line = lay.line[tl.chunk] if g1 is not None else 0
    row = g2.w * cn  # bytes of one line-buffer row
    if tl.kind in (TileKind.CONV, TileKind.CONV_DW):
        if st.new:  # its input rows were loaded into buffer xbuf (_hosts)
            _, in_rows, pad_top = geo.conv_window(st)
            ps = _pixel(g1)
            matrix.append(Instruction.make(
                Opcode.CONV, in_addr=lay.xin + xbuf * lay.xin_stride, in_h=in_rows, in_w=g1.w,
                in_stride_h=g1.w * ps, in_stride_w=ps, cin=g1.c,
                in_zp=chain.conv.attr_map["in_zp"], kh=g1.kh, kw=g1.kw, stride_h=g1.sh,
                stride_w=g1.sw, dil_h=g1.dh, dil_w=g1.dw, pad_top=pad_top, pad_left=g1.pl,
                out_h=st.new, out_w=g1.ow, w_addr=w1, w_stride_k=g1.c * cn, w_stride_ci=cn,
                w_stride_co=1, w_zp=0, cout=cn, acc_addr=acc, acc_stride=cn,
                mode=AccMode.OVERWRITE, w_type=g1.w_type))
        if st.moved >= 0:  # rebase: the rows still needed move to the top (reads first)
            vector.append(Instruction.make(
                Opcode.COPY, dtype=ISA_DTYPE[DType.I8], d0=cn, d1=st.keep * g2.w,
                src_addr=line + st.moved * row, src_s0=1, src_s1=cn, dst_addr=line, dst_s0=1,
                dst_s1=cn))
        if st.new:
            vector.append(_conv_req(chain.conv, acc, st.new * g2.w, cn,
                                    line + (st.off + st.new0 - st.r0) * row, cn,
                                    w1 + g1.weight_bytes(cn)))
        if tl.kind is TileKind.CONV:
            return TileWork(loads, matrix, vector, stores)
    if g1 is not None:
        dw_in = line + st.off * row
    elif geo.dw_matrix:  # depthwise input window from DRAM, into the input slot
        dw_in = iaddr
    else:  # ... into a VIN buffer
        dw_in = lay.vin + (tl.pos % geo.vin_slots) * lay.vin_stride
    if g1 is None:
        x = ctx.tensor(chain.dw.inputs[0])
        loads.append(dma.pattern(Opcode.DMA_LOAD, x, st.r0 * g2.w * g2.c + c0, dw_in,
                                 ((cn, 1, 1), (g2.w, g2.c, cn), (st.n, g2.w * g2.c, g2.w * cn))))
    if chain.halo_conv:  # the second conv's CONV over the window (all channels), stored
        return _halo_conv_tile(chain, geo, lay, st, s, ctx, dw_in, w2, acc,
                               TileWork(loads, matrix, vector, stores))
    if chain.pooled:  # the max pool's POOL over the window, into the output slot
        y = ctx.tensor(chain.dw.name)
        oaddr = lay.out + s.out * lay.out_stride
        lo, hi = chain.dw.type.dtype.bounds
        vector.append(Instruction.make(
            Opcode.POOL, op=PoolOp.MAX, dtype=ISA_DTYPE[DType.I8], in_addr=dw_in, in_h=st.n,
            in_w=g2.w, in_stride_h=g2.w * cn, in_stride_w=cn, ch=cn, kh=g2.kh, kw=g2.kw,
            stride_h=g2.sh, stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=st.pad_top,
            pad_left=g2.pl, out_h=st.rows, out_w=g2.ow, out_addr=oaddr,
            out_stride_h=g2.ow * cn, out_stride_w=cn, act_min=lo, act_max=hi))
        stores.append(dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g2.ow * g2.cout + c0, oaddr,
                                  ((cn, 1, 1), (st.rows * g2.ow, g2.cout, cn))))
        return TileWork(loads, matrix, vector, stores)
    dacc = acc if geo.dw_matrix else lay.acc2
    dw = Instruction.make(
        Opcode.DWCONV, in_addr=dw_in, in_h=st.n, in_w=g2.w, in_stride_h=g2.w * cn,
        in_stride_w=cn, ch=cn, in_zp=a2["in_zp"], kh=g2.kh, kw=g2.kw, stride_h=g2.sh,
        stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=st.pad_top, pad_left=g2.pl,
        out_h=st.rows, out_w=g2.ow, w_addr=w2, w_stride_k=cn, acc_addr=dacc,
        acc_stride=cn, mode=AccMode.OVERWRITE, w_type=g2.w_type)
    (matrix if geo.dw_matrix else vector).append(dw)
    params = w2 + g2.weight_bytes(cn)
    if chain_mode:
        dst = lay.dwbuf + (tl.stripe % 2) * lay.dwbuf_stride + c0
        vector.append(_conv_req(chain.dw, dacc, st.rows * g2.ow, cn, dst, g2.cout, params))
    else:
        y = ctx.tensor(chain.dw.name)
        oaddr = lay.out + s.out * lay.out_stride
        vector.append(_conv_req(chain.dw, dacc, st.rows * g2.ow, cn, oaddr, cn, params))
        stores.append(dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g2.ow * g2.cout + c0, oaddr,
                                  ((cn, 1, 1), (st.rows * g2.ow, g2.cout, cn))))
    return TileWork(loads, matrix, vector, stores)


def _halo_conv_tile(chain: FusedChain, geo: ChainGeometry, lay: _Layout, st: _Stripe, s: Slots,
                    ctx: CodegenContext, src: int, w2: int, acc: int, work: TileWork
                    ) -> TileWork:
    """The DW tile of a conv -> conv chain: the second conv over the line buffer's window of
    all its input channels, requantised into the output slot and stored."""
    g2 = geo.g2
    a2 = chain.dw.attr_map
    cin, cout, pix = g2.c, g2.cout, st.rows * g2.ow
    work.matrix.append(Instruction.make(
        Opcode.CONV, in_addr=src, in_h=st.n, in_w=g2.w, in_stride_h=g2.w * cin,
        in_stride_w=cin, cin=cin, in_zp=a2["in_zp"], kh=g2.kh, kw=g2.kw, stride_h=g2.sh,
        stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=st.pad_top, pad_left=g2.pl,
        out_h=st.rows, out_w=g2.ow, w_addr=w2, w_stride_k=cin * cout, w_stride_ci=cout,
        w_stride_co=1, w_zp=0, cout=cout, acc_addr=acc, acc_stride=cout,
        mode=AccMode.OVERWRITE, w_type=g2.w_type))
    oaddr = lay.out + s.out * lay.out_stride
    work.vector.append(_conv_req(chain.dw, acc, pix, cout, oaddr, cout,
                                 w2 + g2.weight_bytes(cout)))
    y = ctx.tensor(chain.dw.name)
    work.stores.append(dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g2.ow * cout, oaddr,
                                   ((cout, 1, 1), (pix, cout, cout))))
    return work


def _project_tile(chain: FusedChain, geo: ChainGeometry, lay: _Layout, tl: _Tile, s: Slots,
                  ctx: CodegenContext) -> TileWork:
    g3 = geo.g3
    st = geo.stripes[tl.stripe]
    a3 = chain.project.attr_map
    cin, cout, pix = g3.c, g3.cout, st.rows * g3.ow
    acc = lay.acc + s.acc * lay.acc_stride
    src = lay.dwbuf + (tl.stripe % 2) * lay.dwbuf_stride
    conv = Instruction.make(
        Opcode.CONV, in_addr=src, in_h=st.rows, in_w=g3.w, in_stride_h=g3.w * cin,
        in_stride_w=cin, cin=cin, in_zp=a3["in_zp"], kh=1, kw=1, stride_h=1, stride_w=1,
        dil_h=1, dil_w=1, pad_top=0, pad_left=0, out_h=st.rows, out_w=g3.ow, w_addr=lay.w3,
        w_stride_k=cin * cout, w_stride_ci=cout, w_stride_co=1, w_zp=0, cout=cout,
        acc_addr=acc, acc_stride=cout, mode=AccMode.OVERWRITE, w_type=g3.w_type)
    oaddr = lay.out + s.out * lay.out_stride
    params = lay.w3 + g3.weight_bytes(cout)
    loads: list[Instruction] = []
    if chain.add is None:
        vector = [_conv_req(chain.project, acc, pix, cout, oaddr, cout, params)]
    else:
        res = ctx.tensor(chain.residual)
        raddr = lay.vin + (tl.pos % geo.vin_slots) * lay.vin_stride
        loads.append(dma.pattern(Opcode.DMA_LOAD, res, st.oy0 * g3.ow * cout, raddr,
                                 ((cout, 1, 1), (pix, cout, cout))))
        vector = [_conv_req(chain.project, acc, pix, cout, lay.tmp, cout, params),
                  _residual_add(chain, lay.tmp, raddr, oaddr, pix, cout)]
    y = ctx.tensor(chain.last.name)
    store = dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g3.ow * cout, oaddr,
                        ((cout, 1, 1), (pix, cout, cout)))
    return TileWork(loads, [conv], vector, [store])


def _residual_add(chain: FusedChain, proj: int, res: int, out: int, pix: int, cout: int
                  ) -> Instruction:
    """The qadd's ELTWISE on a stripe (operands in the qadd's order)."""
    add = chain.add
    a = add.attr_map
    first, second = (proj, res) if add.inputs[0] == chain.project.name else (res, proj)
    i8 = ISA_DTYPE[DType.I8]
    fields = dict(op=EltOp.ADD, a_dtype=i8, b_dtype=i8, out_dtype=i8, a_addr=first,
                  b_addr=second, out_addr=out, out_zp=a["out_zp"], act_min=a["act_min"],
                  act_max=a["act_max"], d0=cout, d1=pix, a_s0=1, a_s1=cout, b_s0=1,
                  b_s1=cout, out_s0=1, out_s1=cout)
    fields.update(eltwise_emit._rescale(add))
    return Instruction.make(Opcode.ELTWISE, **fields)
