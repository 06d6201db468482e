"""Closed-form lower bounds of a mapping candidate's estimate, from the mapping and the op's
geometry alone (no instruction is built): the mapping search (tessel.schedule.search)
uses them to skip candidates that cannot make its shortlist, so it picks exactly what the
unpruned search picks.

A step's estimate (tessel.schedule.estimate.estimate_step) is at least

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

Bounds exist for qconv2d (conv_emit) and the cascaded chains of fused_emit (`chain_bound`: the
step's own tile order and groups, each tile at the sums above), most of the search time of
convolutional models; every other op has none (``None``: the search estimates all its
candidates, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tessel.arch import NpuArch
from tessel.ir import Node, Op
from tessel.isa.costs import gemm_cycles
from tessel.ops import conv_emit, conv_geometry, fused_geometry, fused_order
from tessel.ops.context import CodegenContext


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- arch-free terms -------------------------------------------------------------------------------
# A bound is built once per (unit signature, mapping, sample) from the geometry alone, as sums of
# atoms whose values only the NPU decides, and evaluated per NPU (`Terms.evaluate`): design points
# that share a step's signature share its terms (tessel.schedule.search). Atoms:
#   ("g", m, n, k)   the GEMM fold formula (isa.costs.gemm_cycles) on the matrix engine
#   ("v", work)      a vector instruction: pipeline latency + ceil(work / lanes)
#   ("c", mem, n)    the data cycles of n bytes on memory mem's port: ceil(n / min(its bytes per
#                    cycle, the SRAM's))
#   ("l", mem)       memory mem's latency
Atom = tuple
Lin = tuple[tuple[Atom, int], ...]  # sum of coef x atom, each atom once
_ZERO: Lin = ()


def _vec(work: int) -> Lin:
    return ((("v", work), 1),)


def _gemm(m: int, n: int, k: int) -> Lin:
    return ((("g", m, n, k), 1),)


def _plus(*lins: Lin) -> Lin:
    """The sum of `lins`."""
    acc: dict[Atom, int] = {}
    for lin in lins:
        for a, c in lin:
            acc[a] = acc.get(a, 0) + c
    return tuple(acc.items())


def _times(lin: Lin, k: int) -> Lin:
    return tuple((a, c * k) for a, c in lin)


def _add(acc: dict[Atom, int], lin: Lin, times: int = 1) -> None:
    for a, c in lin:
        acc[a] = acc.get(a, 0) + c * times


def _freeze(acc: dict[Atom, int]) -> Lin:
    return tuple(acc.items())


@dataclass(frozen=True)
class Terms:
    """The arch-free form of a lower bound (`_Bound.terms`; `evaluate` values it on an NPU)."""

    uses_matrix: bool
    mwork: Lin
    vwork: Lin
    ports: tuple[tuple[int, Lin], ...]  # per memory used: its transfers' data cycles
    spans: tuple[Lin, Lin]  # DMA_IN, DMA_OUT: latency + data cycles of each transfer, summed
    fill: tuple[tuple[int, Lin], ...]  # per memory: until the first tile's inputs are in
    first_mwork: Lin
    last_vwork: Lin
    drain: tuple[tuple[int, Lin], ...]  # per memory: the last tile's stores
    scale: float | None  # a sampled bound: int(lower * scale) (as estimate_step scales)
    # every sum in one flat tuple, for `evaluate`'s single loop: mwork, vwork, first_mwork,
    # last_vwork, the two spans, then ports, fill and drain per memory
    rows: tuple[Lin, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", (
            self.mwork, self.vwork, self.first_mwork, self.last_vwork, *self.spans,
            *(d for _, d in self.ports), *(c for _, c in self.fill),
            *(c for _, c in self.drain)))

    def evaluate(self, arch: NpuArch) -> int:
        """The bound on `arch` (see the module docstring)."""
        env = _Env.of(arch)
        get, atom, lat = env.memo.get, env.atom, env.lat
        sums = []
        for row in self.rows:
            total = 0
            for a, c in row:
                v = get(a)
                total += c * (v if v is not None else atom(a))
            sums.append(total)
        mw, vw, first_mw, last_vw, span_in, span_out = sums[:6]
        k = 6
        ports = fill = drain = 0
        for m, _ in self.ports:
            ports = max(ports, lat[m] + sums[k])
            k += 1
        for m, _ in self.fill:
            fill = max(fill, lat[m] + sums[k])
            k += 1
        for m, _ in self.drain:
            drain = max(drain, lat[m] + sums[k])
            k += 1
        if self.uses_matrix:
            chain = max(fill + mw + last_vw + drain, fill + first_mw + vw + drain)
        else:
            chain = fill + vw + drain
        ch = arch.dma_channels
        lower = max(mw, vw, ports, chain, _cdiv(span_in, ch), _cdiv(span_out, ch))
        return lower if self.scale is None else int(lower * self.scale)


class _Env:
    """Atom values on one NPU, memoised (one per NpuArch object, the last few kept)."""

    _LAST: dict[int, tuple[NpuArch, _Env]] = {}

    def __init__(self, arch: NpuArch):
        self.memo: dict[Atom, int] = {}
        mx = arch.matrix
        self._mx = (mx.rows, mx.cols, mx.dataflow, mx.fold_pipelining)
        self._lanes, self._vlat = arch.vector.lanes, arch.vector.pipeline_latency_cycles
        sram = arch.derived.sram_bytes_per_cycle
        self._bpc = tuple(min(m.bytes_per_cycle, sram) for m in arch.offchip)
        self.lat = tuple(m.latency_cycles for m in arch.offchip)

    @classmethod
    def of(cls, arch: NpuArch) -> _Env:
        hit = cls._LAST.get(id(arch))
        if hit is not None and hit[0] is arch:
            return hit[1]
        if len(cls._LAST) >= 16:
            cls._LAST.clear()
        env = cls(arch)
        cls._LAST[id(arch)] = (arch, env)
        return env

    def atom(self, a: Atom) -> int:
        kind = a[0]
        if kind == "g":
            v = gemm_cycles(a[1], a[2], a[3], *self._mx)
        elif kind == "v":
            v = self._vlat + _cdiv(a[1], self._lanes)
        elif kind == "c":
            v = _cdiv(a[2], self._bpc[a[1]])
        else:
            v = self.lat[a[1]]
        self.memo[a] = v
        return v


class _Bound:
    """The sums over a step's tiles that bound its estimate, over atoms (`terms`)."""

    def __init__(self) -> None:
        self.data: dict[int, dict[Atom, int]] = {}  # per memory used: data cycles of transfers
        self.spans: tuple[dict[Atom, int], dict[Atom, int]] = ({}, {})  # DMA_IN, DMA_OUT
        self.mwork: dict[Atom, int] = {}
        self.vwork: dict[Atom, int] = {}
        self.fill: dict[int, Lin] = {}  # until the first tile's inputs are in, per memory
        self.first_mwork: Lin = _ZERO  # the first tile's matrix work
        self.last_vwork: Lin = _ZERO  # the last tile's vector work
        self.drain: dict[int, Lin] = {}  # the last tile's stores, per memory

    @staticmethod
    def cycles(mem: int, nbytes: int) -> Lin:
        """Data cycles of a transfer of `nbytes` (of several adding up to it: at least this)."""
        return ((("c", mem, nbytes), 1),)

    def xfer(self, engine: int, mem: int, cycles: Lin, times: int = 1) -> None:
        """`times` transfers of `cycles` data cycles each on DMA engine 0 (in) or 1 (out)."""
        if times > 0:
            _add(self.data.setdefault(mem, {}), cycles, times)
        span = self.spans[engine]
        _add(span, cycles, times)
        span[("l", mem)] = span.get(("l", mem), 0) + times

    def terms(self, uses_matrix: bool, scale: float | None = None) -> Terms:
        """Each compute engine's work; each port's transfers; each DMA engine's transfers (each
        lasts at least its latency plus its data cycles, at most `dma_channels` at a time); and
        the chain through the step: the first tile waits for its loads, the matrix tiles run
        in order, the last tile's vector work and store follow the last matrix tile (the
        vector tiles follow the first matrix tile)."""
        return Terms(uses_matrix, _freeze(self.mwork), _freeze(self.vwork),
                     tuple((m, _freeze(d)) for m, d in self.data.items()),
                     (_freeze(self.spans[0]), _freeze(self.spans[1])),
                     tuple(self.fill.items()), self.first_mwork, self.last_vwork,
                     tuple(self.drain.items()), scale)


