"""Data movement on integer tensors (transpose, concat, slice, pad, expand, upsample_nearest)
as DMA-only steps: DRAM -> SRAM -> DRAM, no vector work (PAD: fill + COPY, see below).

Every op is first described as *pieces*: affine copies `out[out_offset + sum_i j_i * o_i] =
src[src_offset + sum_i j_i * s_i]` over an index box `j` (dims innermost first, strides in
elements; `s_i = 0` broadcasts). A piece is cut into tiles (sub-boxes of its output); a
tile's *source* box is loaded once, packed in source order (DRAM side contiguous as far as
the source allows), and stored in output order with the permutation / broadcast done by the
SRAM-side strides of the store, so each DRAM byte is read once and each output byte written
once, both in their natural order.

Buffers: the vector stage has no instructions, so the framework's rings do not keep the
DMA_IN -> DMA_OUT buffer alive until its store is done (VECTOR frees the input slot as soon as
it has passed the tile on). Tiles therefore rotate over their own `in_depth + out_depth`
buffers: tile t's load waits (through the rings) until the store of tile t - in_depth -
out_depth has completed, which is the last tile that used its buffer.

PAD uses the vector engine and the rings as they are: the pad value is written once per step
to one SRAM element (ELTWISE ADD with both input multipliers 0: the result is the output zero
point, i.e. the value); each output tile gets its border by COPYs from that element (source
stride 0) and the loaded part of the input by a COPY, and is stored whole and contiguously
(no scattered border stores, whose overlapping boxes the DMA would serialise).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessel.errors import TesselCompileError
from tessel.ir import Layout, Node, Op
from tessel.ir.ops import slice_len
from tessel.isa import Instruction, Opcode
from tessel.isa.fields import DType as IsaDType
from tessel.isa.fields import EltOp
from tessel.ops import dma
from tessel.ops.context import (
    ISA_DTYPE,
    CodegenContext,
    DramTensor,
    PlacedConstants,
    SramPlan,
    StepConstants,
    align,
    const_addresses,
)
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

MAX_DIM = dma.MAX_DIM
Dim = tuple[int, int, int]  # (count, src/ext stride, out/sram stride) in elements


@dataclass(frozen=True)
class Piece:
    """out[out_offset + j.o] = src[src_offset + j.s] over the box of `dims` (innermost
    first)."""

    src: str
    src_offset: int
    out_offset: int
    dims: tuple[Dim, ...]


@dataclass(frozen=True)
class MoveMapping:
    tile_bytes: int  # SRAM bytes of one tile buffer
    depth: int  # ring depth of the input and output stages (buffers: 2 * depth)

    def __str__(self) -> str:
        return f"dma tile={self.tile_bytes}B buffers={2 * self.depth}"


# ---------------------------------------------------------------- pieces of each op


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-order array."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _piece(src: str, src_off: int, out_off: int, counts: Sequence[int],
           src_strides: Sequence[int], out_strides: Sequence[int]) -> Piece | None:
    """A piece from outer-first lists; None when the box is empty."""
    if any(c == 0 for c in counts):
        return None
    dims = tuple((c, s, o) for c, s, o in zip(counts, src_strides, out_strides, strict=True))
    return Piece(src, src_off, out_off, canonical(tuple(reversed(dims))))


def canonical(dims: Sequence[Dim], limit: int | None = None) -> tuple[Dim, ...]:
    """Drop unit dims and merge neighbours that are contiguous on both sides (innermost
    first); merged extents stay <= `limit` when given."""
    out: list[Dim] = []
    for c, s, o in dims:
        if c == 1:
            continue
        if out:
            pc, ps, po = out[-1]
            if s == ps * pc and o == po * pc and (limit is None or pc * c <= limit):
                out[-1] = (pc * c, ps, po)
                continue
        out.append((c, s, o))
    return tuple(out) or ((1, 0, 0),)


def pieces(node: Node, ctx: CodegenContext) -> list[Piece]:
    """The op (not pad) as affine copies into its output."""
    g = ctx.graph
    a = node.attr_map
    out_shape = node.type.shape
    ostr = c_strides(out_shape)
    x = node.inputs[0]
    xshape = g.type_of(x).shape
    xstr = c_strides(xshape)
    found: list[Piece | None]
    if node.op is Op.TRANSPOSE:
        perm = a["perm"]
        found = [_piece(x, 0, 0, out_shape, [xstr[p] for p in perm], ostr)]
    elif node.op is Op.SLICE:
        ax = a["axis"] % len(xshape)
        start, _, step = slice(a["start"], a["end"], a["step"]).indices(xshape[ax])
        n = slice_len(xshape[ax], a["start"], a["end"], a["step"])
        src = [s * (step if i == ax else 1) for i, s in enumerate(xstr)]
        found = [_piece(x, start * xstr[ax] if n else 0, 0, out_shape, src, ostr)]
    elif node.op is Op.EXPAND:
        lead = len(out_shape) - len(xshape)
        src = [0 if i < lead or xshape[i - lead] == 1 else xstr[i - lead]
               for i in range(len(out_shape))]
        found = [_piece(x, 0, 0, out_shape, src, ostr)]
    elif node.op is Op.CONCAT:
        ax = a["axis"] % len(out_shape)
        found, at = [], 0
        for name in node.inputs:
            shape = g.type_of(name).shape
            found.append(_piece(name, 0, at * ostr[ax], shape, c_strides(shape), ostr))
            at += shape[ax]
    elif node.op is Op.UPSAMPLE_NEAREST:
        found = [_upsample_piece(x, xshape, a["scale"], a["layout"])]
    else:
        raise TesselCompileError(f"{node} at {node.loc}: not a data movement op")
    return [p for p in found if p is not None]


def _upsample_piece(x: str, xshape: Sequence[int], scale: Sequence[int], layout: Layout
                    ) -> Piece | None:
    """Output viewed as [N, H, fh, W, fw, C] (NHWC) or [N, C, H, fh, W, fw] (NCHW)."""
    fh, fw = scale
    xs = c_strides(xshape)
    if layout is Layout.NHWC:
        n, h, w, c = xshape
        counts = [n, h, fh, w, fw, c]
        src = [xs[0], xs[1], 0, xs[2], 0, xs[3]]
    else:
        n, c, h, w = xshape
        counts = [n, c, h, fh, w, fw]
        src = [xs[0], xs[1], xs[2], 0, xs[3], 0]
    return _piece(x, 0, 0, counts, src, c_strides(counts))


# ---------------------------------------------------------------- tiles


@dataclass(frozen=True)
class Tile:
    src: str
    src_offset: int
    out_offset: int
    dims: tuple[Dim, ...]  # (count, src stride, out stride), innermost first


def tiles_of(p: Piece, budget: int) -> list[Tile]:
    """Cut a piece into tiles whose source box has at most `budget` elements and whose dims
    are <= MAX_DIM: the innermost dims whole, a chunk of the next, the outer ones one by one."""
    dims = p.dims
    weight = [c if s != 0 else 1 for c, s, _ in dims]
    k, inner = 0, 1
    while k < len(dims) and dims[k][0] <= MAX_DIM and inner * weight[k] <= budget:
        inner *= weight[k]
        k += 1
    if k == len(dims):
        return [Tile(p.src, p.src_offset, p.out_offset, dims)]
    n, s, o = dims[k]
    chunk = min(n, MAX_DIM, budget // inner if weight[k] > 1 else MAX_DIM)
    if chunk < 1:
        raise TesselCompileError(f"tile budget {budget} below one row of {inner} elements")
    out = []
    outer = dims[k + 1:]
    for idx in itertools.product(*(range(c) for c, _, _ in reversed(outer))):
        so = sum(i * d[1] for i, d in zip(idx, reversed(outer), strict=True))
        oo = sum(i * d[2] for i, d in zip(idx, reversed(outer), strict=True))
        for j0 in range(0, n, chunk):
            cn = min(chunk, n - j0)
            out.append(Tile(p.src, p.src_offset + so + j0 * s, p.out_offset + oo + j0 * o,
                            dims[:k] + ((cn, s, o),)))
    return out


def _sram_strides(dims: Sequence[Dim]) -> list[int]:
    """SRAM element strides of a tile's source box packed in source order (0: broadcast)."""
    order = sorted((i for i, (_, s, _) in enumerate(dims) if s != 0), key=lambda i: dims[i][1])
    out, acc = [0] * len(dims), 1
    for i in order:
        out[i] = acc
        acc *= dims[i][0]
    return out


