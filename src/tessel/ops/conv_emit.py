"""qconv2d (NHWC) -> CONV on the matrix engine (DWCONV when depthwise: on the array's depthwise
mode or on the vector engine, whichever the mapping search finds faster), then REQUANT with
per-channel bias / multiplier / shift and the fused activation clamp.

Loop orders (`ConvMapping.order`, `ConvOrder`):
* WEIGHTS (weight-stationary): output-channel chunks (a group: weights and parameters stay
  resident while its tiles run) x output-row tiles (each tile loads the input rows it needs,
  halo included): the input is read once per chunk. Weights are pre-tiled in DRAM chunk by
  chunk as [kh*kw, cin/groups, cout/groups] per conv group (HWIO), followed by the chunk's
  parameters (bias, q31, shift: 12 bytes per channel), in read order.
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

int4 weights (an I4 weight tensor) are stored two per byte (CONV / DWCONV ``w_type`` I4), the
even element in the low half; each instruction's block of weights starts on a byte (a block
of an odd count ends with a zero half), so the pre-tiled order and the strides (counted in
elements either way) are those of int8 weights.

2:4 sparse weights (tessel.isa.sparse24; on a target with ``sparse.enabled``): a conv whose
weights have at most two non-zeros in every four input channels of each output channel and tap
(``tessel.prune_2_4`` makes them) stores each instruction's block as its values ``[taps,
cin/2, cg]`` (int8, or int4 packed) followed by the indices, CONV ``w_type`` I8_2_4 / I4_2_4,
when that costs no more cycles than dense on a tile of the layer (`_sparse_pays`; it always
has fewer bytes). Depthwise convs, convs whose input channels per group are not a multiple of
four and fused chains' convs stay dense.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field, replace

import numpy as np

from tessel.errors import TesselCompileError
from tessel.ir import DType, Layout, Node
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.costs import instruction_cost
from tessel.isa.fields import AccMode, AccSrc, ParamMode
from tessel.isa.instrs.matrix import WeightType
from tessel.isa.limits import MAX_DILATION, MAX_KERNEL, MAX_PAD, MAX_STRIDE
from tessel.isa.sparse24 import encode, index_bytes, is_2_4, pack_nibbles
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
    require_int4,
)
from tessel.ops.quantise import rounding_of
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


@dataclass(frozen=True)
class ConvGeometry(Window):
    """A conv's window and its tensors: input n x h x w x c (NHWC), cout output channels in
    `groups` groups."""

    h: int
    w: int
    c: int
    cout: int
    groups: int
    n: int = 1  # batch: images are independent, each tile belongs to one
    wbits: int = 8  # bits of a stored weight: 8, or 4 (int4, two per byte)
    sparse: bool = False  # 2:4 sparse: values and indices (module docstring)
    # derived once (the mapping search and its bounds read them hundreds of thousands of times)
    depthwise: bool = field(init=False, repr=False, compare=False)
    _weights_per_channel: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dw = self.groups > 1 and self.groups == self.c == self.cout
        object.__setattr__(self, "depthwise", dw)
        object.__setattr__(self, "_weights_per_channel",
                           self.kh * self.kw * (1 if dw else self.c // self.groups))

    @property
    def cin_g(self) -> int:
        return self.c // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    def in_rows(self, oy0: int, rows: int) -> tuple[int, int, int]:
        """(first input row, row count, tile pad_top) of output rows [oy0, oy0 + rows)."""
        return self.rows_for(oy0, rows, self.h)

    @property
    def w_type(self) -> WeightType:
        return (WeightType.I4 if self.wbits == 4 else WeightType.I8).with_sparsity(self.sparse)

    def weight_bytes(self, chunk: int) -> int:
        """Bytes of the pre-tiled weights of `chunk` output channels."""
        if self.wbits == 8 and not self.sparse:
            return self._weights_per_channel * chunk
        return _packed_bytes(self, chunk)

    def block_bytes(self, taps: int, cout: int) -> int:
        """Bytes of one CONV / DWCONV instruction's block of `taps` x cin_g (depthwise: one)
        x `cout` weights (a block starts on a byte)."""
        cin = 1 if self.depthwise else self.cin_g
        if not self.sparse:
            return block_bytes(taps * cin * cout, self.wbits)
        return block_bytes(taps * cin // 2 * cout, self.wbits) + index_bytes(taps, cin, cout)

    def w_fields(self, cin: int, cout: int) -> dict[str, int | WeightType]:
        """A CONV's weight fields for a dense HWIO block of `cin` x `cout` per tap (2:4
        sparse: of its values, `cin / 2` rows)."""
        rows = cin // 2 if self.sparse else cin
        return dict(w_stride_k=rows * cout, w_stride_ci=cout, w_stride_co=1, w_zp=0,
                    w_type=self.w_type)

    def k_run(self, k: int) -> int:
        """The reduction of `k` weights the array runs (2:4 sparse: the kept half)."""
        return k // 2 if self.sparse else k

    def chunk_offset(self, c0: int, chunk: int) -> int:
        """Where the weights of the chunk starting at channel `c0` begin among those of every
        chunk packed back to back (each but the last `chunk` wide)."""
        return c0 // chunk * self.weight_bytes(chunk)


def block_bytes(elements: int, wbits: int) -> int:
    """Bytes of one instruction's block of `elements` weights (a block starts on a byte)."""
    return (elements * wbits + 7) // 8


