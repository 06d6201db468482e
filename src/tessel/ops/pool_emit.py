"""Pooling and means on the vector engine.

max_pool2d (int8 / int16 NHWC) -> POOL MAX (padding never wins; clamp = the type's range);
qavg_pool2d -> POOL AVG (rounding_div over the valid positions, clamped to act_min/act_max).
Tiling as for depthwise conv: channel chunks (groups) x output-row tiles, each tile loading
the input rows it needs (halo included; rows outside the input are the POOL's implicit
padding, which matches the op's since a tile only clips at the input's own edges).

qmean -> REDUCE SUM (in_zp subtracted, int32) + REQUANT src=SRAM PER_TENSOR (multiplier,
shift, out_zp, clamp; bias 0). The input is viewed as [K1, R, K2] (kept, reduced, kept; the
reduced axes must be adjacent once unit dims are dropped). Groups = kept tiles [k1, k2];
tiles = chunks of R. When R is split, every chunk's REDUCE writes an int32 partial row and
the last tile REDUCEs the partial rows (the REDUCE sums exactly and saturates once), so the
result is `sat32(total)` bit for bit as long as no partial saturates: chunks are limited to
`rt * max|x - in_zp| <= INT32_MAX` (32768 int16 or 8.4 M int8 elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselCompileError
from tessel.ir import Layout, Node, Op
from tessel.isa import SPECS, Instruction, Opcode
from tessel.isa.fields import AccSrc, ParamMode, PoolOp, ReduceOp
from tessel.isa.fields import DType as IsaDType
from tessel.isa.limits import MAX_TILE_HW
from tessel.isa.window import Window
from tessel.ops import dma
from tessel.ops.context import (
    ISA_DTYPE,
    CodegenContext,
    PlacedConstants,
    SramPlan,
    StepConstants,
    align,
    const_addresses,
)
from tessel.ops.movement_emit import canonical
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

INT32_MAX = 2**31 - 1
MAX_DIM = dma.MAX_DIM


# ---------------------------------------------------------------- POOL


@dataclass(frozen=True)
class PoolMapping:
    rows: int  # output rows per tile
    chunk: int  # channels per group
    double_buffer: bool = True

    def __str__(self) -> str:
        return f"rows={self.rows} ch_chunk={self.chunk}" + ("" if self.double_buffer
                                                              else " single-buffered")


@dataclass(frozen=True)
class PoolGeometry(Window):
    """A pool's window and its input n x h x w x c (NHWC)."""

    h: int
    w: int
    c: int
    n: int = 1  # batch: images are independent, each tile belongs to one

    def in_rows(self, oy0: int, rows: int) -> tuple[int, int, int]:
        """(first input row, row count, tile pad_top) of output rows [oy0, oy0 + rows)."""
        return self.rows_for(oy0, rows, self.h)

    def max_in_rows(self, rows: int) -> int:
        """The most input rows a tile of `rows` output rows reads."""
        return self.max_rows(rows, self.h)


def pool_refusal(node: Node, graph) -> str | None:
    """Why the POOL instruction cannot run this pool (its shape rules), or None. Asked before
    partitioning (`registry.npu_refusal`) and by `pool_geometry`, so both agree."""
    a = node.attr_map
    if a["layout"] is not Layout.NHWC:
        return "the NPU pools NHWC tensors (run the to_nhwc pass)"
    if node.type.dtype.itemsize not in (1, 2) or not node.type.dtype.is_int:
        return f"POOL takes int8 or int16, got {node.type.dtype}"
    f = SPECS[Opcode.POOL].field
    kh, kw = a["kernel"]
    oh, ow = node.type.shape[1:3]
    sh, sw = (1 if oh == 1 else a["stride"][0]), (1 if ow == 1 else a["stride"][1])
    dh, dw = a.get("dilation") or (1, 1)
    pt, pl, _, _ = a["padding"]
    w = graph.type_of(node.inputs[0]).shape[2] if graph is not None else ow
    limits = [(max(kh, kw) <= f("kh").max, f"kernel > {f('kh').max}"),
              (max(sh, sw, dh, dw) <= f("stride_h").max, f"stride / dilation > {f('stride_h').max}"),
              (max(pt, pl) <= f("pad_top").max, f"padding > {f('pad_top').max}"),
              (max(w, ow) <= f("in_w").max, f"width > {f('in_w').max}")]
    return next((f"{what} is beyond the POOL instruction" for ok, what in limits if not ok), None)


