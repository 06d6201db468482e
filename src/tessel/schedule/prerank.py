"""Closed-form lower bounds of a mapping candidate's estimate, from the mapping and the op's
geometry alone (no instruction is built): the mapping search (tessel.schedule.search_cache)
uses them to skip candidates that cannot make its shortlist, so it picks exactly what the
unpruned search picks.

A step's estimate (tessel.codegen.step.estimate_step) is at least

* the matrix engine's work: the sum of its instructions' cycles, each at least the GEMM fold
  formula (``isa.costs.gemm_cycles``; ``matrix_cost`` takes the max of it and the operand path);
* the vector engine's work: each instruction at least its pipeline latency plus
  ``ceil(lane work / lanes)`` (``vector_cost`` takes the max of that and the SRAM port);
* per off-chip memory: its latency plus the data cycles of every transfer on it (its data port
  serves one transfer at a time: ``ceil(bytes / min(bytes_per_cycle, SRAM bytes per cycle))``
  each, at least ``ceil(total / that)`` for a transfer split in several instructions),

because the estimate's span runs from the first op's start to the last op's end and each of
these is a set of non-overlapping intervals inside it. A sampled estimate runs the first
`sample` tiles of the first two groups and scales by the share of tiles run; its bound is the
same sums over the same tiles, scaled the same way (``int(x * scale)`` is monotone in x).

Bounds exist for qconv2d (ops_conv), most of the search time of convolutional models; every
other op, and the cascaded chains of ops_fused, have none (``None``: the search estimates all
their candidates, as before; the chains' bound of the pair they replaced is not ported).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tessel.arch import NpuArch
from tessel.codegen import ops_conv
from tessel.codegen.context import CodegenContext
from tessel.ir import Node, Op
from tessel.isa.costs import gemm_cycles


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Bound:
    """The sums over a step's tiles that bound its estimate."""

    def __init__(self, arch: NpuArch):
        self.arch = arch
        self.data = [0] * len(arch.offchip)  # per memory: data cycles of every transfer
        self.used = [False] * len(arch.offchip)
        self.sram_bpc = arch.derived.sram_bytes_per_cycle
        self.spans = [0, 0]  # DMA_IN, DMA_OUT: latency + data cycles of each transfer, summed
        self.mwork = self.vwork = 0
        self.fill = 0  # until the first tile's inputs are in (group 0's loads, its load)
        self.first_mwork = 0  # the first tile's matrix work
        self.last_vwork = self.drain = 0  # the last tile's vector work, its store

    def cycles(self, mem: int, nbytes: int) -> int:
        """Data cycles of a transfer of `nbytes` (of several adding up to it: at least this)."""
        return _cdiv(nbytes, min(self.arch.offchip[mem].bytes_per_cycle, self.sram_bpc))

    def xfer(self, engine: int, mem: int, cycles: int, times: int = 1) -> None:
        """`times` transfers of `cycles` data cycles each on DMA engine 0 (in) or 1 (out)."""
        self.data[mem] += cycles * times
        self.used[mem] = self.used[mem] or times > 0
        self.spans[engine] += (self.arch.offchip[mem].latency_cycles + cycles) * times

    def set_fill(self, per_mem: dict[int, int]) -> None:
        offchip = self.arch.offchip
        self.fill = max((offchip[m].latency_cycles + c for m, c in per_mem.items()), default=0)

    def lower(self, uses_matrix: bool) -> int:
        """Each compute engine's work; each port's transfers; each DMA engine's transfers (each
        lasts at least its latency plus its data cycles, at most `dma_channels` at a time); and
        the chain through the step: the first tile waits for its loads, the matrix tiles run
        in order, the last tile's vector work and store follow the last matrix tile (the
        vector tiles follow the first matrix tile)."""
        ports = max((self.arch.offchip[m].latency_cycles + d
                     for m, (d, u) in enumerate(zip(self.data, self.used, strict=True)) if u),
                    default=0)
        if uses_matrix:
            chain = max(self.fill + self.mwork + self.last_vwork + self.drain,
                        self.fill + self.first_mwork + self.vwork + self.drain)
        else:
            chain = self.fill + self.vwork + self.drain
        ch = self.arch.dma_channels
        dmas = max(_cdiv(self.spans[0], ch), _cdiv(self.spans[1], ch))
        return max(self.mwork, self.vwork, ports, chain, dmas)


def _vec(arch: NpuArch, work: int) -> int:
    return arch.vector.pipeline_latency_cycles + _cdiv(work, arch.vector.lanes)


