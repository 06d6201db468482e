"""qlinear / qmatmul -> MATMUL on the matrix engine, then REQUANT on the vector engine.

Both ops are one GEMM per batch entry, out[M, N] = A[M, K] @ B[K, N]: qlinear has A = x
flattened to [M, K], B = w^T (a constant, weight zero point 0) and per-channel requant
parameters; qmatmul has both operands in DRAM (zero points on both sides), numpy-broadcast
leading dims (one GEMM per output batch entry, e.g. per attention head) and one per-tensor
(multiplier, shift) with bias 0.

Loop orders (`GemmMapping.order`):
* WEIGHTS: a group per (batch, N chunk) keeps B[K, cols] resident; tiles run over M rows.
* INPUT: a group per (batch, M rows) keeps A[rows, K] resident; tiles stream B's N chunks.
* STREAM: nothing resident; a tile per (M rows, K chunk) loads both operands and MATMULs with
  ACCUMULATE into the M-tile's accumulator, REQUANT after the last K chunk. Only offered when
  a whole reduction does not fit.
Requant parameters are loaded once per step (group 0's param loads) into a fixed SRAM region.
Constants (qlinear) are packed in read order: the parameters of all channels N chunk by N chunk
([bias, q31, shift] of the chunk, 12 bytes per channel, so chunk j0's table is at 12 * j0;
16 with an int64 bias for int16 inputs),
then w^T chunk by chunk as [K, cols] row-major (a K chunk of it is contiguous). int4 weights
are stored two per byte (MATMUL ``b_type`` I4), each row of a chunk padded to an even count
(``Gemm.b_row``) so that every row, hence every K chunk, starts on a byte.

A qlinear with int16 input (symmetric, int64 bias; docs/numerics.md) runs the same loop orders
with MATMUL ``in_type`` I16: A takes two bytes per element in SRAM and DMA, each result a wide
accumulator entry (two entries, so a tile's accumulator holds half the rows), and REQUANT reads
them with ``acc_width`` WIDE.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselCompileError
from tessel.ir import DType, Graph, Node, Op
from tessel.isa import Instruction, Opcode
from tessel.isa.costs import gemm_cycles
from tessel.isa.fields import AccMode, AccSrc, InType, ParamMode
from tessel.isa.instrs.matrix import WeightType
from tessel.isa.instrs.vector import requant_param_bytes, requant_params
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
    require_int4,
)
from tessel.ops.conv_weights import pack_int4
from tessel.ops.eltwise_emit import const_blob, const_operand, is_const
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

MAX_FIELD = MAX_EXTENT  # m, n, k and acc_stride are 16-bit fields
KEEP = 6  # candidates passed on to the exact (per-tile) estimate


class Order(enum.Enum):
    WEIGHTS = "weights-resident"
    INPUT = "input-resident"
    STREAM = "streamed"


@dataclass(frozen=True)
class GemmMapping:
    order: Order
    rows: int  # M rows per tile (WEIGHTS, STREAM) or per group (INPUT)
    cols: int  # N columns per chunk
    kc: int  # reduction per MATMUL (K unless STREAM)
    double_buffer: bool = True

    def __str__(self) -> str:
        k = f" k_chunk={self.kc}" if self.order is Order.STREAM else ""
        return (f"{self.order.value} rows={self.rows} cols={self.cols}{k}"
                + ("" if self.double_buffer else " single-buffered"))


@dataclass(frozen=True)
class Batch:
    """Element offsets of one GEMM's A, B and output in their tensors."""

    a: int
    b: int
    out: int


@dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    batches: tuple[Batch, ...]
    a_zp: int
    b_zp: int
    per_channel: bool  # qlinear: per-channel parameters, B = w^T pre-tiled in the pool
    wbits: int = 8  # bits of a stored element of B: 8, or 4 (a qlinear's int4 weights)
    in_type: InType = InType.I8  # A's type: int16 (a qlinear's) accumulates wide

    @property
    def macs(self) -> int:
        return len(self.batches) * self.m * self.n * self.k

    @property
    def a_size(self) -> int:
        """Bytes of an element of A."""
        return self.in_type.nbytes

    @property
    def entries(self) -> int:
        """Accumulator entries of one result (a wide one: two)."""
        return self.in_type.entries

    @property
    def param_bytes(self) -> int:
        """Bytes of one channel's requant parameters (int64 bias for int16 A)."""
        return requant_param_bytes(self.in_type.acc_width)

    @property
    def b_type(self) -> WeightType:
        return WeightType.I4 if self.wbits == 4 else WeightType.I8

    def b_row(self, cols: int) -> int:
        """Elements of one stored row of a B chunk `cols` wide (int4: an even count)."""
        return cols + cols % 2 if self.wbits == 4 else cols

    def b_bytes(self, rows: int, cols: int) -> int:
        """Bytes of `rows` stored rows of a B chunk `cols` wide."""
        return rows * self.b_row(cols) * self.wbits // 8


def refusal(node: Node, graph: Graph | None = None) -> str | None:
    """The matrix engine multiplies int8 by int8 (a linear layer's weights may be int4: they
    enter the array as the int8 they equal), and a linear layer's int16 input by its weights
    (into the wide accumulator)."""
    if graph is None:
        return None
    kinds = [graph.type_of(i).dtype for i in node.inputs[:2]]
    linear = node.op is Op.QLINEAR
    weights = (DType.I8, DType.I4) if linear else (DType.I8,)
    inputs = (DType.I8, DType.I16) if linear else (DType.I8,)
    if kinds[0] not in inputs or kinds[1] not in weights:
        return (f"{kinds[0].value} x {kinds[1].value} operands (the matrix engine multiplies "
                "int8 or a linear layer's int16 input by int8 / int4 weights)")
    return None


def gemm(node: Node, ctx: CodegenContext) -> Gemm:
    """The GEMM(s) of a qlinear / qmatmul node."""
    a = node.attr_map
    ta = ctx.graph.type_of(node.inputs[0])
    tb = ctx.graph.type_of(node.inputs[1])
    why = refusal(node, ctx.graph)
    if why is not None:
        raise TesselCompileError(f"{node} at {node.loc}: {why}")
    if tb.dtype is DType.I4:
        require_int4(node, ctx)
    if node.op is Op.QLINEAR:
        k = ta.shape[-1]
        in_type = InType.I16 if ta.dtype is DType.I16 else InType.I8
        return Gemm(math.prod(ta.shape[:-1]), tb.shape[0], k, (Batch(0, 0, 0),),
                    a["in_zp"], 0, True, 4 if tb.dtype is DType.I4 else 8, in_type)
    m, k = ta.shape[-2:]
    n = tb.shape[-1]
    lead = node.type.shape[:-2]
    count = math.prod(lead)
    a_idx = _broadcast_index(ta.shape[:-2], lead)
    b_idx = _broadcast_index(tb.shape[:-2], lead)
    batches = tuple(Batch(int(a_idx[i]) * m * k, int(b_idx[i]) * k * n, i * m * n)
                    for i in range(count))
    return Gemm(m, n, k, batches, a["a_zp"], a["b_zp"], False)


def _broadcast_index(shape: tuple[int, ...], lead: tuple[int, ...]) -> np.ndarray:
    """For each output batch entry (C order), the flat batch index of an operand whose leading
    dims `shape` broadcast to `lead`."""
    full = (1,) * (len(lead) - len(shape)) + tuple(shape)
    idx = np.arange(math.prod(full), dtype=np.int64).reshape(full)
    return np.broadcast_to(idx, lead).reshape(-1)


# ---------------------------------------------------------------------------- SRAM layout


@dataclass(frozen=True)
class _Layout:
    params: int  # fixed region, loaded once
    group: int
    group_stride: int
    group_depth: int
    inp: int
    inp_stride: int
    b_in_inp: int  # offset of B inside an input slot (STREAM)
    out: int
    out_stride: int
    acc: int
    acc_stride: int
    depth: int


