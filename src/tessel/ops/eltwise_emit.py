"""qadd / qsub / qmul / requantize -> ELTWISE, lut -> LUT, on the vector engine over chunks.

The output's iteration space is canonicalised first: every operand gets element strides over
the output dims (0 where numpy broadcasting repeats it), size-1 dims are dropped and adjacent
dims merged wherever every tensor is contiguous across them. Tiles cut that space at one dim
(`EltMapping.split`) into chunks of `chunk` indices, everything inside the split dim whole, so
that a tile is one ELTWISE / LUT of at most three dims.

Operands: an operand as large as the output streams through the input ring tile by tile
(packed densely in SRAM, its broadcast dims at stride 0); a small broadcast operand (e.g. a
per-channel vector) and the LUT table are loaded once per step by the group's param loads into
a fixed region that keeps their DRAM layout. Constant operands live in the constant pool
(weights memory) and are read like activations. REQUANTIZE is the golden model's ELTWISE ADD
with b multiplier 0 (b reads a's own elements; MBQM(., 0, 0) == 0), so it needs no constant.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselCompileError
from tessel.ir import DType, Node, Op
from tessel.isa import Instruction, Opcode
from tessel.isa.fields import EltOp, LutMode, Rounding
from tessel.isa.limits import MAX_EXTENT
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
from tessel.ops.quantise import rounding_of
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

MAX_DIM = MAX_EXTENT  # extent fields of ELTWISE / LUT / DMA
RESIDENT_BYTES = 16384  # broadcast operands up to this size stay in SRAM for the whole step
MAX_TILES = 512  # finer chunkings only cost compile time and per-tile DMA latency
_ELT_OPS = {Op.QADD: EltOp.ADD, Op.QSUB: EltOp.SUB, Op.QMUL: EltOp.MUL,
            Op.REQUANTIZE: EltOp.ADD}


@dataclass(frozen=True)
class EltMapping:
    split: int  # merged dim cut into chunks (dims inside it are whole in every tile)
    chunk: int  # indices of the split dim per tile
    double_buffer: bool = True

    def __str__(self) -> str:
        return (f"split=dim{self.split} chunk={self.chunk}"
                + ("" if self.double_buffer else " single-buffered"))


def is_const(name: str, ctx: CodegenContext) -> bool:
    """Whether operand `name` is a constant (read from the constant pool)."""
    return ctx.graph.constant_value(name) is not None


def const_blob(name: str, ctx: CodegenContext) -> bytes | None:
    """A constant operand's bytes as the pool holds them (its dtype, little-endian, C order),
    or None when `name` is an activation."""
    value = ctx.graph.constant_value(name)
    if value is None:
        return None
    t = ctx.graph.type_of(name)
    return np.ascontiguousarray(np.asarray(value).astype(t.dtype.numpy.newbyteorder("<"))
                                ).tobytes()


def const_operand(name: str, ctx: CodegenContext, addresses: Iterator[int]
                  ) -> DramTensor | None:
    """A constant operand as a tensor in the constant pool at the next of `addresses` (where
    its const_blob was placed), or None when `name` is an activation (look it up with
    ctx.tensor; no address is taken)."""
    if not is_const(name, ctx):
        return None
    t = ctx.graph.type_of(name)
    return DramTensor(ctx.consts.memory, next(addresses), t.shape, t.dtype)


# ---------------------------------------------------------------------------- iteration space


@dataclass(frozen=True)
class Space:
    """Merged output dims (outer -> inner) and each tensor's element strides over them;
    `strides[-1]` is the output's."""

    shape: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]