def _scale(tiles: int, groups: int, run_tiles: int, sample: int | None) -> float | None:
    """How estimate_step scales a sampled run (the sampled groups' tile counts all `tiles`);
    None: not sampled."""
    if sample is None or not run_tiles:
        return None
    run_groups = min(2, groups)
    total_tiles = sum([tiles] * run_groups) / run_groups * groups
    return total_tiles / run_tiles


def _groups_tiles(groups: int, tiles: int, sample: int | None) -> tuple[int, int]:
    """(groups run, tiles run per group) of a step whose groups all have `tiles` tiles."""
    if sample is None:
        return groups, tiles
    return min(2, groups), min(sample, tiles)


@dataclass(frozen=True)
class _TileCost:
    """One tile of a group: its load, matrix work, vector work and store."""

    load: Lin
    mwork: Lin
    vwork: Lin
    store: Lin


def _assemble(chunks: list[int], nt: int, group_loads: Callable[[int], list],
              tiles: Callable[[int], list[_TileCost]], in_mem: int, out_mem: int,
              uses_matrix: bool, scale: float | None) -> Terms:
    """The bound of a step whose groups (channel chunks `chunks`, in order) each run the same
    `nt` tiles up to the chunk width; group_loads(cn): [(memory, data cycles)] of a group's
    resident loads; tiles(cn): its tiles' costs, in order."""
    acc = _Bound()
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
            _add(acc.mwork, tc.mwork, times)
            _add(acc.vwork, tc.vwork, times)
    first, last = per_cn[chunks[0]][0], per_cn[chunks[-1]][-1]
    fill: dict[int, list[Lin]] = {}
    for mem, c in group_loads(chunks[0]) + [(in_mem, first.load)]:
        fill.setdefault(mem, []).append(c)
    acc.fill = {m: _plus(*cs) for m, cs in fill.items()}
    acc.first_mwork = first.mwork
    acc.last_vwork = last.vwork
    acc.drain = {out_mem: last.store}
    return acc.terms(uses_matrix, scale)


