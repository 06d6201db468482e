"""The geometry of a fused chain (ops.fused_emit): the chain and its mapping, the row stripes
of the windowed member's output, the line buffer that carries the halo from stripe to stripe,
and the SRAM / accumulator layout of one mapping (`layout`; it refuses a mapping that does not
fit)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from tessel.errors import TesselCompileError
from tessel.ir import Node, Op
from tessel.isa import Engine
from tessel.ops import conv_geometry, pool_emit
from tessel.ops.context import ALIGN, CodegenContext, SramPlan, align

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


@dataclass(frozen=True)
class Stripe:
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
def _stripes(g2, rows: int, cap: int | None) -> tuple[Stripe, ...]:
    """Stripes of depthwise output rows; `cap`: line-buffer rows (None: no line buffer, each
    stripe reads its whole window). The line buffer fills downwards; when a window would pass
    its end, the rows still needed move to the top (one COPY) and it fills again."""
    out: list[Stripe] = []
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
        out.append(Stripe(oy0, rn, r0, n, pt, keep, new0, r1 - new0 + 1, r0 - base, moved))
        prev = (r0, r1)
    return tuple(out)


class Lines(NamedTuple):
    """A mapping's stripes, their conv windows and the maxima layout reads (`_line_stripes`)."""

    cap: int | None  # line-buffer rows (None: no conv, no line buffer)
    stripes: tuple[Stripe, ...]
    windows: dict[int, tuple[int, int, int]]  # id(stripe) -> the conv's input rows of its new rows
    n_max: int  # the largest window a stripe reads
    new_max: int  # the most new conv rows a stripe computes
    x_max: int  # the most conv input rows a stripe computing new rows reads (1: none, no conv)


@functools.lru_cache(maxsize=4096)
def _line_stripes(g1, g2, rows: int, line: int) -> Lines:
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
    return Lines(cap, stripes, windows, n_max, max(s.new for s in stripes), x_max)


@dataclass(frozen=True)
class Layout:
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

    def conv_window(self, s: Stripe) -> tuple[int, int, int]:
        """The conv's input rows for the stripe's new rows (one of `self.stripes`)."""
        return self.lines.windows[id(s)]


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


def layout(chain: FusedChain, geo: ChainGeometry, m: FusedMapping, ctx: CodegenContext) -> Layout:
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
        xbytes = align(geo.lines.x_max * g1.w * pixel(g1))
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
    return Layout(w1, w2, w3, inp, ibytes, xin, xbytes, vin, vbytes, line, dwbuf, dbytes, tmp, out,
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


def pixel(g1) -> int:
    """SRAM bytes per pixel of the conv's input rows: padded, so that the load is not a plain
    translation of DRAM (the residency rewrite would drop it and re-base only its own tile,
    but the rows are read by the conv tiles of every chunk)."""
    return g1.c + ALIGN
