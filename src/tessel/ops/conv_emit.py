"""qconv2d (NHWC) -> CONV on the matrix engine (DWCONV when depthwise: on the array's depthwise
mode or on the vector engine, whichever the mapping search finds faster), then REQUANT with
per-channel bias / multiplier / shift and the fused activation clamp.

Loop orders (`ConvMapping.order`, `ConvOrder`):
* WEIGHTS (weight-stationary): output-channel chunks (a group: weights and parameters stay
  resident while its tiles run) x output-row tiles (each tile loads the input rows it needs,
  halo included): the input is read once per chunk. Weights are pre-tiled in DRAM chunk by
  chunk as [kh*kw, cin/groups, cout/groups] per conv group (HWIO), followed by the chunk's
  parameters (bias, q31, shift: 12 bytes per channel; 16 with an int16 input's int64 bias),
  in read order.
* INPUT (input-resident, weights resident): a group per output-row stripe keeps the stripe's
  input rows (halo included, every input channel) resident while its tiles, one per channel
  chunk, run: the input is read once. The weights of every chunk are loaded once, with the
  first stripe, into a fixed region; the parameters of every channel too (on the vector side).
* INPUT_STREAM (input-resident, weights streamed): as INPUT, but each tile loads its chunk's
  weights into a ring slot (the weights are read once per stripe); the parameters are loaded
  once with the first stripe. Used where the weights of all chunks do not fit.
The input-resident orders pack the weights of all chunks back to back (each chunk as WEIGHTS
packs it), then the parameter table (12 bytes per channel, chunk by chunk: channel c's entry
at 12 * c). They are offered for ordinary and grouped convs with more than one chunk (a
depthwise chunk reads only its own channels: WEIGHTS already reads its input once).

An int16 input (tessel.ops.conv_geometry) takes two bytes per element in the input tiles and
two accumulator entries per result.

Geometry, shape rules and weight sizes: tessel.ops.conv_geometry; constant blobs:
tessel.ops.conv_weights; a tile's instructions: tessel.ops.conv_instrs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tessel.errors import TesselCompileError
from tessel.ir import Node
from tessel.isa import Engine, Opcode
from tessel.ops import dma
from tessel.ops.context import (
    CodegenContext,
    PlacedConstants,
    SramPlan,
    StepConstants,
    align,
    const_addresses,
)
from tessel.ops.conv_geometry import ConvGeometry, geometry
from tessel.ops.conv_instrs import compute, input_load
from tessel.ops.conv_weights import blobs, blobs_all
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork


class ConvOrder(enum.Enum):
    """Loop order of a conv step (module docstring)."""

    WEIGHTS = "weight-stationary"
    INPUT = "input-resident"
    INPUT_STREAM = "input-resident weights-streamed"

    @property
    def input_resident(self) -> bool:
        return self is not ConvOrder.WEIGHTS


@dataclass(frozen=True)
class ConvMapping:
    rows: int  # output rows per tile (WEIGHTS) or per stripe (the input-resident orders)
    chunk: int  # output channels per chunk (a multiple of cout/groups)
    double_buffer: bool = True
    engine: Engine = Engine.MATRIX  # where DWCONV runs (depthwise only)
    order: ConvOrder = ConvOrder.WEIGHTS
    # INPUT_STREAM: slots of the weight-chunk ring, the chunks in flight ahead of the matrix
    # engine (None: as `double_buffer`, 2 or 1); `_stream_candidates`
    weight_depth: int | None = None

    def __str__(self) -> str:
        dw = " dw=vector" if self.engine is Engine.VECTOR else ""
        wd = "" if self.weight_depth is None else f" weight_buffers={self.weight_depth}"
        return f"{self.order.value} rows={self.rows} cout_chunk={self.chunk}" + (
            "" if self.double_buffer else " single-buffered") + wd + dw

    @property
    def weight_ring(self) -> int:
        """Slots of the INPUT_STREAM weight-chunk ring."""
        if self.weight_depth is not None:
            return self.weight_depth
        return 2 if self.double_buffer else 1


def candidates(node: Node, ctx: CodegenContext) -> list[ConvMapping]:
    """Mappings that fit SRAM and the accumulator: channel chunks x row tiles, weight-
    stationary; then (ordinary and grouped convs, more than one chunk, where weight-stationary
    is DRAM-bound: `_rereads_cost`) the input-resident orders: the weights of all chunks
    resident where they fit, else streamed per stripe."""
    g = geometry(node, ctx)
    engines = (Engine.MATRIX, Engine.VECTOR) if g.depthwise else (Engine.MATRIX,)
    rows = sorted({min(g.oh, r) for r in (1, 2, 4, 8, 16, 32, 64, 128, 256)})
    out = []
    for engine in engines:
        for ch in _chunks(g, ctx.arch.vector.lanes if engine is Engine.VECTOR
                          else ctx.arch.matrix.cols):
            for r in rows:
                m = _first_fit(g, ctx, node, [ConvMapping(r, ch, db, engine)
                                              for db in (True, False)])
                if m is not None:
                    out.append(m)
    if g.depthwise:
        return out
    for ch in _chunks(g, ctx.arch.matrix.cols):
        if ch >= g.cout:
            continue
        for r in rows:
            if not _rereads_cost(g, r, ch, ctx, node.type.dtype.itemsize):
                continue
            # single buffering only where double does not fit; the weights resident if they fit
            m = _first_fit(g, ctx, node, [ConvMapping(r, ch, db, Engine.MATRIX, order)
                                          for db in (True, False)
                                          for order in (ConvOrder.INPUT, ConvOrder.INPUT_STREAM)])
            if m is not None:
                out.append(m)
            out += _stream_candidates(g, ctx, node, r, ch, m)
    return out


def _stream_candidates(g: ConvGeometry, ctx: CodegenContext, node: Node, rows: int, chunk: int,
                       first: ConvMapping | None) -> list[ConvMapping]:
    """Weight-streamed mappings whose weight ring is deeper than the stripe ring: where the
    weights come from a slow memory, the next chunks' loads overlap the matrix engine only if
    the ring has a free slot while it runs. Offered where `first` (the first fit of the
    default buffering) streams weights through fewer slots: the stripe, output and accumulator
    rings single-buffered, the weight ring 2 or 3 deep (the search chooses); and, at the
    array's narrowest chunk, the half-width chunk, whose slots are half the bytes (a
    flash-bound conv keeps its weights two deep where a full-width pair does not fit)."""
    if first is not None and (first.order is ConvOrder.INPUT or first.weight_ring >= 2):
        return []
    out = []
    for depth in (2, 3):
        m = _first_fit(g, ctx, node, [ConvMapping(rows, chunk, False, Engine.MATRIX,
                                                  ConvOrder.INPUT_STREAM, depth)])
        if m is not None:
            out.append(m)
    half = ctx.arch.matrix.cols // 2
    if chunk == ctx.arch.matrix.cols and g.groups == 1 and half >= 1 and not out:
        for db, depth in ((True, None), (False, 2), (False, 3)):
            m = _first_fit(g, ctx, node, [ConvMapping(rows, half, db, Engine.MATRIX,
                                                      ConvOrder.INPUT_STREAM, depth)])
            if m is not None:
                out.append(m)
    return out


def _rereads_cost(g: ConvGeometry, rows: int, chunk: int, ctx: CodegenContext, out_isz: int
                  ) -> bool:
    """Whether weight-stationary with this tiling is DRAM-bound (closed form: its off-chip
    bytes, the input once per chunk, over bandwidth exceed the MACs over the array size), the
    only case where reading the input once can pay. Elsewhere the input-resident orders are not
    offered: they gain nothing the per-step search sees and forfeit what it does not see, the
    prefetch of group 0 (their group 0 loads activations: schedule/prefetch.py) and on-chip
    residency of their input (schedule/resident_rewrite.py refuses group loads of resident tensors)."""
    arch = ctx.arch
    sram_bpc = arch.derived.sram_bytes_per_cycle
    per_mem: dict[int, float] = {}

    def add(mem: int, nbytes: int) -> None:
        bpc = min(arch.offchip[mem].bytes_per_cycle, sram_bpc)
        per_mem[mem] = per_mem.get(mem, 0.0) + nbytes / bpc

    nchunks = -(-g.cout // chunk)
    in_bytes = sum(g.in_rows(oy, min(rows, g.oh - oy))[1] for oy in range(0, g.oh, rows))
    add(ctx.act_memory, g.n * nchunks * in_bytes * g.w * g.c * g.xb)
    add(ctx.act_memory, g.n * g.oh * g.ow * g.cout * out_isz)
    add(ctx.consts.memory, g.weight_bytes(g.cout) + g.param_bytes * g.cout)
    macs = g.n * g.oh * g.ow * g.cout * g.kh * g.kw * g.cin_g
    return max(per_mem.values()) > macs / (arch.matrix.rows * arch.matrix.cols)


def _first_fit(g: ConvGeometry, ctx: CodegenContext, node: Node, ms: list[ConvMapping]
               ) -> ConvMapping | None:
    for m in ms:
        try:
            _layout(g, m, ctx, node)
        except TesselCompileError:
            continue
        return m
    return None


def _chunks(g: ConvGeometry, width: int) -> list[int]:
    """Output-channel chunk sizes: the whole, or multiples of the engine's width."""
    unit = 1 if g.depthwise or g.groups == 1 else g.cout_g
    chunks = {g.cout}
    for k in (1, 2, 4, 8, 16):
        ch = max(unit, (k * width) // unit * unit)
        if ch < g.cout and g.cout % unit == 0:
            chunks.add(ch)
    return sorted(chunks)


def on_vector(g: ConvGeometry, m: ConvMapping) -> bool:
    """Whether the step's DWCONV runs on the vector engine (no matrix stage, one acc slot)."""
    return g.depthwise and m.engine is Engine.VECTOR


@dataclass(frozen=True)
class _Layout:
    group: int
    group_stride: int
    inp: int
    inp_stride: int
    out: int
    out_stride: int
    acc: int
    acc_stride: int


@dataclass(frozen=True)
class _InLayout:
    """SRAM of the input-resident orders: the parameter table, the input stripe ring (group
    slots), the weights (a fixed region for INPUT, a tile ring for INPUT_STREAM), outputs and
    accumulators."""

    params: int
    stripe: int
    stripe_stride: int
    weights: int
    weights_stride: int  # 0 for INPUT (every chunk at its offset in the fixed region)
    out: int
    out_stride: int
    acc: int
    acc_stride: int


def _stripe_rows(g: ConvGeometry, rows: int) -> int:
    """Input rows a tile (a stripe) of `rows` output rows reads at most."""
    return min(g.h, (rows - 1) * g.sh + (g.kh - 1) * g.dh + 1)


def _layout(g: ConvGeometry, m: ConvMapping, ctx: CodegenContext, node: Node
            ) -> _Layout | _InLayout:
    if m.order.input_resident:
        return _in_layout(g, m, ctx, node)
    depth = 2 if m.double_buffer else 1
    plan = SramPlan(ctx.arch, f"{node}")
    gbytes = align(g.weight_bytes(m.chunk) + g.param_bytes * m.chunk)
    group = plan.sram(depth * gbytes, "weights+params")
    ibytes = align(_stripe_rows(g, m.rows) * g.w * (m.chunk if g.depthwise else g.c) * g.xb)
    inp = plan.sram(depth * ibytes, "input tile")
    obytes = align(m.rows * g.ow * m.chunk * node.type.dtype.itemsize)
    out = plan.sram(depth * obytes, "output tile")
    entries = m.rows * g.ow * m.chunk * g.entries
    acc = plan.acc((1 if on_vector(g, m) else depth) * entries, "accumulators")
    return _Layout(group, gbytes, inp, ibytes, out, obytes, acc, entries)


def _in_layout(g: ConvGeometry, m: ConvMapping, ctx: CodegenContext, node: Node) -> _InLayout:
    if g.depthwise:
        raise TesselCompileError(f"{node}: {m.order.value} is for non-depthwise convs")
    depth = 2 if m.double_buffer else 1
    plan = SramPlan(ctx.arch, f"{node}")
    params = plan.sram(align(g.param_bytes * g.cout), "requant parameters")
    sbytes = align(_stripe_rows(g, m.rows) * g.w * g.c * g.xb)
    stripe = plan.sram(depth * sbytes, "input stripe")
    if m.order is ConvOrder.INPUT:
        wstride, weights = 0, plan.sram(align(g.weight_bytes(g.cout)), "weights (all chunks)")
    else:
        wstride = align(g.weight_bytes(m.chunk))
        weights = plan.sram(m.weight_ring * wstride, "weight chunk")
    obytes = align(m.rows * g.ow * m.chunk * node.type.dtype.itemsize)
    out = plan.sram(depth * obytes, "output tile")
    entries = m.rows * g.ow * m.chunk * g.entries
    acc = plan.acc(depth * entries, "accumulators")
    return _InLayout(params, stripe, sbytes, weights, wstride, out, obytes, acc, entries)


def _chunk_list(g: ConvGeometry, m: ConvMapping) -> list[tuple[int, int]]:
    return [(c0, min(m.chunk, g.cout - c0)) for c0 in range(0, g.cout, m.chunk)]


def constants(node: Node, m: ConvMapping, ctx: CodegenContext) -> StepConstants:
    """The step's constant blobs in read order: per output-channel chunk its pre-tiled weights
    and parameters (weight-stationary); every chunk's weights, then every chunk's parameters
    (the input-resident orders)."""
    g = geometry(node, ctx)
    chunks = _chunk_list(g, m)
    if m.order.input_resident:
        return StepConstants(blobs_all(node, g, chunks, ctx))
    return StepConstants(tuple(blobs(node, g, chunks, ctx)))


def step(node: Node, m: ConvMapping, ctx: CodegenContext, placed: PlacedConstants | None = None
         ) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    if m.order.input_resident:
        return _in_step(node, m, ctx, placed)
    g = geometry(node, ctx)
    lay = _layout(g, m, ctx, node)
    chunks = _chunk_list(g, m)
    addrs = const_addresses(placed, len(chunks))
    row_tiles = [(b, oy, min(m.rows, g.oh - oy)) for b in range(g.n)
                 for oy in range(0, g.oh, m.rows)]

    alike: dict[tuple[int, int], GroupWork] = {}  # (slot, chunk width) -> its group

    def group_fn(j: int, slot: int) -> GroupWork:
        cn = chunks[j][1]
        if placed is None and (slot, cn) in alike:  # estimating: every constant at address 0
            return alike[slot, cn]
        loads = dma.contiguous(Opcode.DMA_LOAD, ctx.consts.memory, addrs[j],
                               lay.group + slot * lay.group_stride,
                               g.weight_bytes(cn) + g.param_bytes * cn)
        if on_vector(g, m):  # DWCONV on the vector engine: its weights are vector data
            group = GroupWork([], loads, [], len(row_tiles))
        else:
            group = GroupWork(loads, [], [], len(row_tiles))
        if placed is None:
            alike[slot, cn] = group
        return group

    computes: dict[tuple, tuple] = {}  # the tiles' CONV / DWCONV and REQUANT (compute)

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        return _tile(node, g, lay, chunks[j], row_tiles[t], s, ctx, on_vector(g, m), computes)

    vec = on_vector(g, m)

    def tile_key(j: int, t: int) -> tuple:
        """Tiles with the same chunk width, rows and input window cost the same (in any
        weight-stationary step of the node with the DWCONV on the same engine: the key holds
        across the node's candidates, StepWork.cost_scope)."""
        _, in_rows, pad_top = g.in_rows(*row_tiles[t][1:])
        return ConvOrder.WEIGHTS, vec, chunks[j][1], row_tiles[t][2], in_rows, pad_top

    depth = 2 if m.double_buffer else 1
    shape = StepShape(uses_matrix=not vec, in_depth=depth, acc_depth=depth,
                      out_depth=depth, group_depth=depth)
    return StepWork(shape, len(chunks), group_fn, tile_fn, tile_key, ctx.cost_scope(node))


def _in_step(node: Node, m: ConvMapping, ctx: CodegenContext, placed: PlacedConstants | None
             ) -> StepWork:
    """The input-resident orders: a group per row stripe (its input rows), a tile per chunk."""
    g = geometry(node, ctx)
    lay = _in_layout(g, m, ctx, node)
    chunks = _chunk_list(g, m)
    waddr, paddr = const_addresses(placed, 2)
    stripes = [(b, oy, min(m.rows, g.oh - oy)) for b in range(g.n)
               for oy in range(0, g.oh, m.rows)]
    resident = m.order is ConvOrder.INPUT
    mem = ctx.consts.memory

    def group_fn(j: int, slot: int) -> GroupWork:
        loads = [input_load(node, g, (0, g.c), stripes[j], lay.stripe + slot * lay.stripe_stride,
                             ctx)]
        params = []
        if j == 0:  # once per step: every chunk's weights (INPUT), every channel's parameters
            if resident:
                loads += dma.contiguous(Opcode.DMA_LOAD, mem, waddr, lay.weights,
                                        g.weight_bytes(g.cout))
            params = dma.contiguous(Opcode.DMA_LOAD, mem, paddr, lay.params,
                                    g.param_bytes * g.cout)
        return GroupWork(loads, params, [], len(chunks))

    computes: dict[tuple, tuple] = {}  # the tiles' CONV and REQUANT (compute)

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        c0, cn = chunks[t]
        iaddr = lay.stripe + s.group * lay.stripe_stride
        if resident:
            loads, gaddr = [], lay.weights + g.chunk_offset(c0, m.chunk)
        else:
            gaddr = lay.weights + s.inp * lay.weights_stride
            loads = dma.contiguous(Opcode.DMA_LOAD, mem, waddr + g.chunk_offset(c0, m.chunk),
                                   gaddr, g.weight_bytes(cn))
        oaddr = lay.out + s.out * lay.out_stride
        acc_addr = lay.acc + s.acc * lay.acc_stride
        matrix, vector, stores = compute(node, g, chunks[t], stripes[j], iaddr, gaddr,
                                          lay.params + g.param_bytes * c0, acc_addr, oaddr, ctx,
                                          computes)
        return TileWork(loads, matrix, vector, stores)

    def tile_key(j: int, t: int) -> tuple:
        _, in_rows, pad_top = g.in_rows(*stripes[j][1:])
        return m.order, chunks[t][1], stripes[j][2], in_rows, pad_top

    depth = 2 if m.double_buffer else 1
    # the tile ring (its DMA_IN -> MATRIX loads) is the weight-chunk ring of INPUT_STREAM
    shape = StepShape(uses_matrix=True, in_depth=depth if resident else m.weight_ring,
                      acc_depth=depth, out_depth=depth, group_depth=depth)
    return StepWork(shape, len(stripes), group_fn, tile_fn, tile_key, ctx.cost_scope(node))


def _tile(node: Node, g: ConvGeometry, lay: _Layout, chunk: tuple[int, int],
          rows_tile: tuple[int, int, int], s: Slots, ctx: CodegenContext, vector: bool,
          computes: dict[tuple, tuple] | None = None) -> TileWork:
    c0, cn = chunk
    gaddr = lay.group + s.group * lay.group_stride
    iaddr = lay.inp + s.inp * lay.inp_stride
    load = input_load(node, g, (c0, cn) if g.depthwise else (0, g.c), rows_tile, iaddr, ctx)
    acc_addr = lay.acc + (0 if vector else s.acc * lay.acc_stride)
    oaddr = lay.out + s.out * lay.out_stride
    matrix, vec, stores = compute(node, g, chunk, rows_tile, iaddr, gaddr,
                                   gaddr + g.weight_bytes(cn), acc_addr, oaddr, ctx, computes)
    if vector:
        return TileWork([load], [], matrix + vec, stores)
    return TileWork([load], matrix, vec, stores)
