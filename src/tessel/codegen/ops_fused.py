"""Cross-layer fusion (cascading): a 1x1 convolution followed by the depthwise convolution that
is its only reader (MobileNetV2's expand -> depthwise) runs as one step in row stripes, so the
expanded activation never leaves SRAM.

Per tile (a stripe of depthwise output rows and a channel chunk): DMA_IN loads the input rows
the stripe needs (halo included); MATRIX runs the 1x1 CONV on them; VECTOR requantises into a
stripe buffer in SRAM, runs DWCONV on it and requantises again; DMA_OUT stores the stripe.
Halo rows are recomputed by neighbouring stripes. Each layer's semantics are those of its own
qconv2d (the same instructions as unfused), so the result is bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.codegen import dma, ops_conv
from tessel.codegen.context import ISA_DTYPE, CodegenContext, SramPlan, align
from tessel.codegen.step import GroupWork, Slots, StepShape, StepWork, TileWork
from tessel.errors import TesselCompileError
from tessel.ir import Graph, Node, Op
from tessel.isa import Instruction, Opcode
from tessel.isa.fields import AccMode, AccSrc, ParamMode


@dataclass(frozen=True)
class FusedPair:
    """Two consecutive ops compiled as one step (first's result stays on chip)."""

    first: Node
    second: Node

    @property
    def name(self) -> str:
        return f"{self.first.name}+{self.second.name}"

    @property
    def nodes(self) -> tuple[Node, Node]:
        return self.first, self.second


@dataclass(frozen=True)
class FusedMapping:
    rows: int  # depthwise output rows per stripe
    chunk: int  # channels per group

    def __str__(self) -> str:
        return f"fused stripes rows={self.rows} ch_chunk={self.chunk}"


def fusible(graph: Graph, first: Node, second: Node) -> bool:
    """1x1 stride-1 unpadded ordinary conv whose only reader is a depthwise conv (batch 1)."""
    if first.op is not Op.QCONV2D or second.op is not Op.QCONV2D or first.type.shape[0] != 1:
        return False
    if second.inputs[0] != first.name or graph.num_uses(first.name) != 1:
        return False
    a, b = first.attr_map, second.attr_map
    wt = graph.type_of(first.inputs[1]).shape
    c = first.type.shape[3]
    return (a["groups"] == 1 and wt[1:3] == (1, 1) and a["stride"] == (1, 1)
            and not any(a["padding"]) and b["groups"] == c > 1
            and graph.type_of(second.inputs[1]).shape[3] == 1
            and first.type.dtype == second.type.dtype)


def candidates(pair: FusedPair, ctx: CodegenContext) -> list[FusedMapping]:
    g2 = ops_conv.geometry(pair.second, ctx)
    out = []
    for chunk in sorted({min(g2.cout, k * ctx.arch.matrix.cols) for k in (1, 2, 4, 8, 16)}
                        | {g2.cout}):
        for rows in sorted({min(g2.oh, r) for r in (1, 2, 4, 8, 16, 32)}):
            m = FusedMapping(rows, chunk)
            try:
                _layout(pair, m, ctx)
            except TesselCompileError:
                continue
            out.append(m)
    return out


@dataclass(frozen=True)
class _Layout:
    g1: int
    g1_stride: int
    g2: int
    g2_stride: int
    inp: int
    inp_stride: int
    mid: int
    out: int
    out_stride: int
    acc1: int
    acc1_stride: int
    acc2: int


def _layout(pair: FusedPair, m: FusedMapping, ctx: CodegenContext) -> _Layout:
    g1, g2 = ops_conv.geometry(pair.first, ctx), ops_conv.geometry(pair.second, ctx)
    plan = SramPlan(ctx.arch, pair.name)
    b1 = align(g1.weight_bytes(m.chunk) + 12 * m.chunk)
    b2 = align(g2.weight_bytes(m.chunk) + 12 * m.chunk)
    in_rows = min(g2.h, (m.rows - 1) * g2.sh + (g2.kh - 1) * g2.dh + 1)
    ibytes = align(in_rows * g1.w * g1.c)
    obytes = align(m.rows * g2.ow * m.chunk * pair.second.type.dtype.itemsize)
    gp1 = plan.sram(2 * b1, "expand weights")
    gp2 = plan.sram(2 * b2, "depthwise weights")
    inp = plan.sram(2 * ibytes, "input stripe")
    mid = plan.sram(align(in_rows * g1.w * m.chunk * pair.first.type.dtype.itemsize),
                    "expanded stripe")
    out = plan.sram(2 * obytes, "output stripe")
    e1 = in_rows * g1.w * m.chunk
    acc1 = plan.acc(2 * e1, "expand accumulators")
    acc2 = plan.acc(m.rows * g2.ow * m.chunk, "depthwise accumulators")
    return _Layout(gp1, b1, gp2, b2, inp, ibytes, mid, out, obytes, acc1, e1, acc2)


def step(pair: FusedPair, m: FusedMapping, ctx: CodegenContext, *, emit: bool) -> StepWork:
    g1, g2 = ops_conv.geometry(pair.first, ctx), ops_conv.geometry(pair.second, ctx)
    lay = _layout(pair, m, ctx)
    chunks = [(c0, min(m.chunk, g2.cout - c0)) for c0 in range(0, g2.cout, m.chunk)]
    if emit:
        a1 = ops_conv._pack(pair.first, g1, chunks, ctx)
        a2 = ops_conv._pack(pair.second, g2, chunks, ctx)
    else:
        a1 = a2 = [0] * len(chunks)
    stripes = [(oy, min(m.rows, g2.oh - oy)) for oy in range(0, g2.oh, m.rows)]
    mem = ctx.consts.memory

    def group_fn(j: int, slot: int) -> GroupWork:
        cn = chunks[j][1]
        w1 = dma.contiguous(Opcode.DMA_LOAD, mem, a1[j], lay.g1 + slot * lay.g1_stride,
                            g1.weight_bytes(cn) + 12 * cn)
        w2 = dma.contiguous(Opcode.DMA_LOAD, mem, a2[j], lay.g2 + slot * lay.g2_stride,
                            g2.weight_bytes(cn) + 12 * cn)
        return GroupWork(w1, w2, [], len(stripes))

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        return _tile(pair, g1, g2, lay, chunks[j], stripes[t], s, ctx)

    def tile_key(j: int, t: int) -> tuple[int, ...]:
        return (chunks[j][1], stripes[t][1], *g2.in_rows(*stripes[t])[1:])

    return StepWork(StepShape(uses_matrix=True), len(chunks), group_fn, tile_fn, tile_key)


def _tile(pair: FusedPair, g1, g2, lay: _Layout, chunk: tuple[int, int],
          stripe: tuple[int, int], s: Slots, ctx: CodegenContext) -> TileWork:
    a1, a2 = pair.first.attr_map, pair.second.attr_map
    (c0, cn), (oy0, rows) = chunk, stripe
    x, y = ctx.tensor(pair.first.inputs[0]), ctx.tensor(pair.second.name)
    r0, in_rows, pad_top = g2.in_rows(oy0, rows)
    iaddr = lay.inp + s.inp * lay.inp_stride
    load = dma.pattern(Opcode.DMA_LOAD, x, r0 * g1.w * g1.c, iaddr,
                       ((g1.c, 1, 1), (g1.w, g1.c, g1.c), (in_rows, g1.w * g1.c, g1.w * g1.c)))
    gw1 = lay.g1 + s.group * lay.g1_stride
    gw2 = lay.g2 + s.group * lay.g2_stride
    acc1 = lay.acc1 + s.acc * lay.acc1_stride
    expand = Instruction.make(
        Opcode.CONV, in_addr=iaddr, in_h=in_rows, in_w=g1.w, in_stride_h=g1.w * g1.c,
        in_stride_w=g1.c, cin=g1.c, in_zp=a1["in_zp"], kh=1, kw=1, stride_h=1, stride_w=1,
        dil_h=1, dil_w=1, pad_top=0, pad_left=0, out_h=in_rows, out_w=g1.w, w_addr=gw1,
        w_stride_k=g1.c * cn, w_stride_ci=cn, w_stride_co=1, w_zp=0, cout=cn, acc_addr=acc1,
        acc_stride=cn, mode=AccMode.OVERWRITE)
    isz1 = pair.first.type.dtype.itemsize
    req1 = Instruction.make(
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc1, src_stride=cn, rows=in_rows * g1.w,
        ch=cn, out_dtype=ISA_DTYPE[pair.first.type.dtype], dst_addr=lay.mid,
        dst_stride=cn * isz1, param_addr=gw1 + g1.weight_bytes(cn),
        param_mode=ParamMode.PER_CHANNEL, out_zp=a1["out_zp"], act_min=a1["act_min"],
        act_max=a1["act_max"])
    dw = Instruction.make(
        Opcode.DWCONV, in_addr=lay.mid, in_h=in_rows, in_w=g2.w, in_stride_h=g2.w * cn,
        in_stride_w=cn, ch=cn, in_zp=a2["in_zp"], kh=g2.kh, kw=g2.kw, stride_h=g2.sh,
        stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=pad_top, pad_left=g2.pl,
        out_h=rows, out_w=g2.ow, w_addr=gw2, w_stride_k=cn, acc_addr=lay.acc2,
        acc_stride=cn, mode=AccMode.OVERWRITE)
    oaddr = lay.out + s.out * lay.out_stride
    req2 = Instruction.make(
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=lay.acc2, src_stride=cn, rows=rows * g2.ow,
        ch=cn, out_dtype=ISA_DTYPE[pair.second.type.dtype], dst_addr=oaddr,
        dst_stride=cn * y.itemsize, param_addr=gw2 + g2.weight_bytes(cn),
        param_mode=ParamMode.PER_CHANNEL, out_zp=a2["out_zp"], act_min=a2["act_min"],
        act_max=a2["act_max"])
    store = dma.pattern(Opcode.DMA_STORE, y, oy0 * g2.ow * g2.cout + c0, oaddr,
                        ((cn, 1, 1), (rows * g2.ow, g2.cout, cn)))
    return TileWork([load], [expand], [req1, dw, req2], [store])