def pool_geometry(node: Node, ctx: CodegenContext) -> PoolGeometry:
    a = node.attr_map
    why = pool_refusal(node, ctx.graph)
    if why is not None:
        raise TesselCompileError(f"{node} at {node.loc}: {why}")
    n, h, w, c = ctx.graph.type_of(node.inputs[0]).shape
    _, oh, ow, _ = node.type.shape
    kh, kw = a["kernel"]
    # a single output row / column never steps: any stride gives the same window (global pools)
    sh, sw = (1 if oh == 1 else a["stride"][0]), (1 if ow == 1 else a["stride"][1])
    dh, dw = a.get("dilation") or (1, 1)
    pt, pl, _, _ = a["padding"]
    return PoolGeometry(kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, oh=oh, ow=ow,
                        h=h, w=w, c=c, n=n)


def pool_candidates(node: Node, ctx: CodegenContext) -> list[PoolMapping]:
    """Power-of-two row tiles x channel chunks (all channels; 16, 4 or 1 vector widths only where
    all channels do not fit), double-buffered where that fits (single-buffered otherwise)."""
    g = pool_geometry(node, ctx)
    lanes = ctx.arch.vector.lanes
    chunks = [g.c] + [k * lanes for k in (16, 4, 1) if k * lanes < g.c]
    out = []
    for r in sorted({min(g.oh, r) for r in (1, 2, 4, 8, 16, 32, 64, 128)}):
        for ch in chunks:
            m = _fitting(node, ctx, g, r, ch)
            if m is not None:
                out.append(m)
                if m.double_buffer and g.oh > 8:  # few row tiles: chunks pipeline instead
                    break
    return out


def _fitting(node: Node, ctx: CodegenContext, g: PoolGeometry, rows: int, ch: int
             ) -> PoolMapping | None:
    for db in (True, False):
        m = PoolMapping(rows, ch, db)
        try:
            _pool_layout(g, m, ctx, node)
        except TesselCompileError:
            continue
        return m
    return None


def _pool_layout(g: PoolGeometry, m: PoolMapping, ctx: CodegenContext, node: Node
                 ) -> tuple[int, int, int, int]:
    """(input base, input slot bytes, output base, output slot bytes)."""
    if g.max_in_rows(m.rows) > MAX_TILE_HW or m.rows > MAX_TILE_HW:
        raise TesselCompileError("tile taller than POOL allows")
    depth = 2 if m.double_buffer else 1
    isz = node.type.dtype.itemsize
    plan = SramPlan(ctx.arch, f"{node}")
    ib = align(g.max_in_rows(m.rows) * g.w * m.chunk * isz)
    ob = align(m.rows * g.ow * m.chunk * isz)
    return plan.sram(depth * ib, "input tile"), ib, plan.sram(depth * ob, "output tile"), ob


def pool_step(node: Node, m: PoolMapping, ctx: CodegenContext) -> StepWork:
    g = pool_geometry(node, ctx)
    lay = _pool_layout(g, m, ctx, node)
    chunks = [(c0, min(m.chunk, g.c - c0)) for c0 in range(0, g.c, m.chunk)]
    row_tiles = [(b, oy, min(m.rows, g.oh - oy)) for b in range(g.n)
                 for oy in range(0, g.oh, m.rows)]

    def group_fn(j: int, slot: int) -> GroupWork:
        return GroupWork([], [], [], len(row_tiles))

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        return _pool_tile(node, g, lay, chunks[j], row_tiles[t], s, ctx)

    depth = 2 if m.double_buffer else 1
    shape = StepShape(uses_matrix=False, in_depth=depth, out_depth=depth, group_depth=2)
    return StepWork(shape, len(chunks), group_fn, tile_fn)