def conv_bound(node: Node, m: conv_emit.ConvMapping, ctx: CodegenContext,
               sample: int | None, g: conv_geometry.ConvGeometry | None = None) -> int:
    """Lower bound of estimate_step(conv_emit.step(node, m, ctx), sample=sample)."""
    return conv_terms(node, m, ctx, sample, g).evaluate(ctx.arch)


def conv_terms(node: Node, m: conv_emit.ConvMapping, ctx: CodegenContext,
               sample: int | None, g: conv_geometry.ConvGeometry | None = None) -> Terms:
    """conv_bound's arch-free terms."""
    g = g if g is not None else conv_geometry.geometry(node, ctx)
    if m.order.input_resident:
        return _conv_input_resident_terms(node, m, ctx, sample, g)
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    xsz, ysz = x.itemsize, y.itemsize
    vector = conv_emit.on_vector(g, m)
    chunks = [min(m.chunk, g.cout - c0) for c0 in range(0, g.cout, m.chunk)]
    row_tiles = [(oy, min(m.rows, g.oh - oy)) for _ in range(g.n)
                 for oy in range(0, g.oh, m.rows)]
    ng, nt = _groups_tiles(len(chunks), len(row_tiles), sample)
    subs = None if g.depthwise else conv_geometry.sub_convs(g)
    windows = [(rows, g.in_rows(oy0, rows)[1]) for oy0, rows in row_tiles[:nt]]
    cyc = _Bound.cycles
    wmem = ctx.consts.memory

    def group_loads(cn: int) -> list:
        return [(wmem, cyc(wmem, g.weight_bytes(cn) + 12 * cn))]

    def tiles(cn: int) -> list[_TileCost]:
        cl = cn if g.depthwise else g.c
        out = []
        for rows, in_rows in windows:
            pixels = rows * g.ow
            mwork: Lin = _ZERO
            if g.depthwise:
                if vector:
                    vwork = _plus(_vec(pixels * cn * g.kh * g.kw), _vec(pixels * cn))
                else:
                    mwork = _gemm(pixels, cn, g.kh * g.kw)
                    vwork = _vec(pixels * cn)  # REQUANT
            else:
                cg = conv_geometry.per_conv(g, cn)
                mwork = _times(_plus(*[_gemm(pixels, cg, g.k_run(sc.bh * sc.bw * g.cin_g))
                                       for sc in subs]), cn // cg)
                vwork = _vec(pixels * cn)  # REQUANT
            out.append(_TileCost(cyc(x.memory, in_rows * g.w * cl * xsz), mwork, vwork,
                                 cyc(y.memory, pixels * cn * ysz)))
        return out

    return _assemble(chunks[:ng], nt, group_loads, tiles, x.memory, y.memory, not vector,
                     _scale(len(row_tiles), len(chunks), ng * nt, sample))


def _conv_input_resident_terms(node: Node, m: conv_emit.ConvMapping, ctx: CodegenContext,
                               sample: int | None, g: conv_geometry.ConvGeometry) -> Terms:
    """conv_terms of the input-resident orders (conv_emit.ConvOrder.INPUT / INPUT_STREAM): a
    group per row stripe loads its input rows (group 0 also every chunk's weights for INPUT,
    and the parameter table); a tile per chunk (INPUT_STREAM: loading its weights)."""
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    wmem = ctx.consts.memory
    chunks = [min(m.chunk, g.cout - c0) for c0 in range(0, g.cout, m.chunk)]
    stripes = [(oy, min(m.rows, g.oh - oy)) for _ in range(g.n) for oy in range(0, g.oh, m.rows)]
    ng, nt = _groups_tiles(len(stripes), len(chunks), sample)
    subs = conv_geometry.sub_convs(g)
    streamed = m.order is conv_emit.ConvOrder.INPUT_STREAM
    acc = _Bound()
    cyc = _Bound.cycles
    fill: dict[int, list[Lin]] = {}
    work: dict[tuple[int, int], tuple[Lin, Lin]] = {}  # (rows, cn) -> matrix, vector work
    first = last = None
    for j in range(ng):
        oy0, rows = stripes[j]
        loads = [(x.memory, cyc(x.memory, g.in_rows(oy0, rows)[1] * g.w * g.c * x.itemsize))]
        if j == 0:
            if not streamed:
                loads.append((wmem, cyc(wmem, g.weight_bytes(g.cout))))
            loads.append((wmem, cyc(wmem, 12 * g.cout)))
        for mem, c in loads:
            acc.xfer(0, mem, c)
            if j == 0:
                fill.setdefault(mem, []).append(c)
        pixels = rows * g.ow
        for t in range(nt):
            cn = chunks[t]
            if (rows, cn) not in work:
                cg = conv_geometry.per_conv(g, cn)
                work[rows, cn] = (_times(_plus(*[_gemm(pixels, cg,
                                                       g.k_run(sc.bh * sc.bw * g.cin_g))
                                                 for sc in subs]), cn // cg), _vec(pixels * cn))
            mwork, vwork = work[rows, cn]
            if streamed:
                c = cyc(wmem, g.weight_bytes(cn))
                acc.xfer(0, wmem, c)
                if j == 0 and t == 0:
                    fill.setdefault(wmem, []).append(c)
            store = cyc(y.memory, pixels * cn * y.itemsize)
            acc.xfer(1, y.memory, store)
            _add(acc.mwork, mwork)
            _add(acc.vwork, vwork)
            first = first if first is not None else mwork
            last = (vwork, store)
    acc.fill = {mem: _plus(*cs) for mem, cs in fill.items()}
    acc.first_mwork = first if first is not None else _ZERO
    if last is not None:
        acc.last_vwork = last[0]
        acc.drain = {y.memory: last[1]}
    return acc.terms(True, _scale(len(chunks), len(stripes), ng * nt, sample))


@dataclass(frozen=True)
class _Work:
    """One tile of any step: its loads and stores [(memory, data cycles)] and its matrix and
    vector work."""

    loads: tuple[tuple[int, Lin], ...] = ()
    mwork: Lin = _ZERO
    vwork: Lin = _ZERO
    stores: tuple[tuple[int, Lin], ...] = ()


def _general(run: list[tuple[list[tuple[int, Lin]], list[_Work]]], uses_matrix: bool,
             scale: float | None) -> Terms:
    """The bound of the groups run (`run`: per group its resident loads [(memory, data
    cycles)], one transfer each, and its tiles run, in order; each group runs one tile at
    least), as _Bound.terms sums them."""
    acc = _Bound()
    tiles_run: dict[_Work, int] = {}  # (a tile's sums are counted once per time it runs)
    for loads, tiles in run:
        for mem, c in loads:
            acc.xfer(0, mem, c)
        for tw in tiles:
            tiles_run[tw] = tiles_run.get(tw, 0) + 1
    for tw, times in tiles_run.items():
        for mem, c in tw.loads:
            acc.xfer(0, mem, c, times)
        for mem, c in tw.stores:
            acc.xfer(1, mem, c, times)
        _add(acc.mwork, tw.mwork, times)
        _add(acc.vwork, tw.vwork, times)
    first, last = run[0][1][0], run[-1][1][-1]
    fill: dict[int, list[Lin]] = {}
    for mem, c in run[0][0] + list(first.loads):
        fill.setdefault(mem, []).append(c)
    acc.fill = {mem: _plus(*cs) for mem, cs in fill.items()}
    acc.first_mwork = first.mwork
    acc.last_vwork = last.vwork
    drain: dict[int, list[Lin]] = {}
    for mem, c in last.stores:
        drain.setdefault(mem, []).append(c)
    acc.drain = {mem: _plus(*cs) for mem, cs in drain.items()}
    return acc.terms(uses_matrix, scale)


def chain_bound(chain: fused_geometry.FusedChain, m: fused_geometry.FusedMapping, ctx: CodegenContext,
                sample: int | None, geoms: tuple | None = None) -> int:
    """Lower bound of estimate_step(fused_emit.step(chain, m, ctx), sample=sample): the same
    tiles in the same groups (the step's tile order, fused_order.order), each tile's
    instructions at the bounds of the module docstring (CONV and a DWCONV on MATRIX at the
    GEMM fold formula, REQUANT / COPY / ELTWISE / a DWCONV on VECTOR at latency plus lane
    work, each transfer at its data cycles)."""
    return chain_terms(chain, m, ctx, sample, geoms).evaluate(ctx.arch)


def chain_terms(chain: fused_geometry.FusedChain, m: fused_geometry.FusedMapping, ctx: CodegenContext,
                sample: int | None, geoms: tuple | None = None) -> Terms:
    """chain_bound's arch-free terms."""
    geo = fused_geometry.ChainGeometry(chain, m, ctx, geoms)
    g1, g2, g3 = geo.g1, geo.g2, geo.g3
    groups, hosts = fused_order.order(fused_order.tile_plan(chain, geo))
    kinds = fused_order.TileKind
    cyc = _Bound.cycles
    wmem = ctx.consts.memory

    def mem_of(name: str) -> int:
        return ctx.tensor(name).memory

    loads_of: dict[tuple[int, int], tuple[int, Lin]] = {}  # (member, chunk) -> its load

    def wl(g, cn: int) -> tuple[int, Lin]:
        key = (id(g), cn)  # (g1, g2, g3 live for the whole call)
        got = loads_of.get(key)
        if got is None:
            got = loads_of[key] = (wmem, cyc(wmem, g.weight_bytes(cn) + 12 * cn))
        return got

    xmem = mem_of((chain.conv if chain.conv is not None else chain.dw).inputs[0])
    ymem = mem_of(chain.last.name)
    rmem = mem_of(chain.residual) if chain.residual is not None else 0
    memo: dict[tuple, _Work] = {}
    rows_in: dict[int, Lin] = {}  # stripe -> the data cycles of its conv input rows' load

    def hosted(i: int) -> Lin:
        c = rows_in.get(i)
        if c is None:
            c = rows_in[i] = cyc(xmem, geo.conv_window(geo.stripes[i])[1] * g1.w * g1.c)
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
        stores: list[tuple[int, Lin]] = []
        mwork: list[Lin] = []
        vwork: list[Lin] = []
        if tl.kind is kinds.P:
            pix, cout = st.rows * g3.ow, g3.cout
            mwork.append(_gemm(pix, cout, g3.c))
            vwork.append(_vec(pix * cout))
            if chain.add is not None:
                loads.append((rmem, cyc(rmem, pix * cout)))
                vwork.append(_vec(pix * cout))
            stores.append((ymem, cyc(ymem, pix * cout)))
        elif tl.kind is not kinds.EMPTY:
            cn = geo.chunks[tl.chunk][1]
            if tl.kind in (kinds.CONV, kinds.CONV_DW):
                if st.new:
                    mwork.append(_gemm(st.new * g1.ow, cn, g1.kh * g1.kw * g1.c))
                    vwork.append(_vec(st.new * g2.w * cn))
                if st.moved >= 0:
                    vwork.append(_vec(cn * st.keep * g2.w))
            if tl.kind is not kinds.CONV:
                if g1 is None:
                    loads.append((xmem, cyc(xmem, st.n * g2.w * cn)))
                pix = st.rows * g2.ow
                if chain.halo_conv:  # CONV over all channels, REQUANT, store
                    mwork.append(_gemm(pix, g2.cout, g2.kh * g2.kw * cn))
                    vwork.append(_vec(pix * g2.cout))
                    stores.append((ymem, cyc(ymem, pix * g2.cout)))
                elif chain.pooled:  # POOL, no requantisation
                    vwork.append(_vec(pix * cn * g2.kh * g2.kw))
                elif geo.dw_matrix:
                    mwork.append(_gemm(pix, cn, g2.kh * g2.kw))
                else:
                    vwork.append(_vec(pix * cn * g2.kh * g2.kw))
                if not chain.pooled and not chain.halo_conv:
                    vwork.append(_vec(pix * cn))
                if g3 is None and not chain.halo_conv:
                    stores.append((ymem, cyc(ymem, pix * cn)))
        out = memo[key] = _Work(tuple(loads), _plus(*mwork), _plus(*vwork), tuple(stores))
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
    run_tiles = sum(len(t) for _, t in run)
    scale = None
    if sample is not None and run_tiles:
        counts = [len(g) for g in groups[:ng]]
        scale = sum(counts) / len(counts) * len(groups) / run_tiles
    return _general(run, True, scale)


class Bounds:
    """Lower bounds for the candidates of one unit (its geometry computed once, on first
    need); `memo`: (mapping, sample) -> Terms, shared by the searches of units with the same
    signature (on any NPU: terms are arch-free; tessel.schedule.search)."""

    def __init__(self, unit: Any, ctx: CodegenContext, memo: dict | None = None):
        self.unit, self.ctx = unit, ctx
        self.memo = memo if memo is not None else {}
        self.available = isinstance(unit, fused_geometry.FusedChain) or (
            isinstance(unit, Node) and unit.op is Op.QCONV2D)
        self._geoms: Any = None

    def terms(self, mapping: Any, sample: int | None) -> Terms:
        key = (mapping, sample)
        got = self.memo.get(key)
        if got is None:
            unit, ctx = self.unit, self.ctx
            if isinstance(unit, fused_geometry.FusedChain):
                if self._geoms is None:
                    self._geoms = fused_geometry.geometries(unit, ctx)
                got = chain_terms(unit, mapping, ctx, sample, self._geoms)
            else:
                if self._geoms is None:
                    self._geoms = conv_geometry.geometry(unit, ctx)
                got = conv_terms(unit, mapping, ctx, sample, self._geoms)
            self.memo[key] = got
        return got

    def __call__(self, mapping: Any, sample: int | None) -> int | None:
        if not self.available:
            return None
        return self.terms(mapping, sample).evaluate(self.ctx.arch)