def _gemm(arch: NpuArch, m: int, n: int, k: int) -> int:
    mx = arch.matrix
    return gemm_cycles(m, n, k, mx.rows, mx.cols, mx.dataflow, mx.fold_pipelining)


def _scaled(lower: int, tiles: int, groups: int, run_tiles: int, sample: int | None) -> int:
    """The bound as estimate_step reports it (scaled the same way when sampled: the sampled
    groups' tile counts are all `tiles`)."""
    if sample is None or not run_tiles:
        return lower
    run_groups = min(2, groups)
    total_tiles = sum([tiles] * run_groups) / run_groups * groups
    return int(lower * (total_tiles / run_tiles))


def _groups_tiles(groups: int, tiles: int, sample: int | None) -> tuple[int, int]:
    """(groups run, tiles run per group) of a step whose groups all have `tiles` tiles."""
    if sample is None:
        return groups, tiles
    return min(2, groups), min(sample, tiles)


@dataclass(frozen=True)
class _TileCost:
    """One tile of a group: its load, matrix work, vector work and store (cycles)."""

    load: int
    mwork: int
    vwork: int
    store: int


def _assemble(arch: NpuArch, chunks: list[int], nt: int, group_loads: Callable[[int], list],
              tiles: Callable[[int], list[_TileCost]], in_mem: int, out_mem: int,
              uses_matrix: bool) -> int:
    """The bound of a step whose groups (channel chunks `chunks`, in order) each run the same
    `nt` tiles up to the chunk width; group_loads(cn): [(memory, data cycles)] of a group's
    resident loads; tiles(cn): its tiles' costs, in order."""
    acc = _Bound(arch)
    per_cn: dict[int, list[_TileCost]] = {}
    for cn in chunks:
        if cn not in per_cn:
            per_cn[cn] = tiles(cn)[:nt]
    counts: dict[int, int] = {}
    for cn in chunks:
        counts[cn] = counts.get(cn, 0) + 1
    for cn, times in counts.items():
        for mem, c in group_loads(cn):
            acc.xfer(0, mem, c, times)
        for tc in per_cn[cn]:
            acc.xfer(0, in_mem, tc.load, times)
            acc.xfer(1, out_mem, tc.store, times)
            acc.mwork += tc.mwork * times
            acc.vwork += tc.vwork * times
    first, last = per_cn[chunks[0]][0], per_cn[chunks[-1]][-1]
    fill: dict[int, int] = {}
    for mem, c in group_loads(chunks[0]) + [(in_mem, first.load)]:
        fill[mem] = fill.get(mem, 0) + c
    acc.set_fill(fill)
    acc.first_mwork = first.mwork
    acc.last_vwork = last.vwork
    acc.drain = arch.offchip[out_mem].latency_cycles + last.store
    return acc.lower(uses_matrix)


def conv_bound(node: Node, m: ops_conv.ConvMapping, ctx: CodegenContext,
               sample: int | None, g: ops_conv.ConvGeometry | None = None) -> int:
    """Lower bound of estimate_step(ops_conv.step(node, m, ctx), sample=sample)."""
    arch = ctx.arch
    g = g if g is not None else ops_conv.geometry(node, ctx)
    if m.order.input_resident:
        return conv_input_resident_bound(node, m, ctx, sample, g)
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    xsz, ysz = x.itemsize, y.itemsize
    vector = ops_conv.on_vector(g, m)
    chunks = [min(m.chunk, g.cout - c0) for c0 in range(0, g.cout, m.chunk)]
    row_tiles = [(oy, min(m.rows, g.oh - oy)) for _ in range(g.n)
                 for oy in range(0, g.oh, m.rows)]
    ng, nt = _groups_tiles(len(chunks), len(row_tiles), sample)
    subs = None if g.depthwise else ops_conv.sub_convs(g)
    windows = [(rows, g.in_rows(oy0, rows)[1]) for oy0, rows in row_tiles[:nt]]
    acc = _Bound(arch)
    wmem = ctx.consts.memory

    def group_loads(cn: int) -> list:
        return [(wmem, acc.cycles(wmem, g.weight_bytes(cn) + 12 * cn))]

    def tiles(cn: int) -> list[_TileCost]:
        cl = cn if g.depthwise else g.c
        out = []
        for rows, in_rows in windows:
            pixels = rows * g.ow
            mwork = vwork = 0
            if g.depthwise:
                if vector:
                    vwork += _vec(arch, pixels * cn * g.kh * g.kw)
                else:
                    mwork += _gemm(arch, pixels, cn, g.kh * g.kw)
            else:
                cg = ops_conv._per_conv(g, cn)
                mwork += (cn // cg) * sum(_gemm(arch, pixels, cg, sc.bh * sc.bw * g.cin_g)
                                          for sc in subs)
            vwork += _vec(arch, pixels * cn)  # REQUANT
            out.append(_TileCost(acc.cycles(x.memory, in_rows * g.w * cl * xsz), mwork, vwork,
                                 acc.cycles(y.memory, pixels * cn * ysz)))
        return out

    lower = _assemble(arch, chunks[:ng], nt, group_loads, tiles, x.memory, y.memory,
                      not vector)
    return _scaled(lower, len(row_tiles), len(chunks), ng * nt, sample)