def _layout(g: Gemm, mp: GemmMapping, ctx: CodegenContext, node: Node) -> _Layout:
    if max(mp.rows, mp.cols, mp.kc) > MAX_FIELD:
        raise TesselCompileError(f"{node}: tile {mp} exceeds a 16-bit MATMUL field")
    depth = 2 if mp.double_buffer else 1
    plan = SramPlan(ctx.arch, f"{node}")
    params = plan.sram(g.param_bytes * (g.n if g.per_channel else 1), "requant parameters")
    ngroups = _group_count(g, mp)
    gdepth = min(depth, ngroups)
    b_in_inp = 0
    asz = g.a_size
    if mp.order is Order.WEIGHTS:
        gbytes, ibytes = align(g.b_bytes(g.k, mp.cols)), align(mp.rows * g.k * asz)
    elif mp.order is Order.INPUT:
        gbytes, ibytes = align(mp.rows * g.k * asz), align(g.b_bytes(g.k, mp.cols))
    else:
        b_in_inp = align(mp.rows * mp.kc * asz)
        gbytes, ibytes = 0, b_in_inp + align(g.b_bytes(mp.kc, mp.cols))
    group = plan.sram(gdepth * gbytes, "resident operand")
    inp = plan.sram(depth * ibytes, "tile operand")
    obytes = align(mp.rows * mp.cols * node.type.dtype.itemsize)
    out = plan.sram(depth * obytes, "output tile")
    entries = mp.rows * mp.cols * g.entries
    if mp.cols * g.entries > MAX_FIELD:
        raise TesselCompileError(f"{node}: tile {mp}'s wide rows exceed a 16-bit acc_stride")
    acc = plan.acc(depth * entries, "accumulators")
    return _Layout(params, group, gbytes, gdepth, inp, ibytes, b_in_inp, out, obytes, acc,
                   entries, depth)