def weight_blocks(g: ConvGeometry, chunk: int) -> list[tuple[int, int]]:
    """(taps, output channels) of each CONV / DWCONV instruction's block of a chunk, in
    pre-tiled order."""
    if g.depthwise:
        return [(g.kh * g.kw, chunk)]
    cg = per_conv(g, chunk)
    return [(sc.bh * sc.bw, cg) for sc in sub_convs(g) for _ in range(chunk // cg)]


@functools.lru_cache(maxsize=4096)
def _packed_bytes(g: ConvGeometry, chunk: int) -> int:
    return sum(g.block_bytes(t, n) for t, n in weight_blocks(g, chunk))


def refusal(node: Node, graph) -> str | None:
    """Why the NPU cannot run this qconv2d (its shape rules), or None. Asked before
    partitioning (`registry.npu_refusal`) and by `geometry`, so both agree."""
    a = node.attr_map
    if a["layout"] is not Layout.NHWC:
        return "the NPU needs NHWC convolutions (run the to_nhwc pass)"
    if max(a["dilation"]) > MAX_DILATION:
        return f"dilation {max(a['dilation'])} is beyond the CONV instruction (max {MAX_DILATION})"
    if max(a["padding"][:2]) > MAX_PAD:
        return (f"top / left padding {max(a['padding'][:2])} is beyond the CONV / DWCONV "
                f"instructions (max {MAX_PAD})")
    if graph is None:
        return None
    c = graph.type_of(node.inputs[0]).shape[3]
    _, kh, kw, _ = graph.type_of(node.inputs[1]).shape  # OHWI
    depthwise = a["groups"] > 1 and a["groups"] == c
    big = max(kh, kw) > MAX_KERNEL or max(a["stride"]) > MAX_STRIDE
    if big and (depthwise or a["dilation"] != (1, 1) or (
            max(a["stride"]) > MAX_STRIDE and any(a["padding"]))):
        return (f"kernels beyond {MAX_KERNEL} or strides beyond {MAX_STRIDE} are supported for "
                f"ordinary convs only (strides > {MAX_STRIDE} also need no padding and "
                "dilation 1)")
    return None


def geometry(node: Node, ctx: CodegenContext, sparse: bool = True) -> ConvGeometry:
    """The conv's geometry; its weights 2:4 sparse where the target runs them, they are and
    it pays (`sparse` false: dense, for the fused chains)."""
    a = node.attr_map
    why = refusal(node, ctx.graph)
    if why is not None:
        raise TesselCompileError(f"{node} at {node.loc}: {why}")
    n, h, w, c = ctx.graph.type_of(node.inputs[0]).shape
    _, oh, ow, cout = node.type.shape
    _, kh, kw, _ = ctx.graph.type_of(node.inputs[1]).shape  # OHWI
    (sh, sw), (dh, dw) = a["stride"], a["dilation"]
    wbits = 4 if ctx.graph.type_of(node.inputs[1]).dtype is DType.I4 else 8
    if wbits == 4:
        require_int4(node, ctx)
    g = ConvGeometry(kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=a["padding"][0],
                     pl=a["padding"][1], oh=oh, ow=ow, h=h, w=w, c=c, cout=cout,
                     groups=a["groups"], n=n, wbits=wbits)
    if sparse and ctx.arch.sparse.enabled and not g.depthwise and g.cin_g % 4 == 0:
        if ctx.memo(("conv 2:4", node.name), lambda: _sparse_pays(node, g, ctx)):
            return replace(g, sparse=True)
    return g


PAYS_ROWS = 16  # output rows of the tile `_sparse_pays` costs both ways


def _sparse_pays(node: Node, g: ConvGeometry, ctx: CodegenContext) -> bool:
    """Whether the conv's weights are exactly 2:4 along input channels and a tile of the layer
    (up to `PAYS_ROWS` output rows, every output channel of a conv group) costs no more cycles
    sparse than dense."""
    w = ctx.const(node.inputs[1])  # OHWI
    o, kh, kw, ci = w.shape
    if not is_2_4(w.reshape(o, kh * kw, ci).transpose(1, 2, 0)):
        return False
    cg = per_conv(g, g.cout)
    rows = min(g.oh, PAYS_ROWS)
    in_rows = min(g.h, (rows - 1) * g.sh + (g.kh - 1) * g.dh + 1)

    def cycles(geo: ConvGeometry) -> int:
        return sum(instruction_cost(Instruction.make(
            Opcode.CONV, in_addr=0, in_h=in_rows, in_w=g.w, in_stride_h=g.w * g.c,
            in_stride_w=g.c, cin=g.cin_g, kh=sc.bh, kw=sc.bw, out_h=rows, out_w=g.ow, cout=cg,
            w_addr=0, acc_addr=0, acc_stride=cg, **geo.w_fields(g.cin_g, cg)), ctx.arch).cycles
            for sc in sub_convs(g))

    return cycles(replace(g, sparse=True)) <= cycles(g)


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
    add(ctx.act_memory, g.n * nchunks * in_bytes * g.w * g.c)
    add(ctx.act_memory, g.n * g.oh * g.ow * g.cout * out_isz)
    add(ctx.consts.memory, g.weight_bytes(g.cout) + 12 * g.cout)
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
    gbytes = align(g.weight_bytes(m.chunk) + 12 * m.chunk)
    group = plan.sram(depth * gbytes, "weights+params")
    ibytes = align(_stripe_rows(g, m.rows) * g.w * (m.chunk if g.depthwise else g.c))
    inp = plan.sram(depth * ibytes, "input tile")
    obytes = align(m.rows * g.ow * m.chunk * node.type.dtype.itemsize)
    out = plan.sram(depth * obytes, "output tile")
    entries = m.rows * g.ow * m.chunk
    acc = plan.acc((1 if on_vector(g, m) else depth) * entries, "accumulators")
    return _Layout(group, gbytes, inp, ibytes, out, obytes, acc, entries)


def _in_layout(g: ConvGeometry, m: ConvMapping, ctx: CodegenContext, node: Node) -> _InLayout:
    if g.depthwise:
        raise TesselCompileError(f"{node}: {m.order.value} is for non-depthwise convs")
    depth = 2 if m.double_buffer else 1
    plan = SramPlan(ctx.arch, f"{node}")
    params = plan.sram(align(12 * g.cout), "requant parameters")
    sbytes = align(_stripe_rows(g, m.rows) * g.w * g.c)
    stripe = plan.sram(depth * sbytes, "input stripe")
    if m.order is ConvOrder.INPUT:
        wstride, weights = 0, plan.sram(align(g.weight_bytes(g.cout)), "weights (all chunks)")
    else:
        wstride = align(g.weight_bytes(m.chunk))
        weights = plan.sram(m.weight_ring * wstride, "weight chunk")
    obytes = align(m.rows * g.ow * m.chunk * node.type.dtype.itemsize)
    out = plan.sram(depth * obytes, "output tile")
    entries = m.rows * g.ow * m.chunk
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
        return StepConstants(_blobs_all(node, g, chunks, ctx))
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
                               g.weight_bytes(cn) + 12 * cn)
        if on_vector(g, m):  # DWCONV on the vector engine: its weights are vector data
            group = GroupWork([], loads, [], len(row_tiles))
        else:
            group = GroupWork(loads, [], [], len(row_tiles))
        if placed is None:
            alike[slot, cn] = group
        return group

    computes: dict[tuple, tuple] = {}  # the tiles' CONV / DWCONV and REQUANT (_compute)

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
        loads = [_input_load(node, g, (0, g.c), stripes[j], lay.stripe + slot * lay.stripe_stride,
                             ctx)]
        params = []
        if j == 0:  # once per step: every chunk's weights (INPUT), every channel's parameters
            if resident:
                loads += dma.contiguous(Opcode.DMA_LOAD, mem, waddr, lay.weights,
                                        g.weight_bytes(g.cout))
            params = dma.contiguous(Opcode.DMA_LOAD, mem, paddr, lay.params, 12 * g.cout)
        return GroupWork(loads, params, [], len(chunks))

    computes: dict[tuple, tuple] = {}  # the tiles' CONV and REQUANT (_compute)

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
        matrix, vector, stores = _compute(node, g, chunks[t], stripes[j], iaddr, gaddr,
                                          lay.params + 12 * c0, acc_addr, oaddr, ctx, computes)
        return TileWork(loads, matrix, vector, stores)

    def tile_key(j: int, t: int) -> tuple:
        _, in_rows, pad_top = g.in_rows(*stripes[j][1:])
        return m.order, chunks[t][1], stripes[j][2], in_rows, pad_top

    depth = 2 if m.double_buffer else 1
    # the tile ring (its DMA_IN -> MATRIX loads) is the weight-chunk ring of INPUT_STREAM
    shape = StepShape(uses_matrix=True, in_depth=depth if resident else m.weight_ring,
                      acc_depth=depth, out_depth=depth, group_depth=depth)
    return StepWork(shape, len(stripes), group_fn, tile_fn, tile_key, ctx.cost_scope(node))


def _input_load(node: Node, g: ConvGeometry, chans: tuple[int, int],
                rows_tile: tuple[int, int, int], iaddr: int, ctx: CodegenContext) -> Instruction:
    """The load of the input rows output rows `rows_tile` read, channels [c0, c0 + cl)."""
    (c0, cl), (b, oy0, rows) = chans, rows_tile
    r0, in_rows, _ = g.in_rows(oy0, rows)
    return dma.pattern(Opcode.DMA_LOAD, ctx.tensor(node.inputs[0]),
                       (b * g.h + r0) * g.w * g.c + c0, iaddr,
                       ((cl, 1, 1), (g.w, g.c, cl), (in_rows, g.w * g.c, g.w * cl)))


def _tile(node: Node, g: ConvGeometry, lay: _Layout, chunk: tuple[int, int],
          rows_tile: tuple[int, int, int], s: Slots, ctx: CodegenContext, vector: bool,
          computes: dict[tuple, tuple] | None = None) -> TileWork:
    c0, cn = chunk
    gaddr = lay.group + s.group * lay.group_stride
    iaddr = lay.inp + s.inp * lay.inp_stride
    load = _input_load(node, g, (c0, cn) if g.depthwise else (0, g.c), rows_tile, iaddr, ctx)
    acc_addr = lay.acc + (0 if vector else s.acc * lay.acc_stride)
    oaddr = lay.out + s.out * lay.out_stride
    matrix, vec, stores = _compute(node, g, chunk, rows_tile, iaddr, gaddr,
                                   gaddr + g.weight_bytes(cn), acc_addr, oaddr, ctx, computes)
    if vector:
        return TileWork([load], [], matrix + vec, stores)
    return TileWork([load], matrix, vec, stores)


def _compute(node: Node, g: ConvGeometry, chunk: tuple[int, int], rows_tile: tuple[int, int, int],
             iaddr: int, gaddr: int, paddr: int, acc_addr: int, oaddr: int, ctx: CodegenContext,
             computes: dict[tuple, tuple] | None = None
             ) -> tuple[list[Instruction], list[Instruction], list[Instruction]]:
    """A tile's CONV / DWCONV instructions, its REQUANT and its store: input rows at `iaddr`,
    weights at `gaddr`, parameters at `paddr`. `computes` (one step's): the CONV / DWCONV and
    REQUANT of the tiles built so far, by what they read (only the store names the tile's
    place in the tensor; a grouped conv's CONVs also its first channel)."""
    (c0, cn), (b, oy0, rows) = chunk, rows_tile
    y = ctx.tensor(node.name)
    _, in_rows, pad_top = g.in_rows(oy0, rows)
    store = dma.pattern(Opcode.DMA_STORE, y, (b * g.oh + oy0) * g.ow * g.cout + c0, oaddr,
                        ((cn, 1, 1), (rows * g.ow, g.cout, cn)))
    key = (c0 if g.groups != 1 and not g.depthwise else -1, cn, rows, in_rows, pad_top, iaddr,
           gaddr, paddr, acc_addr, oaddr)
    hit = computes.get(key) if computes is not None else None
    if hit is None:
        hit = _compute_instrs(node, g, c0, cn, rows, in_rows, pad_top, iaddr, gaddr, paddr,
                              acc_addr, oaddr, y.itemsize)
        if computes is not None:
            computes[key] = hit
    return list(hit[0]), [hit[1]], [store]


def _compute_instrs(node: Node, g: ConvGeometry, c0: int, cn: int, rows: int, in_rows: int,
                    pad_top: int, iaddr: int, gaddr: int, paddr: int, acc_addr: int, oaddr: int,
                    itemsize: int) -> tuple[list[Instruction], Instruction]:
    """_compute's CONV / DWCONV instructions and REQUANT."""
    a = node.attr_map
    common = dict(in_h=in_rows, in_w=g.w, in_zp=a["in_zp"], kh=g.kh, kw=g.kw, stride_h=g.sh,
                  stride_w=g.sw, dil_h=g.dh, dil_w=g.dw, pad_top=pad_top, pad_left=g.pl,
                  out_h=rows, out_w=g.ow, mode=AccMode.OVERWRITE)
    if g.depthwise:
        compute = [Instruction.make(Opcode.DWCONV, in_addr=iaddr, in_stride_h=g.w * cn,
                                    in_stride_w=cn, ch=cn, w_addr=gaddr, w_stride_k=cn,
                                    acc_addr=acc_addr, acc_stride=cn, w_type=g.w_type,
                                    **common)]
    else:
        compute = _convs(g, a, cn, c0, iaddr, in_rows, pad_top, rows, gaddr, acc_addr)
    dt = ISA_DTYPE[node.type.dtype]
    req = Instruction.make(
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc_addr, src_stride=cn, rows=rows * g.ow,
        ch=cn, out_dtype=dt, dst_addr=oaddr, dst_stride=cn * itemsize,
        param_addr=paddr, param_mode=ParamMode.PER_CHANNEL,
        out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"], rounding=rounding_of(a))
    return compute, req


def _split(k: int) -> list[tuple[int, int]]:
    """(first tap, taps) blocks of at most MAX_KERNEL taps covering k taps."""
    n = -(-k // MAX_KERNEL)
    sizes = [k // n + (1 if i < k % n else 0) for i in range(n)]
    return [(sum(sizes[:i]), sizes[i]) for i in range(n)]


def _phase_factor(stride: int) -> int:
    """Smallest f dividing `stride` with stride / f <= MAX_STRIDE (1 when it already fits)."""
    return next(f for f in range(1, stride + 1) if stride % f == 0 and stride // f <= MAX_STRIDE)


@dataclass(frozen=True)
class SubConv:
    """One CONV's share of the kernel: taps ky = py + fy * (y0 + i) for i < bh (same for x).

    Kernels over MAX_KERNEL taps split into accumulating blocks; strides over MAX_STRIDE use
    the polyphase identity: with f | stride, a stride-s conv is the sum over phases (py, px)
    of stride-s/f convs on the input subsampled by f from offset (py, px) (needs no padding,
    dilation 1)."""

    py: int
    px: int
    fy: int
    fx: int
    y0: int
    bh: int
    x0: int
    bw: int


def sub_convs(g: ConvGeometry) -> list[SubConv]:
    fy, fx = _phase_factor(g.sh), _phase_factor(g.sw)
    out = []
    for py in range(fy):
        for px in range(fx):
            th, tw = len(range(py, g.kh, fy)), len(range(px, g.kw, fx))
            out += [SubConv(py, px, fy, fx, y0, bh, x0, bw)
                    for y0, bh in _split(th) for x0, bw in _split(tw)]
    return out


def _convs(g: ConvGeometry, a: dict, cn: int, c0: int, iaddr: int, in_rows: int, pad_top: int,
           rows: int, gaddr: int, acc_addr: int) -> list[Instruction]:
    """CONV instructions of one tile: per sub-conv (kernel block / stride phase), per conv
    group of the chunk; all but the first sub-conv accumulate. A sub-conv reads a virtual
    image (rows py, py+fy, ... of the tile); its first tap y0 shifts the padding, or the base
    when the padding runs out."""
    cg = per_conv(g, cn)  # output channels of one CONV (the chunk, or one conv group)
    out, w_off = [], 0  # w_off: bytes of the blocks before this CONV's
    for k_sub, sc in enumerate(sub_convs(g)):
        sh_v, sw_v = g.w * g.c * sc.fy, g.c * sc.fx  # strides of the virtual image
        base = iaddr + sc.py * g.w * g.c + sc.px * g.c
        in_h, in_w = -(-(in_rows - sc.py) // sc.fy), -(-(g.w - sc.px) // sc.fx)
        pt, pl = pad_top - sc.y0 * g.dh, g.pl - sc.x0 * g.dw
        if pt < 0:
            base, in_h, pt = base - pt * sh_v, in_h + pt, 0
        if pl < 0:
            base, in_w, pl = base - pl * sw_v, in_w + pl, 0
        block = g.block_bytes(sc.bh * sc.bw, cg)
        for k in range(cn // cg):
            out.append(Instruction.make(
                Opcode.CONV, in_addr=base + ((c0 + k * cg) // g.cout_g) * g.cin_g, in_h=in_h,
                in_w=in_w, in_stride_h=sh_v, in_stride_w=sw_v, cin=g.cin_g, in_zp=a["in_zp"],
                kh=sc.bh, kw=sc.bw, stride_h=g.sh // sc.fy, stride_w=g.sw // sc.fx,
                dil_h=g.dh, dil_w=g.dw, pad_top=pt, pad_left=pl, out_h=rows, out_w=g.ow,
                w_addr=gaddr + w_off + k * block, **g.w_fields(g.cin_g, cg), cout=cg,
                acc_addr=acc_addr + k * cg, acc_stride=cn,
                mode=AccMode.OVERWRITE if k_sub == 0 else AccMode.ACCUMULATE))
        w_off += cn // cg * block
    return out


def per_conv(g: ConvGeometry, chunk: int) -> int:
    """Output channels one CONV instruction produces: the whole chunk for an ordinary conv,
    one conv group for a grouped one."""
    return chunk if g.groups == 1 else g.cout_g


def blobs(node: Node, g: ConvGeometry, chunks: list[tuple[int, int]], ctx: CodegenContext
          ) -> list[bytes]:
    """Weights pre-tiled + parameters, chunk by chunk: one blob per chunk."""
    w = ctx.const(node.inputs[1]).astype(np.int8)  # OHWI
    params = _params(node, ctx)
    return [_chunk_weights(w, g, c0, cn) + params(c0, cn) for c0, cn in chunks]


def _blobs_all(node: Node, g: ConvGeometry, chunks: list[tuple[int, int]], ctx: CodegenContext
               ) -> tuple[bytes, bytes]:
    """The input-resident orders: every chunk's weights back to back, then the parameter
    table chunk by chunk; (weights, table)."""
    w = ctx.const(node.inputs[1]).astype(np.int8)  # OHWI
    params = _params(node, ctx)
    return (b"".join(_chunk_weights(w, g, c0, cn) for c0, cn in chunks),
            b"".join(params(c0, cn) for c0, cn in chunks))


def _params(node: Node, ctx: CodegenContext):
    """(c0, cn) -> the chunk's parameters as bytes: bias, q31, shift (int32 each)."""
    bias, mult, shift = (ctx.const(n).astype("<i4") for n in node.inputs[2:5])
    return lambda c0, cn: np.concatenate([bias[c0:c0 + cn], mult[c0:c0 + cn],
                                          shift[c0:c0 + cn]]).tobytes()


def _chunk_weights(w: np.ndarray, g: ConvGeometry, c0: int, cn: int) -> bytes:
    """Output channels [c0, c0 + cn) of the OHWI weights `w`, pre-tiled in read order: one
    block per CONV / DWCONV instruction (`weight_blocks`), int4 packed per block."""
    if g.depthwise:
        parts = [w[c0:c0 + cn, :, :, 0].reshape(cn, g.kh * g.kw).T]  # [kh*kw, cn]
    else:
        cg = per_conv(g, cn)
        parts = []
        for sc in sub_convs(g):  # per sub-conv, per CONV: [bh*bw*cin_g, cg]
            taps = w[:, sc.py::sc.fy, sc.px::sc.fx][:, sc.y0:sc.y0 + sc.bh,
                                                     sc.x0:sc.x0 + sc.bw]
            parts += [taps[o0:o0 + cg].reshape(cg, -1).T for o0 in range(c0, c0 + cn, cg)]
    if g.sparse:
        return b"".join(_sparse_block(p, g) for p in parts)
    flat = [np.ascontiguousarray(p).reshape(-1) for p in parts]
    if g.wbits == 4:
        return b"".join(pack_int4(f) for f in flat)
    return np.concatenate(flat).tobytes()


def _sparse_block(block: np.ndarray, g: ConvGeometry) -> bytes:
    """One CONV's [taps * cin_g, cg] weights as 2:4 values (int8, or int4 packed) and
    indices."""
    values, nibbles = encode(block.reshape(-1, g.cin_g, block.shape[1]))
    raw = pack_int4(values.reshape(-1)) if g.wbits == 4 else values.tobytes()
    return raw + pack_nibbles(nibbles)


def pack_int4(values: np.ndarray) -> bytes:
    """Signed 4-bit `values` two per byte, the even element in the low half (a zero half
    after an odd count)."""
    v = np.asarray(values, np.int64).reshape(-1)
    if v.size % 2:
        v = np.append(v, 0)
    return ((v[0::2] & 0xF) | ((v[1::2] & 0xF) << 4)).astype(np.uint8).tobytes()
