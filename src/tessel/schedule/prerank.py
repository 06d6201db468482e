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

Bounds exist for qconv2d (ops_conv) and the cascaded chains of ops_fused (`chain_bound`: the
step's own tile order and groups, each tile at the sums above), most of the search time of
convolutional models; every other op has none (``None``: the search estimates all its
candidates, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tessel.arch import NpuArch
from tessel.codegen import ops_conv, ops_fused
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
                cg = ops_conv.per_conv(g, cn)
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
                cg = ops_conv.per_conv(g, cn)
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


@dataclass(frozen=True)
class _Work:
    """One tile of any step: its loads and stores [(memory, data cycles)] and its matrix and
    vector work (cycles)."""

    loads: tuple[tuple[int, int], ...] = ()
    mwork: int = 0
    vwork: int = 0
    stores: tuple[tuple[int, int], ...] = ()


def _general(arch: NpuArch, run: list[tuple[list[tuple[int, int]], list[_Work]]],
             uses_matrix: bool) -> int:
    """The bound of the groups run (`run`: per group its resident loads [(memory, data
    cycles)], one transfer each, and its tiles run, in order; each group runs one tile at
    least), as _Bound.lower sums them."""
    acc = _Bound(arch)
    for loads, tiles in run:
        for mem, c in loads:
            acc.xfer(0, mem, c)
        for tw in tiles:
            for mem, c in tw.loads:
                acc.xfer(0, mem, c)
            for mem, c in tw.stores:
                acc.xfer(1, mem, c)
            acc.mwork += tw.mwork
            acc.vwork += tw.vwork
    first, last = run[0][1][0], run[-1][1][-1]
    fill: dict[int, int] = {}
    for mem, c in run[0][0] + list(first.loads):
        fill[mem] = fill.get(mem, 0) + c
    acc.set_fill(fill)
    acc.first_mwork = first.mwork
    acc.last_vwork = last.vwork
    drain: dict[int, int] = {}
    for mem, c in last.stores:
        drain[mem] = drain.get(mem, 0) + c
    acc.drain = max((arch.offchip[m].latency_cycles + c for m, c in drain.items()), default=0)
    return acc.lower(uses_matrix)


def chain_bound(chain: ops_fused.FusedChain, m: ops_fused.FusedMapping, ctx: CodegenContext,
                sample: int | None, geoms: tuple | None = None) -> int:
    """Lower bound of estimate_step(ops_fused.step(chain, m, ctx), sample=sample): the same
    tiles in the same groups (the step's tile order, ops_fused.order), each tile's
    instructions at the bounds of the module docstring (CONV and a DWCONV on MATRIX at the
    GEMM fold formula, REQUANT / COPY / ELTWISE / a DWCONV on VECTOR at latency plus lane
    work, each transfer at its data cycles)."""
    arch = ctx.arch
    geo = ops_fused.ChainGeometry(chain, m, ctx, geoms)
    g1, g2, g3 = geo.g1, geo.g2, geo.g3
    groups, hosts = ops_fused.order(geo.plan(chain))
    kinds = ops_fused.TileKind
    acc = _Bound(arch)
    wmem = ctx.consts.memory

    def mem_of(name: str) -> int:
        return ctx.tensor(name).memory

    loads_of: dict[tuple[int, int], tuple[int, int]] = {}  # (member, chunk) -> its load

    def wl(g, cn: int) -> tuple[int, int]:
        key = (id(g), cn)  # (g1, g2, g3 live for the whole call)
        got = loads_of.get(key)
        if got is None:
            got = loads_of[key] = (wmem, acc.cycles(wmem, g.weight_bytes(cn) + 12 * cn))
        return got

    xmem = mem_of((chain.conv if chain.conv is not None else chain.dw).inputs[0])
    ymem = mem_of(chain.last.name)
    rmem = mem_of(chain.residual) if chain.residual is not None else 0
    memo: dict[tuple, _Work] = {}
    rows_in: dict[int, int] = {}  # stripe -> the data cycles of its conv input rows' load

    def hosted(i: int) -> int:
        c = rows_in.get(i)
        if c is None:
            c = rows_in[i] = acc.cycles(xmem, geo.conv_window(geo.stripes[i])[1] * g1.w * g1.c)
        return c

    def tile(tl) -> _Work:
        here = hosts.at(tl.pos)
        st = geo.stripes[tl.stripe]
        # what the sums below read: the stripe's and the chunk's sizes, the loads it hosts
        key = (tl.kind, geo.chunks[tl.chunk][1], st.rows, st.n, st.new, st.keep, st.moved >= 0,
               tuple(hosted(i) for i, _ in here) if here else ())
        hit = memo.get(key)
        if hit is not None:
            return hit
        loads = [(xmem, hosted(i)) for i, _ in here]
        stores: list[tuple[int, int]] = []
        mwork = vwork = 0
        if tl.kind is kinds.P:
            pix, cout = st.rows * g3.ow, g3.cout
            mwork += _gemm(arch, pix, cout, g3.c)
            vwork += _vec(arch, pix * cout)
            if chain.add is not None:
                loads.append((rmem, acc.cycles(rmem, pix * cout)))
                vwork += _vec(arch, pix * cout)
            stores.append((ymem, acc.cycles(ymem, pix * cout)))
        elif tl.kind is not kinds.EMPTY:
            cn = geo.chunks[tl.chunk][1]
            if tl.kind in (kinds.CONV, kinds.CONV_DW):
                if st.new:
                    mwork += _gemm(arch, st.new * g1.ow, cn, g1.kh * g1.kw * g1.c)
                    vwork += _vec(arch, st.new * g2.w * cn)
                if st.moved >= 0:
                    vwork += _vec(arch, cn * st.keep * g2.w)
            if tl.kind is not kinds.CONV:
                if g1 is None:
                    loads.append((xmem, acc.cycles(xmem, st.n * g2.w * cn)))
                pix = st.rows * g2.ow
                if chain.halo_conv:  # CONV over all channels, REQUANT, store
                    mwork += _gemm(arch, pix, g2.cout, g2.kh * g2.kw * cn)
                    vwork += _vec(arch, pix * g2.cout)
                    stores.append((ymem, acc.cycles(ymem, pix * g2.cout)))
                elif chain.pooled:  # POOL, no requantisation
                    vwork += _vec(arch, pix * cn * g2.kh * g2.kw)
                elif geo.dw_matrix:
                    mwork += _gemm(arch, pix, cn, g2.kh * g2.kw)
                else:
                    vwork += _vec(arch, pix * cn * g2.kh * g2.kw)
                if not chain.pooled and not chain.halo_conv:
                    vwork += _vec(arch, pix * cn)
                if g3 is None and not chain.halo_conv:
                    stores.append((ymem, acc.cycles(ymem, pix * cn)))
        out = memo[key] = _Work(tuple(loads), mwork, vwork, tuple(stores))
        return out

    ng = len(groups) if sample is None else min(2, len(groups))
    run = []
    for gi in range(ng):
        tiles = groups[gi] if sample is None else groups[gi][:sample]
        if g3 is not None:  # every weight, loaded once in the first group
            gl = [wl(g1, cn) for _, cn in geo.chunks] if (g1 is not None and not gi) else []
            gl += [wl(g3, g3.cout)] + [wl(g2, cn) for _, cn in geo.chunks] if not gi else []
        else:
            cn = geo.chunks[gi][1]
            gl = ([wl(g1, cn)] if g1 is not None else []) + (
                [] if chain.pooled else [wl(g2, g2.cout if chain.halo_conv else cn)])
        run.append((gl, [tile(t) for t in tiles]))
    lower = _general(arch, run, True)
    run_tiles = sum(len(t) for _, t in run)
    if sample is None or not run_tiles:
        return lower
    counts = [len(g) for g in groups[:ng]]
    return int(lower * (sum(counts) / len(counts) * len(groups) / run_tiles))


class Bounds:
    """Lower bounds for the candidates of one unit (its geometry computed once)."""

    def __init__(self, unit: Any, ctx: CodegenContext):
        self.unit, self.ctx = unit, ctx
        if isinstance(unit, Node) and unit.op is Op.QCONV2D:
            self.geoms: Any = ops_conv.geometry(unit, ctx)
        elif isinstance(unit, ops_fused.FusedChain):
            self.geoms = ops_fused.geometries(unit, ctx)
        else:
            self.geoms = None

    @property
    def available(self) -> bool:
        return self.geoms is not None

    def __call__(self, mapping: Any, sample: int | None) -> int | None:
        if self.geoms is None:
            return None
        if isinstance(self.unit, ops_fused.FusedChain):
            return chain_bound(self.unit, mapping, self.ctx, sample, self.geoms)
        return conv_bound(self.unit, mapping, self.ctx, sample, self.geoms)


def lower_bound(unit: Any, mapping: Any, ctx: CodegenContext, sample: int | None
                ) -> int | None:
    """A lower bound of the unit's estimate with `mapping` (sampled as `sample`), or None when
    the op has no closed form here."""
    if isinstance(unit, Node) and unit.op is Op.QCONV2D:
        return conv_bound(unit, mapping, ctx, sample)
    if isinstance(unit, ops_fused.FusedChain):
        return chain_bound(unit, mapping, ctx, sample)
    return None