def _group_count(g: Gemm, mp: GemmMapping) -> int:
    per = -(-g.m // mp.rows) if mp.order is Order.INPUT else -(-g.n // mp.cols)
    return len(g.batches) * per


# ---------------------------------------------------------------------------- candidates


def candidates(node: Node, ctx: CodegenContext) -> list[GemmMapping]:
    """Resident-operand mappings (both loop orders, N chunks of the array width, the largest
    few row counts that fit); streamed K chunks only when none of those fits."""
    g = gemm(node, ctx)
    r, c = ctx.arch.matrix.rows, ctx.arch.matrix.cols
    cols = sorted({g.n} | {k * c for k in (1, 2, 4, 8, 16) if k * c < g.n})
    rows = sorted({g.m} | {min(g.m, k * r) for k in (1, 2, 4, 8, 16, 32, 64)}, reverse=True)
    out: list[GemmMapping] = []
    if g.k <= MAX_FIELD:
        for order in (Order.WEIGHTS, Order.INPUT):
            for n in cols:
                for db in (True, False):
                    fit = [m for m in rows if _fits(g, GemmMapping(order, m, n, g.k, db), ctx,
                                                    node)]
                    out += [GemmMapping(order, m, n, g.k, db) for m in fit[:3]]
                    if fit:
                        break
    if not out:
        out = _stream_candidates(g, ctx, node, rows, cols)
    # the exact estimate walks every tile: rank by a closed-form cost, keep the best few
    return sorted(out, key=lambda mp: _rough_cycles(g, mp, ctx, node))[:KEEP]


def _stream_candidates(g: Gemm, ctx: CodegenContext, node: Node, rows: list[int],
                       cols: list[int]) -> list[GemmMapping]:
    r = ctx.arch.matrix.rows
    out = []
    kc = min(g.k, MAX_FIELD)
    while kc >= 1 and len(out) < 6:
        for m in rows[-2:]:
            for n in cols[:2]:
                mp = GemmMapping(Order.STREAM, m, n, kc, True)
                if _fits(g, mp, ctx, node):
                    out.append(mp)
        kc = kc // 2 if kc <= r else -(-kc // 2 // r) * r
    return out


def _rough_cycles(g: Gemm, mp: GemmMapping, ctx: CodegenContext, node: Node) -> float:
    """Closed-form cycles: the busiest of matrix, vector and DMA (bytes over bandwidth plus
    latencies shared by the channels), plus one tile's pipeline fill."""
    arch = ctx.arch
    rows, cols, kc = min(mp.rows, g.m), min(mp.cols, g.n), min(mp.kc, g.k)
    mt, nc, kt = -(-g.m // rows), -(-g.n // cols), -(-g.k // kc)
    nb = len(g.batches)
    sram_bw = arch.derived.sram_bytes_per_cycle
    factor = arch.matrix.int16_pass_factor if g.in_type is InType.I16 else 1
    mm = max(factor * gemm_cycles(rows, cols, kc, arch.matrix.rows, arch.matrix.cols,
                                  arch.matrix.dataflow, arch.matrix.fold_pipelining),
             -(-(kc * cols + rows * kc * g.a_size) // sram_bw))
    out_isz = node.type.dtype.itemsize
    vec = arch.vector.pipeline_latency_cycles + max(
        -(-rows * cols // arch.vector.lanes), -(-rows * cols * out_isz // sram_bw))
    a_reads = {Order.WEIGHTS: nc, Order.INPUT: 1, Order.STREAM: nc}[mp.order]
    b_reads = {Order.WEIGHTS: 1, Order.INPUT: mt, Order.STREAM: mt}[mp.order]
    a_bytes = nb * g.m * g.k * g.a_size * a_reads
    b_bytes = nb * g.k * g.n * g.wbits // 8 * b_reads
    transfers = nb * (mt * nc * (1 + kt * 2 if mp.order is Order.STREAM else 2) + nc + mt)
    amem = arch.offchip[ctx.act_memory]
    bmem = arch.offchip[ctx.consts.memory if g.per_channel else ctx.act_memory]
    dma = (a_bytes / min(amem.bytes_per_cycle, sram_bw) + b_bytes / min(bmem.bytes_per_cycle,
                                                                         sram_bw)
           + nb * g.m * g.n * out_isz / min(amem.bytes_per_cycle, sram_bw)
           + transfers * amem.latency_cycles / arch.dma_channels)
    busy = max(nb * mt * nc * kt * mm, nb * mt * nc * vec, dma)
    return busy + 2 * amem.latency_cycles + mm + vec


def _fits(g: Gemm, mp: GemmMapping, ctx: CodegenContext, node: Node) -> bool:
    try:
        _layout(g, mp, ctx, node)
    except TesselCompileError:
        return False
    return True


# ---------------------------------------------------------------------------- the step


@dataclass(frozen=True)
class _Consts:
    params: int  # pool address of the parameter table(s)
    chunks: tuple[int, ...]  # pool address of each w^T chunk (qlinear)


def _operands(node: Node, g: Gemm) -> tuple[str, ...]:
    """The operands that may be constants read like activations: a, and b of a qmatmul (a
    qlinear's weights are pre-tiled into chunks)."""
    return node.inputs[:1] if g.per_channel else node.inputs[:2]


def constants(node: Node, mp: GemmMapping, ctx: CodegenContext) -> StepConstants:
    """The step's constant blobs in read order: the parameter table(s), w^T chunk by chunk
    (qlinear), then a constant a / b operand."""
    g = gemm(node, ctx)
    blobs = _blobs(node, g, _nchunks(g, mp), ctx)
    blobs += [b for n in _operands(node, g) if (b := const_blob(n, ctx)) is not None]
    return StepConstants(tuple(blobs))


def _nchunks(g: Gemm, mp: GemmMapping) -> list[tuple[int, int]]:
    return [(j0, min(mp.cols, g.n - j0)) for j0 in range(0, g.n, mp.cols)]


def step(node: Node, mp: GemmMapping, ctx: CodegenContext, placed: PlacedConstants | None = None
         ) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    g = gemm(node, ctx)
    lay = _layout(g, mp, ctx, node)
    mtiles = [(i0, min(mp.rows, g.m - i0)) for i0 in range(0, g.m, mp.rows)]
    nchunks = _nchunks(g, mp)
    ktiles = [(k0, min(mp.kc, g.k - k0)) for k0 in range(0, g.k, mp.kc)]
    nw = len(nchunks) if g.per_channel else 0
    addrs = const_addresses(placed, 1 + nw + sum(is_const(n, ctx) for n in _operands(node, g)))
    consts = _Consts(addrs[0], addrs[1:1 + nw])
    rest = iter(addrs[1 + nw:])
    a_const = const_operand(node.inputs[0], ctx, rest)
    b_const = None if g.per_channel else const_operand(node.inputs[1], ctx, rest)
    io = _Io(node, g, lay, consts, ctx, a_const, b_const, mp.cols)
    if mp.order is Order.INPUT:
        groups = [(b, i) for b in g.batches for i in mtiles]
        tiles = [(j, (0, g.k)) for j in nchunks]
    else:
        groups = [(b, j) for b in g.batches for j in nchunks]
        tiles = [(i, k) for i in mtiles for k in ktiles] if mp.order is Order.STREAM \
            else [(i, (0, g.k)) for i in mtiles]

    def group_fn(gi: int, slot: int) -> GroupWork:
        b, part = groups[gi]
        gaddr = lay.group + slot * lay.group_stride
        params = io.load_params() if gi == 0 else []
        if mp.order is Order.WEIGHTS:
            return GroupWork(io.load_b(b, part, (0, g.k), gaddr), params, [], len(tiles))
        if mp.order is Order.INPUT:
            return GroupWork([io.load_a(b, part, (0, g.k), gaddr)], params, [], len(tiles))
        return GroupWork([], params, [], len(tiles))

    def tile_fn(gi: int, t: int, s: Slots) -> TileWork:
        b, part = groups[gi]
        gaddr = lay.group + s.group * lay.group_stride
        iaddr = lay.inp + s.inp * lay.inp_stride
        if mp.order is Order.INPUT:
            (j, kt), i = tiles[t], part
            loads = io.load_b(b, j, kt, iaddr)
            a_addr, b_addr, acc_slot = gaddr, iaddr, s.acc
        elif mp.order is Order.WEIGHTS:
            (i, kt), j = tiles[t], part
            loads = [io.load_a(b, i, kt, iaddr)]
            a_addr, b_addr, acc_slot = iaddr, gaddr, s.acc
        else:
            (i, kt), j = tiles[t], part
            b_addr = iaddr + lay.b_in_inp
            loads = [io.load_a(b, i, kt, iaddr)] + io.load_b(b, j, kt, b_addr)
            a_addr = iaddr
            # the M tile's accumulator alternates with the global M-tile count, so that the
            # acc ring's "free" tokens (one per tile, K chunks included) order its reuse
            acc_slot = (gi * len(mtiles) + t // len(ktiles)) % lay.depth
        acc = lay.acc + acc_slot * lay.acc_stride
        mm = io.matmul(i, j, kt, a_addr, b_addr, acc)
        if kt[0] + kt[1] < g.k:
            return TileWork(loads, [mm], [], [])
        oaddr = lay.out + s.out * lay.out_stride
        return TileWork(loads, [mm], [io.requant(i, j, acc, oaddr)], [io.store(b, i, j, oaddr)])

    shape = StepShape(uses_matrix=True, in_depth=lay.depth, acc_depth=lay.depth,
                      out_depth=lay.depth, group_depth=lay.group_depth)
    return StepWork(shape, len(groups), group_fn, tile_fn)


@dataclass(frozen=True)
class _Io:
    """Instruction builders of one step (DRAM tensors are looked up when a tile is built)."""

    node: Node
    g: Gemm
    lay: _Layout
    consts: _Consts
    ctx: CodegenContext
    a_const: DramTensor | None  # a constant operand (in the pool), else looked up in DRAM
    b_const: DramTensor | None
    cols: int  # N chunk width (every chunk but the last is full)

    def load_params(self) -> list[Instruction]:
        n = self.g.param_bytes * (self.g.n if self.g.per_channel else 1)
        return dma.contiguous(Opcode.DMA_LOAD, self.ctx.consts.memory, self.consts.params,
                              self.lay.params, n)

    def load_a(self, b: Batch, i: tuple[int, int], kt: tuple[int, int], sram: int
               ) -> Instruction:
        (i0, mr), (k0, kk) = i, kt
        x = self.a_const or self.ctx.tensor(self.node.inputs[0])
        return dma.pattern(Opcode.DMA_LOAD, x, b.a + i0 * self.g.k + k0, sram,
                           ((kk, 1, 1), (mr, self.g.k, kk)))

    def load_b(self, b: Batch, j: tuple[int, int], kt: tuple[int, int], sram: int
               ) -> list[Instruction]:
        (j0, nn), (k0, kk) = j, kt
        if self.g.per_channel:  # w^T chunk [K, nn] pre-tiled: a K chunk is contiguous
            addr = self.consts.chunks[j0 // self.cols] + self.g.b_bytes(k0, nn)
            return dma.contiguous(Opcode.DMA_LOAD, self.ctx.consts.memory, addr, sram,
                                  self.g.b_bytes(kk, nn))
        t = self.b_const or self.ctx.tensor(self.node.inputs[1])
        return [dma.pattern(Opcode.DMA_LOAD, t, b.b + k0 * self.g.n + j0, sram,
                            ((nn, 1, 1), (kk, self.g.n, nn)))]

    def matmul(self, i: tuple[int, int], j: tuple[int, int], kt: tuple[int, int], a_addr: int,
               b_addr: int, acc: int) -> Instruction:
        (_, mr), (_, nn), (k0, kk) = i, j, kt
        g, asz = self.g, self.g.a_size
        return Instruction.make(
            Opcode.MATMUL, m=mr, n=nn, k=kk, a_addr=a_addr, a_stride_m=kk * asz,
            a_stride_k=asz, a_zp=g.a_zp, b_addr=b_addr, b_stride_k=g.b_row(nn), b_stride_n=1,
            b_zp=g.b_zp, b_type=g.b_type, acc_addr=acc, acc_stride=nn * g.entries,
            mode=AccMode.OVERWRITE if k0 == 0 else AccMode.ACCUMULATE, in_type=g.in_type)

    def requant(self, i: tuple[int, int], j: tuple[int, int], acc: int, oaddr: int
                ) -> Instruction:
        (_, mr), (j0, nn) = i, j
        a = self.node.attr_map
        dt = self.node.type.dtype
        per = self.g.per_channel
        g = self.g
        return Instruction.make(
            Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc, src_stride=nn * g.entries, rows=mr,
            ch=nn, out_dtype=ISA_DTYPE[dt], dst_addr=oaddr, dst_stride=nn * dt.itemsize,
            param_addr=self.lay.params + (g.param_bytes * j0 if per else 0),
            param_mode=ParamMode.PER_CHANNEL if per else ParamMode.PER_TENSOR,
            out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"],
            acc_width=g.in_type.acc_width)

    def store(self, b: Batch, i: tuple[int, int], j: tuple[int, int], oaddr: int
              ) -> Instruction:
        (i0, mr), (j0, nn) = i, j
        y = self.ctx.tensor(self.node.name)
        return dma.pattern(Opcode.DMA_STORE, y, b.out + i0 * self.g.n + j0, oaddr,
                           ((nn, 1, 1), (mr, self.g.n, nn)))


def _blobs(node: Node, g: Gemm, nchunks: list[tuple[int, int]], ctx: CodegenContext
           ) -> list[bytes]:
    """Parameters (read first), then w^T chunk by chunk (qlinear)."""
    if not g.per_channel:
        a = node.attr_map
        return [np.array([0, a["multiplier"], a["shift"]], "<i4").tobytes()]
    w = ctx.const(node.inputs[1]).astype(np.int8)  # [N, K]
    table = requant_params(*(ctx.const(n) for n in node.inputs[2:5]), g.in_type.acc_width,
                           nchunks)
    return [table, *(_b_chunk(g, w[j0:j0 + nn].T) for j0, nn in nchunks)]


def _b_chunk(g: Gemm, wt: np.ndarray) -> bytes:
    """A chunk [K, cols] of w^T as stored: int8 row-major, or int4 rows of `b_row` elements
    (a zero after an odd count) two per byte."""
    if g.wbits == 8:
        return np.ascontiguousarray(wt).tobytes()
    k, cols = wt.shape
    rows = np.zeros((k, g.b_row(cols)), np.int8)
    rows[:, :cols] = wt
    return pack_int4(rows)