def conv_input_resident_bound(node: Node, m: ops_conv.ConvMapping, ctx: CodegenContext,
                              sample: int | None, g: ops_conv.ConvGeometry) -> int:
    """conv_bound of the input-resident orders (ops_conv.ConvOrder.INPUT / INPUT_STREAM): a
    group per row stripe loads its input rows (group 0 also every chunk's weights for INPUT,
    and the parameter table); a tile per chunk (INPUT_STREAM: loading its weights)."""
    arch = ctx.arch
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    wmem = ctx.consts.memory
    chunks = [min(m.chunk, g.cout - c0) for c0 in range(0, g.cout, m.chunk)]
    stripes = [(oy, min(m.rows, g.oh - oy)) for _ in range(g.n) for oy in range(0, g.oh, m.rows)]
    ng, nt = _groups_tiles(len(stripes), len(chunks), sample)
    subs = ops_conv.sub_convs(g)
    streamed = m.order is ops_conv.ConvOrder.INPUT_STREAM
    acc = _Bound(arch)
    fill: dict[int, int] = {}
    work: dict[tuple[int, int], tuple[int, int]] = {}  # (rows, cn) -> matrix, vector work
    first = last = None
    for j in range(ng):
        oy0, rows = stripes[j]
        loads = [(x.memory, acc.cycles(x.memory, g.in_rows(oy0, rows)[1] * g.w * g.c
                                       * x.itemsize))]
        if j == 0:
            if not streamed:
                loads.append((wmem, acc.cycles(wmem, g.weight_bytes(g.cout))))
            loads.append((wmem, acc.cycles(wmem, 12 * g.cout)))
        for mem, c in loads:
            acc.xfer(0, mem, c)
            if j == 0:
                fill[mem] = fill.get(mem, 0) + c
        pixels = rows * g.ow
        for t in range(nt):
            cn = chunks[t]
            if (rows, cn) not in work:
                cg = ops_conv._per_conv(g, cn)
                work[rows, cn] = ((cn // cg) * sum(_gemm(arch, pixels, cg, sc.bh * sc.bw * g.cin_g)
                                                   for sc in subs), _vec(arch, pixels * cn))
            mwork, vwork = work[rows, cn]
            if streamed:
                c = acc.cycles(wmem, g.weight_bytes(cn))
                acc.xfer(0, wmem, c)
                if j == 0 and t == 0:
                    fill[wmem] = fill.get(wmem, 0) + c
            store = acc.cycles(y.memory, pixels * cn * y.itemsize)
            acc.xfer(1, y.memory, store)
            acc.mwork += mwork
            acc.vwork += vwork
            first = first if first is not None else mwork
            last = (vwork, store)
    acc.set_fill(fill)
    acc.first_mwork = first or 0
    if last is not None:
        acc.last_vwork = last[0]
        acc.drain = arch.offchip[y.memory].latency_cycles + last[1]
    return _scaled(acc.lower(True), len(chunks), len(stripes), ng * nt, sample)


class Bounds:
    """Lower bounds for the candidates of one unit (its geometry computed once)."""

    def __init__(self, unit: Any, ctx: CodegenContext):
        self.unit, self.ctx = unit, ctx
        if isinstance(unit, Node) and unit.op is Op.QCONV2D:
            self.geoms: Any = ops_conv.geometry(unit, ctx)
        else:
            self.geoms = None

    @property
    def available(self) -> bool:
        return self.geoms is not None

    def __call__(self, mapping: Any, sample: int | None) -> int | None:
        if self.geoms is None:
            return None
        return conv_bound(self.unit, mapping, self.ctx, sample, self.geoms)


def lower_bound(unit: Any, mapping: Any, ctx: CodegenContext, sample: int | None
                ) -> int | None:
    """A lower bound of the unit's estimate with `mapping` (sampled as `sample`), or None when
    the op has no closed form here."""
    if isinstance(unit, Node) and unit.op is Op.QCONV2D:
        return conv_bound(unit, mapping, ctx, sample)
    return None