def transfers(op: Opcode, t: DramTensor, offset: int, sram: int, dims: Sequence[Dim]
              ) -> list[Instruction]:
    """DMA instructions moving the box `dims` (count, ext stride, sram stride; innermost
    first), merged where contiguous; beyond four dims, the smallest outer ones are looped
    (one instruction each), keeping the innermost (contiguous) dim in every instruction."""
    dims = canonical(dims, MAX_DIM)
    looped = sorted(range(1, len(dims)), key=lambda i: (dims[i][0], -i))[:max(0, len(dims) - 4)]
    head = tuple(d for i, d in enumerate(dims) if i not in looped)
    rest = [dims[i] for i in sorted(looped)]
    out = []
    for idx in itertools.product(*(range(c) for c, _, _ in rest)):
        eo = sum(i * d[1] for i, d in zip(idx, rest, strict=True))
        so = sum(i * d[2] for i, d in zip(idx, rest, strict=True))
        out.append(dma.pattern(op, t, offset + eo, sram + so * t.itemsize, head))
    return out


def tile_work(tile: Tile, y: DramTensor, x: DramTensor, buf: int) -> TileWork:
    """Load the tile's source box into `buf` (packed in source order), store it in output
    order."""
    ss = _sram_strides(tile.dims)
    src_order = sorted((i for i, d in enumerate(tile.dims) if d[1] != 0),
                       key=lambda i: tile.dims[i][1])
    loads = transfers(Opcode.DMA_LOAD, x, tile.src_offset, buf,
                      [(tile.dims[i][0], tile.dims[i][1], ss[i]) for i in src_order])
    stores = transfers(Opcode.DMA_STORE, y, tile.out_offset, buf,
                       [(c, o, m) for (c, _, o), m in zip(tile.dims, ss, strict=True)])
    return TileWork(loads, [], [], stores)