def _c_strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def space(out_shape: tuple[int, ...], shapes: list[tuple[int, ...]]) -> Space:
    """Canonical iteration space of an output broadcast from operands of `shapes`."""
    rank = len(out_shape)
    per = []
    for shp in [*shapes, out_shape]:
        full = (1,) * (rank - len(shp)) + tuple(shp)
        cs = _c_strides(full)
        per.append([0 if f == 1 and o != 1 else s for f, o, s in zip(full, out_shape, cs,
                                                                        strict=True)])
    dims = [(d, [p[i] for p in per]) for i, d in enumerate(out_shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for d, st in dims:
        if merged:
            pd, pst = merged[-1]
            if all(ps == s * d for ps, s in zip(pst, st, strict=True)):
                merged[-1] = (pd * d, st)
                continue
        merged.append((d, st))
    if not merged:
        merged = [(1, [1] * len(per))]
    return Space(tuple(d for d, _ in merged),
                 tuple(tuple(st[k] for _, st in merged) for k in range(len(per))))


# ---------------------------------------------------------------------------- the op


@dataclass(frozen=True)
class _Op:
    """What a node reads and writes."""

    inputs: tuple[str, ...]  # streamed or resident operands (LUT: x only)
    dtypes: tuple[DType, ...]
    out_dtype: DType
    sp: Space
    resident: tuple[bool, ...]
    table: str | None  # LUT table constant


def _describe(node: Node, ctx: CodegenContext) -> _Op:
    if node.op not in (*_ELT_OPS, Op.LUT):
        raise TesselCompileError(f"{node}: not an element-wise op")
    names = node.inputs[:1] if node.op in (Op.LUT, Op.REQUANTIZE) else node.inputs[:2]
    types = [ctx.graph.type_of(n) for n in names]
    out = node.type
    sp = space(out.shape, [t.shape for t in types])
    resident = tuple(t.numel < out.numel and t.nbytes <= RESIDENT_BYTES for t in types)
    return _Op(tuple(names), tuple(t.dtype for t in types), out.dtype, sp, resident,
               node.inputs[1] if node.op is Op.LUT else None)


@dataclass(frozen=True)
class _Tile:
    origin: tuple[int, ...]  # index of the tile's first element in each merged dim
    dims: tuple[int, ...]  # tile extents, outer -> inner (<= 3)


def _tiles(sp: Space, m: EltMapping) -> list[_Tile]:
    outer = sp.shape[:m.split]
    inner = sp.shape[m.split + 1:]
    d = sp.shape[m.split]
    out = []
    for idx in np.ndindex(*outer) if outer else [()]:
        for p in range(0, d, m.chunk):
            out.append(_Tile((*idx, p) + (0,) * len(inner), (min(m.chunk, d - p), *inner)))
    return out


def _tile_bytes(sp: Space, k: int, m: EltMapping, itemsize: int) -> int:
    """Dense SRAM bytes of tensor k's part of a full tile (broadcast dims count once)."""
    st = sp.strides[k][m.split:]
    dims = (m.chunk, *sp.shape[m.split + 1:])
    return itemsize * math.prod(d for d, s in zip(dims, st, strict=True) if s != 0)


# ---------------------------------------------------------------------------- SRAM layout


@dataclass(frozen=True)
class _Layout:
    resident: tuple[int, ...]  # per input: fixed-region address (-1 when streamed)
    table: int
    inp: int
    inp_stride: int
    inp_parts: tuple[int, ...]  # per input: offset inside an input slot (-1 when resident)
    out: int
    out_stride: int
    depth: int


def _layout(op: _Op, m: EltMapping, ctx: CodegenContext, node: Node) -> _Layout:
    sp = op.sp
    inner = sp.shape[m.split + 1:]
    if len(inner) > 2 or m.chunk > MAX_DIM or any(d > MAX_DIM for d in inner):
        raise TesselCompileError(f"{node}: tile {m} exceeds the 3-D / 16-bit extents")
    depth = 2 if m.double_buffer else 1
    plan = SramPlan(ctx.arch, f"{node}")
    table = -1
    if op.table is not None:
        table = plan.sram(2 * _table_entries(op), "LUT table")
    res, parts, off = [], [], 0
    for k, (dt, r) in enumerate(zip(op.dtypes, op.resident, strict=True)):
        if r:
            t = ctx.graph.type_of(op.inputs[k])
            res.append(plan.sram(t.nbytes, f"resident operand {k}"))
            parts.append(-1)
        else:
            res.append(-1)
            parts.append(off)
            off += align(_tile_bytes(sp, k, m, dt.itemsize))
    inp = plan.sram(depth * off, "input tiles")
    obytes = align(_tile_bytes(sp, len(op.inputs), m, op.out_dtype.itemsize))
    out = plan.sram(depth * obytes, "output tiles")
    return _Layout(tuple(res), table, inp, off, tuple(parts), out, obytes, depth)


def _table_entries(op: _Op) -> int:
    return (LutMode.I8_256 if op.dtypes[0] is DType.I8 else LutMode.I16_513).entries


# ---------------------------------------------------------------------------- candidates


def candidates(node: Node, ctx: CodegenContext) -> list[EltMapping]:
    """For each admissible split dim: the largest chunk that fits and a few smaller ones (more
    tiles overlap DMA and the vector engine better; fewer pay fewer DMA latencies)."""
    op = _describe(node, ctx)
    sp = op.sp
    r = len(sp.shape)
    out: list[EltMapping] = []
    for s in range(max(0, r - 3), r):
        for db in (True, False):
            best = _largest_chunk(op, s, db, ctx, node)
            if best == 0:
                continue
            out += [EltMapping(s, c, db) for c in sorted({max(1, best >> k) for k in range(6)},
                                                         reverse=True)]
            break
    few = [m for m in out if _tile_count(sp, m) <= MAX_TILES]
    return few or sorted(out, key=lambda m: _tile_count(sp, m))[:1]


def _tile_count(sp: Space, m: EltMapping) -> int:
    return math.prod(sp.shape[:m.split]) * -(-sp.shape[m.split] // m.chunk)


def _largest_chunk(op: _Op, s: int, db: bool, ctx: CodegenContext, node: Node) -> int:
    """Largest chunk of dim s that fits (binary search), 0 if none."""
    lo, hi = 0, min(op.sp.shape[s], MAX_DIM)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            _layout(op, EltMapping(s, mid, db), ctx, node)
        except TesselCompileError:
            hi = mid - 1
        else:
            lo = mid
    return lo


# ---------------------------------------------------------------------------- the step


def constants(node: Node, m: EltMapping, ctx: CodegenContext) -> StepConstants:
    """The step's constant blobs in read order: the LUT table, then each constant operand."""
    op = _describe(node, ctx)
    blobs = [_table(node, op, ctx)] if op.table is not None else []
    blobs += [b for n in op.inputs if (b := const_blob(n, ctx)) is not None]
    return StepConstants(tuple(blobs))


def step(node: Node, m: EltMapping, ctx: CodegenContext, placed: PlacedConstants | None = None
         ) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    op = _describe(node, ctx)
    lay = _layout(op, m, ctx, node)
    count = (op.table is not None) + sum(is_const(n, ctx) for n in op.inputs)
    addrs = iter(const_addresses(placed, count))
    table_addr = next(addrs) if op.table is not None else 0
    consts = [const_operand(n, ctx, addrs) for n in op.inputs]
    tiles = _tiles(op.sp, m)

    def tensor(k: int) -> DramTensor:
        return consts[k] or ctx.tensor(op.inputs[k])

    def group_fn(g: int, slot: int) -> GroupWork:
        loads: list[Instruction] = []
        setup: list[Instruction] = []
        if op.table is not None:
            n = _table_entries(op)
            loads += dma.contiguous(Opcode.DMA_LOAD, ctx.consts.memory, table_addr, lay.table,
                                    2 * n)
            setup.append(Instruction.make(Opcode.LUT_LOAD, lut_base=0, count=n,
                                          src_addr=lay.table))
        for k, addr in enumerate(lay.resident):
            if addr >= 0:
                t = tensor(k)
                loads += dma.contiguous(Opcode.DMA_LOAD, t.memory, t.address, addr, t.nbytes)
        return GroupWork([], loads, setup, len(tiles))

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        tile = tiles[t]
        islot = lay.inp + s.inp * lay.inp_stride
        loads, operands = [], []
        for k in range(len(op.inputs)):
            if lay.resident[k] >= 0:
                operands.append(_resident_operand(op, k, tile, m, lay.resident[k]))
            else:
                ins, opd = _streamed_operand(op, k, tile, m, tensor(k), islot + lay.inp_parts[k])
                loads.append(ins)
                operands.append(opd)
        oaddr = lay.out + s.out * lay.out_stride
        out_st = _dense_strides(op.sp.strides[-1][m.split:], tile.dims, op.out_dtype.itemsize)
        compute = _compute(node, op, tile, operands, (oaddr, out_st))
        y = ctx.tensor(node.name)
        store = dma.pattern(Opcode.DMA_STORE, y, _offset(op.sp, -1, tile), oaddr,
                            _dma_dims(op.sp.strides[-1][m.split:], tile.dims, out_st, y.itemsize))
        return TileWork(loads, [], [compute], [store])

    def tile_key(g: int, t: int) -> tuple[int, ...]:
        """Tiles of the same dims have the same instructions up to addresses (the operands'
        strides, dtypes and residence are the step's)."""
        return tiles[t].dims

    shape = StepShape(uses_matrix=False, in_depth=lay.depth, out_depth=lay.depth,
                      group_depth=1)
    return StepWork(shape, 1, group_fn, tile_fn, tile_key)


Operand = tuple[int, tuple[int, ...]]  # SRAM address, byte strides per tile dim (outer first)


def _offset(sp: Space, k: int, tile: _Tile) -> int:
    return sum(i * s for i, s in zip(tile.origin, sp.strides[k], strict=True))


def _dense_strides(st: tuple[int, ...], dims: tuple[int, ...], itemsize: int
                   ) -> tuple[int, ...]:
    """Byte strides of a dense SRAM copy over the dims where the tensor varies (0 elsewhere)."""
    out, acc = [], itemsize
    for d, s in zip(reversed(dims), reversed(st), strict=True):
        out.append(acc if s != 0 else 0)
        acc *= d if s != 0 else 1
    return tuple(reversed(out))


def _dma_dims(st: tuple[int, ...], dims: tuple[int, ...], sram_st: tuple[int, ...],
              itemsize: int) -> tuple[tuple[int, int, int], ...]:
    """dma.pattern dims (innermost first, in elements) over the dims where the tensor varies."""
    out = tuple((d, s, ss // itemsize) for d, s, ss in zip(reversed(dims), reversed(st),
                                                           reversed(sram_st), strict=True)
                if s != 0 and d > 1)
    return out or ((1, 1, 1),)


def _resident_operand(op: _Op, k: int, tile: _Tile, m: EltMapping, base: int) -> Operand:
    isz = op.dtypes[k].itemsize
    st = op.sp.strides[k][m.split:]
    return base + _offset(op.sp, k, tile) * isz, tuple(s * isz for s in st)


def _streamed_operand(op: _Op, k: int, tile: _Tile, m: EltMapping, t: DramTensor, sram: int
                      ) -> tuple[Instruction, Operand]:
    st = op.sp.strides[k][m.split:]
    sram_st = _dense_strides(st, tile.dims, t.itemsize)
    load = dma.pattern(Opcode.DMA_LOAD, t, _offset(op.sp, k, tile), sram,
                       _dma_dims(st, tile.dims, sram_st, t.itemsize))
    return load, (sram, sram_st)


def _iter_fields(prefix: str, st: tuple[int, ...]) -> dict[str, int]:
    """`{prefix}_s0..` for the (<= 3) tile dims, innermost first."""
    return {f"{prefix}_s{i}": s for i, s in enumerate(reversed(st))}


def _compute(node: Node, op: _Op, tile: _Tile, operands: list[Operand], out: Operand
             ) -> Instruction:
    dims = {f"d{i}": d for i, d in enumerate(reversed(tile.dims))}
    if node.op is Op.LUT:
        (src, sst), (dst, dst_st) = operands[0], out
        mode = LutMode.I8_256 if op.dtypes[0] is DType.I8 else LutMode.I16_513
        return Instruction.make(Opcode.LUT, lut_mode=mode, lut_base=0, src_addr=src,
                                dst_addr=dst, **dims, **_iter_fields("src", sst),
                                **_iter_fields("dst", dst_st))
    a = node.attr_map
    (aa, ast) = operands[0]
    (ba, bst), bdt = (operands[0], op.dtypes[0]) if len(operands) == 1 else (operands[1],
                                                                               op.dtypes[1])
    fields = dict(op=_ELT_OPS[node.op], a_dtype=ISA_DTYPE[op.dtypes[0]], b_dtype=ISA_DTYPE[bdt],
                  out_dtype=ISA_DTYPE[op.out_dtype], a_addr=aa, b_addr=ba, out_addr=out[0],
                  out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"], **dims,
                  **_iter_fields("a", ast), **_iter_fields("b", bst),
                  **_iter_fields("out", out[1]))
    fields.update(_rescale(node))
    return Instruction.make(Opcode.ELTWISE, **fields)


def _rescale(node: Node) -> dict[str, int]:
    """The ELTWISE zero points and multipliers of the op (golden model's semantics)."""
    a = node.attr_map
    if node.op is Op.REQUANTIZE:  # ADD with b multiplier 0; output multiplier exactly 1.0
        return dict(a_zp=a["in_zp"], b_zp=0, left_shift=0, a_mult=a["multiplier"],
                    a_shift=a["shift"], b_mult=0, b_shift=0, out_mult=1 << 30, out_shift=1)
    common = dict(a_zp=a["a_zp"], b_zp=a["b_zp"], out_mult=a["out_multiplier"],
                  out_shift=a["out_shift"])
    if rounding_of(a) == Rounding.SINGLE:  # absent otherwise: DOUBLE, the field's default
        common["rounding"] = Rounding.SINGLE
    if node.op is Op.QMUL:
        return common
    return dict(common, left_shift=a["left_shift"], a_mult=a["a_multiplier"],
                a_shift=a["a_shift"], b_mult=a["b_multiplier"], b_shift=a["b_shift"])


def _table(node: Node, op: _Op, ctx: CodegenContext) -> bytes:
    """The LUT table as int16 words (the LUT memory's entries)."""
    n = _table_entries(op)
    if n > ctx.arch.onchip.lut_entries:
        raise TesselCompileError(f"{node}: a {n}-entry table does not fit the LUT memory "
                                 f"({ctx.arch.onchip.lut_entries} entries)")
    table = np.asarray(ctx.const(node.inputs[1])).astype("<i2")
    if table.shape != (n,):
        raise TesselCompileError(f"{node}: LUT table must have {n} entries, got {table.shape}")
    return table.tobytes()