def _pool_tile(node: Node, g: PoolGeometry, lay: tuple[int, int, int, int],
               chunk: tuple[int, int], rows_tile: tuple[int, int, int], s: Slots,
               ctx: CodegenContext) -> TileWork:
    (c0, cn), (b, oy0, rows) = chunk, rows_tile
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    isz = y.itemsize
    r0, in_rows, pad_top = g.in_rows(oy0, rows)
    iaddr = lay[0] + s.inp * lay[1]
    oaddr = lay[2] + s.out * lay[3]
    load = dma.pattern(Opcode.DMA_LOAD, x, (b * g.h + r0) * g.w * g.c + c0, iaddr,
                       ((cn, 1, 1), (g.w, g.c, cn), (in_rows, g.w * g.c, g.w * cn)))
    if node.op is Op.MAX_POOL2D:
        op, (lo, hi) = PoolOp.MAX, node.type.dtype.bounds
    else:
        op, lo, hi = PoolOp.AVG, node.attr("act_min"), node.attr("act_max")
    pool = Instruction.make(
        Opcode.POOL, op=op, dtype=ISA_DTYPE[node.type.dtype], in_addr=iaddr, in_h=in_rows,
        in_w=g.w, in_stride_h=g.w * cn * isz, in_stride_w=cn * isz, ch=cn, kh=g.kh, kw=g.kw,
        stride_h=g.sh, stride_w=g.sw, dil_h=g.dh, dil_w=g.dw, pad_top=pad_top, pad_left=g.pl,
        out_h=rows, out_w=g.ow, out_addr=oaddr, out_stride_h=g.ow * cn * isz,
        out_stride_w=cn * isz, act_min=lo, act_max=hi)
    store = dma.pattern(Opcode.DMA_STORE, y, (b * g.oh + oy0) * g.ow * g.c + c0, oaddr,
                        ((cn, 1, 1), (rows * g.ow, g.c, cn)))
    return TileWork([load], [], [pool], [store])


# ---------------------------------------------------------------- QMEAN


@dataclass(frozen=True)
class MeanMapping:
    k1: int  # outer kept elements per group
    k2: int  # inner kept elements per group
    r: int  # reduced elements per tile
    double_buffer: bool = True

    def __str__(self) -> str:
        return f"kept={self.k1}x{self.k2} reduce_chunk={self.r}" + (
            "" if self.double_buffer else " single-buffered")


def _mean_dims(shape: tuple[int, ...], axes: set[int]) -> tuple[int, int, int] | None:
    """(K1, R, K2): the input as kept x reduced x kept (unit dims dropped); None when the
    reduced axes are not adjacent."""
    kinds = [(i in axes, d) for i, d in enumerate(shape) if d != 1]
    first = next((i for i, (red, _) in enumerate(kinds) if red), len(kinds))
    last = max((i for i, (red, _) in enumerate(kinds) if red), default=first - 1)
    if any(not red for red, _ in kinds[first:last + 1]):
        return None
    k1 = math.prod(d for _, d in kinds[:first])
    r = math.prod(d for _, d in kinds[first:last + 1])
    k2 = math.prod(d for _, d in kinds[last + 1:])
    return k1, r, k2


def mean_refusal(node: Node, graph) -> str | None:
    """A qmean reduces adjacent axes (one REDUCE over a kept x reduced x kept view)."""
    if graph is None:
        return None
    shape = graph.type_of(node.inputs[0]).shape
    axes = {a % len(shape) for a in node.attr("axes")}
    if _mean_dims(shape, axes) is None:
        return f"a mean over non-adjacent axes {sorted(axes)} of {list(shape)}"
    return None


def mean_view(node: Node, ctx: CodegenContext) -> tuple[int, int, int]:
    """(K1, R, K2): the input as kept x reduced x kept (unit dims dropped)."""
    why = mean_refusal(node, ctx.graph)
    if why is not None:
        raise TesselCompileError(f"{node} at {node.loc}: {why}")
    shape = ctx.graph.type_of(node.inputs[0]).shape
    dims = _mean_dims(shape, {a % len(shape) for a in node.attr("axes")})
    assert dims is not None
    return dims