# ---------------------------------------------------------------- pad


def _boxes(shape: Sequence[int], budget: int) -> list[tuple[tuple[int, int], ...]]:
    """Output tiles of at most `budget` elements as (start, count) per axis (outer first):
    the innermost axes whole, a chunk of the next, the outer ones one index at a time."""
    r = len(shape)
    k, inner = r, 1
    while k > 0 and inner * shape[k - 1] <= budget and shape[k - 1] <= MAX_DIM:
        inner *= shape[k - 1]
        k -= 1
    if k == 0:
        return [tuple((0, n) for n in shape)]
    chunk = min(shape[k - 1], MAX_DIM, max(1, budget // inner))
    out = []
    for idx in itertools.product(*(range(n) for n in shape[:k - 1])):
        for j0 in range(0, shape[k - 1], chunk):
            out.append(tuple((i, 1) for i in idx) + ((j0, min(chunk, shape[k - 1] - j0)),)
                       + tuple((0, n) for n in shape[k:]))
    return out


def _fill_slabs(out: int, counts: Sequence[int], at: Sequence[int], n_in: Sequence[int],
                fill: int, dt: IsaDType) -> list[Instruction]:
    """COPYs of the one-element pad value at `fill` (source stride 0) over the tile `counts`
    minus its interior box (`at`, `n_in`): per axis, the slabs before and after the interior
    (outer axes restricted to the interior, inner axes whole); disjoint, covering the border."""
    r, tstr = len(counts), c_strides(counts)
    if min(n_in) == 0:
        return [_copy(fill, out, [(c, 0, t) for c, t in zip(counts[::-1], tstr[::-1],
                                                             strict=True)], dt)]
    found = []
    for k in range(r):
        for start, n in ((0, at[k]), (at[k] + n_in[k], counts[k] - at[k] - n_in[k])):
            if n == 0:
                continue
            cnt = [n_in[i] if i < k else (n if i == k else counts[i]) for i in range(r)]
            first = [at[i] if i < k else (start if i == k else 0) for i in range(r)]
            off = sum(f * t for f, t in zip(first, tstr, strict=True))
            found.append(_copy(fill, out + off * dt.nbytes,
                               [(cnt[i], 0, tstr[i]) for i in range(r - 1, -1, -1)], dt))
    return found


def _copy(src: int, dst: int, dims: Sequence[Dim], dt: IsaDType) -> Instruction:
    """COPY of the box `dims` (count, src stride, dst stride in elements, innermost first)."""
    isz = dt.nbytes
    dims = canonical(dims, MAX_DIM)
    if len(dims) > 4:
        raise TesselCompileError(f"pad: {len(dims)}-D copy does not fit one COPY")
    f: dict[str, int] = {}
    for k, (c, ss, ds) in enumerate(dims):
        f.update({f"d{k}": c, f"src_s{k}": ss * isz, f"dst_s{k}": ds * isz})
    return Instruction.make(Opcode.COPY, dtype=dt, src_addr=src, dst_addr=dst, **f)


def _pad_tile(node: Node, ctx: CodegenContext, box: tuple[tuple[int, int], ...], inp: int,
              out: int, fill: int) -> TileWork:
    """Load the input part of the output box, fill the border, copy the part in, store."""
    xshape = ctx.graph.type_of(node.inputs[0]).shape
    pads = node.attr("pads")
    dt = ISA_DTYPE[node.type.dtype]
    counts = [c for _, c in box]
    tstr, xstr, ostr = c_strides(counts), c_strides(xshape), c_strides(node.type.shape)
    lo = [max(st - pads[2 * i], 0) for i, (st, _) in enumerate(box)]
    n_in = [max(min(st + c - pads[2 * i], n) - low, 0)
            for i, ((st, c), n, low) in enumerate(zip(box, xshape, lo, strict=True))]
    at = [low + pads[2 * i] - st for i, (low, (st, _)) in enumerate(zip(lo, box, strict=True))]
    rev = range(len(counts) - 1, -1, -1)
    stores = transfers(Opcode.DMA_STORE, ctx.tensor(node.name),
                       sum(box[i][0] * ostr[i] for i in rev), out,
                       [(counts[i], ostr[i], tstr[i]) for i in rev])
    vector = [] if n_in == counts else _fill_slabs(out, counts, at, n_in, fill, dt)
    if min(n_in) == 0:
        return TileWork([], [], vector, stores)
    pstr = c_strides(n_in)  # the loaded part, packed
    loads = transfers(Opcode.DMA_LOAD, ctx.tensor(node.inputs[0]),
                      sum(lo[i] * xstr[i] for i in rev), inp,
                      [(n_in[i], xstr[i], pstr[i]) for i in rev])
    dst = out + sum(a * t for a, t in zip(at, tstr, strict=True)) * dt.nbytes
    vector.append(_copy(inp, dst, [(n_in[i], pstr[i], tstr[i]) for i in rev], dt))
    return TileWork(loads, [], vector, stores)


def _pad_step(node: Node, m: MoveMapping, ctx: CodegenContext) -> StepWork:
    isz = node.type.dtype.itemsize
    boxes = _boxes(node.type.shape, m.tile_bytes // isz)
    plan = SramPlan(ctx.arch, f"{node}")
    inp = plan.sram(m.depth * m.tile_bytes, "input tiles")
    out = plan.sram(m.depth * m.tile_bytes, "output tiles")
    fill = plan.sram(16, "pad value")
    v = _fill_value(node)
    dt = ISA_DTYPE[node.type.dtype]
    setup = [Instruction.make(Opcode.ELTWISE, op=EltOp.ADD, a_dtype=dt, b_dtype=dt,
                              out_dtype=dt, a_addr=fill, b_addr=fill, out_addr=fill,
                              out_zp=v, act_min=v, act_max=v)]  # multipliers 0: y = v

    def group_fn(j: int, slot: int) -> GroupWork:
        return GroupWork([], [], setup, len(boxes))

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        return _pad_tile(node, ctx, boxes[t], inp + s.inp * m.tile_bytes,
                         out + s.out * m.tile_bytes, fill)

    shape = StepShape(uses_matrix=False, in_depth=m.depth, out_depth=m.depth, group_depth=2)
    return StepWork(shape, 1, group_fn, tile_fn)


# ---------------------------------------------------------------- emitter protocol


def _fill_value(node: Node) -> int:
    """The pad value attribute is already in the integer domain (the zero point for 0.0)."""
    lo, hi = node.type.dtype.bounds
    return int(min(max(round(node.attr("value")), lo), hi))


def candidates(node: Node, ctx: CodegenContext) -> list[MoveMapping]:
    """Tile sizes from the largest that fits (all buffers in SRAM) down by factors of 4, with
    single (2 buffers) or double (4 buffers) buffering."""
    _check(node, ctx)
    isz = node.type.dtype.itemsize
    if node.op is Op.PAD:
        biggest = math.prod(node.type.shape)
    else:
        biggest = max((math.prod(c for c, s, _ in p.dims if s != 0)
                       for p in pieces(node, ctx)), default=1)
    out = []
    for depth in (1, 2):
        room = (ctx.arch.onchip.sram_bytes - 16) // (2 * depth) // 16 * 16
        size = min(room, align(biggest * isz))
        for k in range(4):
            if k and size < 1024:
                break
            out.append(MoveMapping(size, depth))
            size = align(size // 4)
    return out


def _check(node: Node, ctx: CodegenContext) -> None:
    if node.op is Op.UPSAMPLE_NEAREST and len(node.type.shape) != 4:
        raise TesselCompileError(f"{node} at {node.loc}: upsample_nearest needs a 4-D tensor")
    for name in node.inputs:
        if ctx.graph.type_of(name).dtype != node.type.dtype:
            raise TesselCompileError(f"{node} at {node.loc}: %{name} has another dtype")


def constants(node: Node, m: MoveMapping, ctx: CodegenContext) -> StepConstants:
    """None: constant operands (e.g. of a concat) are data constants, placed as DRAM tensors
    before the steps (schedule/plan.py place_data_constants)."""
    return StepConstants()


def step(node: Node, m: MoveMapping, ctx: CodegenContext, placed: PlacedConstants | None = None
         ) -> StepWork:
    """DMA-only step (PAD: with a fill + COPY per tile): one group, tiles in piece order."""
    const_addresses(placed, 0)  # reads no constants
    if node.op is Op.PAD:
        return _pad_step(node, m, ctx)
    budget = m.tile_bytes // node.type.dtype.itemsize
    tiles = [t for p in pieces(node, ctx) for t in tiles_of(p, budget)]
    nbuf = 2 * m.depth
    bufs = SramPlan(ctx.arch, f"{node}").sram(nbuf * m.tile_bytes, "tile buffers")

    def group_fn(j: int, slot: int) -> GroupWork:
        return GroupWork([], [], [], len(tiles))

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        tile = tiles[t]  # own buffer rotation: see the module docstring
        return tile_work(tile, ctx.tensor(node.name), ctx.tensor(tile.src),
                         bufs + (t % nbuf) * m.tile_bytes)

    shape = StepShape(uses_matrix=False, in_depth=m.depth, out_depth=m.depth, group_depth=2)
    return StepWork(shape, 1, group_fn, tile_fn)