def _max_chunk(node: Node, ctx: CodegenContext) -> int:
    """Longest reduction chunk whose int32 partial sum can never saturate."""
    lo, hi = ctx.graph.type_of(node.inputs[0]).dtype.bounds
    zp = node.attr("in_zp")
    return min(MAX_DIM, INT32_MAX // max(abs(lo - zp), abs(hi - zp), 1))


def mean_candidates(node: Node, ctx: CodegenContext) -> list[MeanMapping]:
    k1, r, k2 = mean_view(node, ctx)
    lanes = ctx.arch.vector.lanes
    k2s = {k2} | {lanes * f for f in (4, 16) if lanes * f < k2}
    k1s = {-(-k1 // f) for f in (1, 4, 16)}
    rs = {r} | {-(-r // f) for f in (2, 4, 16, 64, 256) if f < r}
    out = []
    for a in sorted(k1s, reverse=True):
        for b in sorted(k2s, reverse=True):
            fits = [c for c in sorted(rs, reverse=True) if _mean_fits(node, ctx, a, b, c, r)]
            for c in fits[:2]:
                out.append(MeanMapping(a, b, c, True))
    return out[:40] or _single_buffered(node, ctx, k1, r, k2)


def _single_buffered(node: Node, ctx: CodegenContext, k1: int, r: int, k2: int
                     ) -> list[MeanMapping]:
    """Last resort: one element of the inner kept axis, the longest reduction chunk that fits
    single-buffered."""
    for c in sorted({r} | {-(-r // f) for f in (2, 4, 16, 64, 256, 1024) if f < r},
                    reverse=True):
        m = MeanMapping(1, 1, c, False)
        if c <= MAX_DIM and (c == r or c <= _max_chunk(node, ctx)):
            try:
                _mean_layout(node, ctx, m, r)
            except TesselCompileError:
                continue
            return [m]
    return []


def _mean_fits(node: Node, ctx: CodegenContext, a: int, b: int, c: int, r: int) -> bool:
    if a * b > MAX_DIM or c > MAX_DIM or (c < r and c > _max_chunk(node, ctx)):
        return False
    if -(-r // c) > MAX_DIM:
        return False
    try:
        _mean_layout(node, ctx, MeanMapping(a, b, c, True), r)
    except TesselCompileError:
        return False
    return True


@dataclass(frozen=True)
class _MeanLayout:
    params: int
    inp: int
    inp_stride: int
    partial: int
    total: int
    out: int
    out_stride: int


def _mean_layout(node: Node, ctx: CodegenContext, m: MeanMapping, r: int) -> _MeanLayout:
    depth = 2 if m.double_buffer else 1
    isz = ctx.graph.type_of(node.inputs[0]).dtype.itemsize
    kept = m.k1 * m.k2
    plan = SramPlan(ctx.arch, f"{node}")
    params = plan.sram(12, "requant parameters")
    ib = align(m.k1 * m.r * m.k2 * isz)
    inp = plan.sram(depth * ib, "input tile")
    n_r = -(-r // m.r)
    partial = plan.sram(4 * kept * n_r, "partial sums") if n_r > 1 else 0
    total = plan.sram(4 * kept, "sums")
    ob = align(kept * node.type.dtype.itemsize)
    out = plan.sram(depth * ob, "output tile")
    return _MeanLayout(params, inp, ib, partial, total, out, ob)


def mean_constants(node: Node) -> StepConstants:
    """A mean's one constant blob: its REQUANT parameters (bias 0, multiplier, shift)."""
    return StepConstants((np.array([0, node.attr("multiplier"), node.attr("shift")],
                                   "<i4").tobytes(),))


def mean_step(node: Node, m: MeanMapping, ctx: CodegenContext,
              placed: PlacedConstants | None = None) -> StepWork:
    k1, r, k2 = mean_view(node, ctx)
    lay = _mean_layout(node, ctx, m, r)
    groups = [(a0, min(m.k1, k1 - a0), b0, min(m.k2, k2 - b0))
              for a0 in range(0, k1, m.k1) for b0 in range(0, k2, m.k2)]
    chunks = [(c0, min(m.r, r - c0)) for c0 in range(0, r, m.r)]
    (addr,) = const_addresses(placed, 1)

    def group_fn(j: int, slot: int) -> GroupWork:
        loads = [] if j else dma.contiguous(Opcode.DMA_LOAD, ctx.consts.memory, addr,
                                            lay.params, 12)
        return GroupWork([], loads, [], len(chunks))  # parameters stay for every group

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        return _mean_tile(node, ctx, lay, (k1, r, k2), groups[j], chunks, t, s)

    depth = 2 if m.double_buffer else 1
    shape = StepShape(uses_matrix=False, in_depth=depth, out_depth=depth, group_depth=2)
    return StepWork(shape, len(groups), group_fn, tile_fn)


def _mean_tile(node: Node, ctx: CodegenContext, lay: _MeanLayout, view: tuple[int, int, int],
               group: tuple[int, int, int, int], chunks: list[tuple[int, int]], t: int,
               s: Slots) -> TileWork:
    (_, r, k2), (a0, an, b0, bn), (c0, cn) = view, group, chunks[t]
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    isz = x.itemsize
    dt = ISA_DTYPE[x.dtype]
    iaddr = lay.inp + s.inp * lay.inp_stride
    load = dma.pattern(Opcode.DMA_LOAD, x, (a0 * r + c0) * k2 + b0, iaddr,
                       _merge(((bn, 1, 1), (cn, k2, bn), (an, r * k2, cn * bn))))
    kept = an * bn
    split = len(chunks) > 1
    dst = lay.partial + 4 * kept * t if split else lay.total
    vector = [Instruction.make(
        Opcode.REDUCE, op=ReduceOp.SUM, dtype=dt, axis=1, d0=bn, d1=cn, d2=an,
        src_addr=iaddr, src_s0=isz, src_s1=bn * isz, src_s2=cn * bn * isz,
        in_zp=node.attr("in_zp"), dst_addr=dst, dst_s0=4, dst_s1=4 * bn)]
    if t < len(chunks) - 1:
        return TileWork([load], [], vector, [])
    if split:  # the partial rows, summed exactly then saturated once
        vector.append(Instruction.make(
            Opcode.REDUCE, op=ReduceOp.SUM, dtype=IsaDType.I32, axis=1, d0=kept,
            d1=len(chunks), src_addr=lay.partial, src_s0=4, src_s1=4 * kept,
            dst_addr=lay.total, dst_s0=4))
    oaddr = lay.out + s.out * lay.out_stride
    vector.append(Instruction.make(
        Opcode.REQUANT, src=AccSrc.SRAM, src_addr=lay.total, src_stride=4 * kept, rows=1,
        ch=kept, out_dtype=ISA_DTYPE[y.dtype], dst_addr=oaddr, dst_stride=kept * y.itemsize,
        param_addr=lay.params, param_mode=ParamMode.PER_TENSOR, out_zp=node.attr("out_zp"),
        act_min=node.attr("act_min"), act_max=node.attr("act_max")))
    store = dma.pattern(Opcode.DMA_STORE, y, a0 * k2 + b0, oaddr,
                        _merge(((bn, 1, 1), (an, k2, bn))))
    return TileWork([load], [], vector, [store])


def _merge(dims: tuple[tuple[int, int, int], ...]) -> tuple[tuple[int, int, int], ...]:
    """Drop unit dims and merge dims contiguous on both sides (innermost first)."""
    return canonical(dims, MAX_DIM)


# ---------------------------------------------------------------- emitter protocol


def candidates(node: Node, ctx: CodegenContext) -> list[PoolMapping | MeanMapping]:
    if node.op is Op.QMEAN:
        return list(mean_candidates(node, ctx))
    return list(pool_candidates(node, ctx))


def constants(node: Node, m: PoolMapping | MeanMapping, ctx: CodegenContext) -> StepConstants:
    """The step's constant blobs: a mean's parameters; a pool reads none."""
    return mean_constants(node) if isinstance(m, MeanMapping) else StepConstants()


def step(node: Node, m: PoolMapping | MeanMapping, ctx: CodegenContext,
         placed: PlacedConstants | None = None) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    if isinstance(m, MeanMapping):
        return mean_step(node, m, ctx, placed)
    const_addresses(placed, 0)  # a pool reads no constants
    return pool_step(node, m, ctx)
