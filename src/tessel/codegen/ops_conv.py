"""qconv2d (NHWC) -> CONV on the matrix engine (DWCONV when depthwise: on the array's depthwise
mode or on the vector engine, whichever the mapping search finds faster), then REQUANT with
per-channel bias / multiplier / shift and the fused activation clamp.

Tiling: output-channel chunks (a group: weights and parameters stay resident while its tiles
run) x output-row tiles (each tile loads the input rows it needs, halo included). Weights are
pre-tiled in DRAM chunk by chunk as [kh*kw, cin/groups, cout/groups] per conv group (HWIO),
followed by the chunk's parameters (bias, q31, shift: 12 bytes per channel), in read order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessel.codegen import dma
from tessel.codegen.context import ISA_DTYPE, CodegenContext, SramPlan, align
from tessel.codegen.step import GroupWork, Slots, StepShape, StepWork, TileWork
from tessel.errors import TesselCompileError
from tessel.ir import Layout, Node
from tessel.isa import SPECS, Engine, Instruction, Opcode
from tessel.isa.fields import AccMode, AccSrc, ParamMode


@dataclass(frozen=True)
class ConvMapping:
    rows: int  # output rows per tile
    chunk: int  # output channels per group (a multiple of cout/groups)
    double_buffer: bool = True
    engine: Engine = Engine.MATRIX  # where DWCONV runs (depthwise only)

    def __str__(self) -> str:
        dw = " dw=vector" if self.engine is Engine.VECTOR else ""
        return f"rows={self.rows} cout_chunk={self.chunk}" + ("" if self.double_buffer
                                                                else " single-buffered") + dw


def window_rows(g, oy0: int, rows: int) -> tuple[int, int, int]:
    """(first input row, row count, tile pad_top) that output rows [oy0, oy0 + rows) of a
    sliding window (conv, pool: anything with h, kh, sh, dh, pt) read; rows past the input
    are the bottom padding the instruction supplies."""
    lo = oy0 * g.sh - g.pt
    hi = (oy0 + rows - 1) * g.sh - g.pt + (g.kh - 1) * g.dh
    r0, r1 = max(lo, 0), min(hi, g.h - 1)
    return r0, r1 - r0 + 1, r0 - lo


@dataclass(frozen=True)
class ConvGeometry:
    h: int
    w: int
    c: int
    oh: int
    ow: int
    cout: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    groups: int
    n: int = 1  # batch: images are independent, each tile belongs to one

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c == self.cout

    @property
    def cin_g(self) -> int:
        return self.c // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    def in_rows(self, oy0: int, rows: int) -> tuple[int, int, int]:
        return window_rows(self, oy0, rows)

    def weight_bytes(self, chunk: int) -> int:
        return self.kh * self.kw * (1 if self.depthwise else self.cin_g) * chunk


def refusal(node: Node, graph) -> str | None:
    """Why the NPU cannot run this qconv2d (its shape rules), or None. Asked before
    partitioning (`registry.npu_refusal`) and by `geometry`, so both agree."""
    a = node.attr_map
    if a["layout"] is not Layout.NHWC:
        return "the NPU needs NHWC convolutions (run the to_nhwc pass)"
    max_dil = SPECS[Opcode.CONV].field("dil_h").max
    if max(a["dilation"]) > max_dil:
        return f"dilation {max(a['dilation'])} is beyond the CONV instruction (max {max_dil})"
    max_pad = min(SPECS[op].field("pad_top").max for op in (Opcode.CONV, Opcode.DWCONV))
    if max(a["padding"][:2]) > max_pad:
        return (f"top / left padding {max(a['padding'][:2])} is beyond the CONV / DWCONV "
                f"instructions (max {max_pad})")
    if graph is None:
        return None
    c = graph.type_of(node.inputs[0]).shape[3]
    _, kh, kw, _ = graph.type_of(node.inputs[1]).shape  # OHWI
    depthwise = a["groups"] > 1 and a["groups"] == c
    big = max(kh, kw, *a["stride"]) > MAX_KERNEL
    if big and (depthwise or a["dilation"] != (1, 1) or (
            max(a["stride"]) > MAX_KERNEL and any(a["padding"]))):
        return (f"kernels or strides beyond {MAX_KERNEL} are supported for ordinary convs only "
                "(strides > 15 also need no padding and dilation 1)")
    return None


def geometry(node: Node, ctx: CodegenContext) -> ConvGeometry:
    a = node.attr_map
    why = refusal(node, ctx.graph)
    if why is not None:
        raise TesselCompileError(f"{node} at {node.loc}: {why}")
    n, h, w, c = ctx.graph.type_of(node.inputs[0]).shape
    _, oh, ow, cout = node.type.shape
    _, kh, kw, _ = ctx.graph.type_of(node.inputs[1]).shape  # OHWI
    return ConvGeometry(h, w, c, oh, ow, cout, kh, kw, *a["stride"], *a["dilation"],
                        a["padding"][0], a["padding"][1], a["groups"], n)


def candidates(node: Node, ctx: CodegenContext) -> list[ConvMapping]:
    """Mappings that fit SRAM and the accumulator: channel chunks x row tiles."""
    g = geometry(node, ctx)
    engines = (Engine.MATRIX, Engine.VECTOR) if g.depthwise else (Engine.MATRIX,)
    rows = {min(g.oh, r) for r in (1, 2, 4, 8, 16, 32, 64, 128, 256)}
    out = []
    for engine in engines:
        for ch in _chunks(g, ctx.arch.vector.lanes if engine is Engine.VECTOR
                          else ctx.arch.matrix.cols):
            for r in sorted(rows):
                for db in (True, False):  # single buffering only where double does not fit
                    m = ConvMapping(r, ch, db, engine)
                    try:
                        _layout(g, m, ctx, node)
                    except TesselCompileError:
                        continue
                    out.append(m)
                    break
    return out


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


def _layout(g: ConvGeometry, m: ConvMapping, ctx: CodegenContext, node: Node) -> _Layout:
    depth = 2 if m.double_buffer else 1
    plan = SramPlan(ctx.arch, f"{node}")
    gbytes = align(g.weight_bytes(m.chunk) + 12 * m.chunk)
    group = plan.sram(depth * gbytes, "weights+params")
    in_rows = min(g.h, (m.rows - 1) * g.sh + (g.kh - 1) * g.dh + 1)
    ibytes = align(in_rows * g.w * (m.chunk if g.depthwise else g.c))
    inp = plan.sram(depth * ibytes, "input tile")
    obytes = align(m.rows * g.ow * m.chunk * node.type.dtype.itemsize)
    out = plan.sram(depth * obytes, "output tile")
    entries = m.rows * g.ow * m.chunk
    acc = plan.acc((1 if on_vector(g, m) else depth) * entries, "accumulators")
    return _Layout(group, gbytes, inp, ibytes, out, obytes, acc, entries)


def step(node: Node, m: ConvMapping, ctx: CodegenContext, *, emit: bool) -> StepWork:
    """The step's work; with emit=False nothing is added to the constant pool (estimation)."""
    g = geometry(node, ctx)
    lay = _layout(g, m, ctx, node)
    chunks = [(c0, min(m.chunk, g.cout - c0)) for c0 in range(0, g.cout, m.chunk)]
    addrs = _pack(node, g, chunks, ctx) if emit else [0] * len(chunks)
    row_tiles = [(b, oy, min(m.rows, g.oh - oy)) for b in range(g.n)
                 for oy in range(0, g.oh, m.rows)]

    def group_fn(j: int, slot: int) -> GroupWork:
        cn = chunks[j][1]
        loads = dma.contiguous(Opcode.DMA_LOAD, ctx.consts.memory, addrs[j],
                               lay.group + slot * lay.group_stride,
                               g.weight_bytes(cn) + 12 * cn)
        if on_vector(g, m):  # DWCONV on the vector engine: its weights are vector data
            return GroupWork([], loads, [], len(row_tiles))
        return GroupWork(loads, [], [], len(row_tiles))

    def tile_fn(j: int, t: int, s: Slots) -> TileWork:
        return _tile(node, g, lay, chunks[j], row_tiles[t], s, ctx, on_vector(g, m))

    def tile_key(j: int, t: int) -> tuple[int, int, int, int]:
        """Tiles with the same chunk width, rows and input window cost the same."""
        _, in_rows, pad_top = g.in_rows(*row_tiles[t][1:])
        return chunks[j][1], row_tiles[t][2], in_rows, pad_top

    depth = 2 if m.double_buffer else 1
    shape = StepShape(uses_matrix=not on_vector(g, m), in_depth=depth, acc_depth=depth,
                      out_depth=depth, group_depth=depth)
    return StepWork(shape, len(chunks), group_fn, tile_fn, tile_key)


def _tile(node: Node, g: ConvGeometry, lay: _Layout, chunk: tuple[int, int],
          rows_tile: tuple[int, int, int], s: Slots, ctx: CodegenContext, vector: bool) -> TileWork:
    a = node.attr_map
    (c0, cn), (b, oy0, rows) = chunk, rows_tile
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
    r0, in_rows, pad_top = g.in_rows(oy0, rows)
    gaddr = lay.group + s.group * lay.group_stride
    iaddr = lay.inp + s.inp * lay.inp_stride
    cl = cn if g.depthwise else g.c  # channels loaded per pixel
    load = dma.pattern(Opcode.DMA_LOAD, x, (b * g.h + r0) * g.w * g.c + (c0 if g.depthwise else 0),
                       iaddr,
                       ((cl, 1, 1), (g.w, g.c, cl), (in_rows, g.w * g.c, g.w * cl)))
    acc_addr = lay.acc + (0 if vector else s.acc * lay.acc_stride)
    common = dict(in_h=in_rows, in_w=g.w, in_zp=a["in_zp"], kh=g.kh, kw=g.kw, stride_h=g.sh,
                  stride_w=g.sw, dil_h=g.dh, dil_w=g.dw, pad_top=pad_top, pad_left=g.pl,
                  out_h=rows, out_w=g.ow, mode=AccMode.OVERWRITE)
    if g.depthwise:
        compute = [Instruction.make(Opcode.DWCONV, in_addr=iaddr, in_stride_h=g.w * cn,
                                    in_stride_w=cn, ch=cn, w_addr=gaddr, w_stride_k=cn,
                                    acc_addr=acc_addr, acc_stride=cn, **common)]
    else:
        compute = _convs(g, a, cn, c0, iaddr, in_rows, pad_top, rows, gaddr, acc_addr)
    oaddr = lay.out + s.out * lay.out_stride
    dt = ISA_DTYPE[node.type.dtype]
    req = Instruction.make(
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc_addr, src_stride=cn, rows=rows * g.ow,
        ch=cn, out_dtype=dt, dst_addr=oaddr, dst_stride=cn * y.itemsize,
        param_addr=gaddr + g.weight_bytes(cn), param_mode=ParamMode.PER_CHANNEL,
        out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"])
    store = dma.pattern(Opcode.DMA_STORE, y, (b * g.oh + oy0) * g.ow * g.cout + c0, oaddr,
                        ((cn, 1, 1), (rows * g.ow, g.cout, cn)))
    if vector:
        return TileWork([load], [], compute + [req], [store])
    return TileWork([load], compute, [req], [store])


MAX_KERNEL = 15  # CONV's kh / kw / stride fields (4 bits)


def _split(k: int) -> list[tuple[int, int]]:
    """(first tap, taps) blocks of at most MAX_KERNEL taps covering k taps."""
    n = -(-k // MAX_KERNEL)
    sizes = [k // n + (1 if i < k % n else 0) for i in range(n)]
    return [(sum(sizes[:i]), sizes[i]) for i in range(n)]


def _phase_factor(stride: int) -> int:
    """Smallest f dividing `stride` with stride / f <= MAX_KERNEL (1 when it already fits)."""
    return next(f for f in range(1, stride + 1) if stride % f == 0 and stride // f <= MAX_KERNEL)


@dataclass(frozen=True)
class SubConv:
    """One CONV's share of the kernel: taps ky = py + fy * (y0 + i) for i < bh (same for x).

    Kernels over 15 taps split into accumulating blocks; strides over 15 use the polyphase
    identity: with f | stride, a stride-s conv is the sum over phases (py, px) of stride-s/f
    convs on the input subsampled by f from offset (py, px) (needs no padding, dilation 1)."""

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
    cg = _per_conv(g, cn)  # output channels of one CONV (the chunk, or one conv group)
    out, w_off = [], 0
    for k_sub, sc in enumerate(sub_convs(g)):
        sh_v, sw_v = g.w * g.c * sc.fy, g.c * sc.fx  # strides of the virtual image
        base = iaddr + sc.py * g.w * g.c + sc.px * g.c
        in_h, in_w = -(-(in_rows - sc.py) // sc.fy), -(-(g.w - sc.px) // sc.fx)
        pt, pl = pad_top - sc.y0 * g.dh, g.pl - sc.x0 * g.dw
        if pt < 0:
            base, in_h, pt = base - pt * sh_v, in_h + pt, 0
        if pl < 0:
            base, in_w, pl = base - pl * sw_v, in_w + pl, 0
        for k in range(cn // cg):
            out.append(Instruction.make(
                Opcode.CONV, in_addr=base + ((c0 + k * cg) // g.cout_g) * g.cin_g, in_h=in_h,
                in_w=in_w, in_stride_h=sh_v, in_stride_w=sw_v, cin=g.cin_g, in_zp=a["in_zp"],
                kh=sc.bh, kw=sc.bw, stride_h=g.sh // sc.fy, stride_w=g.sw // sc.fx,
                dil_h=g.dh, dil_w=g.dw, pad_top=pt, pad_left=pl, out_h=rows, out_w=g.ow,
                w_addr=gaddr + w_off + k * sc.bh * sc.bw * g.cin_g * cg,
                w_stride_k=g.cin_g * cg, w_stride_ci=cg, w_stride_co=1, w_zp=0, cout=cg,
                acc_addr=acc_addr + k * cg, acc_stride=cn,
                mode=AccMode.OVERWRITE if k_sub == 0 else AccMode.ACCUMULATE))
        w_off += sc.bh * sc.bw * g.cin_g * cn
    return out


def _per_conv(g: ConvGeometry, chunk: int) -> int:
    """Output channels one CONV instruction produces: the whole chunk for an ordinary conv,
    one conv group for a grouped one."""
    return chunk if g.groups == 1 else g.cout_g


def _pack(node: Node, g: ConvGeometry, chunks: list[tuple[int, int]], ctx: CodegenContext
          ) -> list[int]:
    """Pre-tile weights + parameters chunk by chunk into the constant pool; chunk addresses."""
    w = ctx.const(node.inputs[1]).astype(np.int8)  # OHWI
    bias, mult, shift = (ctx.const(n).astype("<i4") for n in node.inputs[2:5])
    addrs = []
    for c0, cn in chunks:
        if g.depthwise:
            wt = w[c0:c0 + cn, :, :, 0].reshape(cn, g.kh * g.kw).T  # [kh*kw, cn]
        else:
            cg = _per_conv(g, cn)
            parts = []
            for sc in sub_convs(g):  # per sub-conv, per CONV: [bh*bw*cin_g, cg]
                taps = w[:, sc.py::sc.fy, sc.px::sc.fx][:, sc.y0:sc.y0 + sc.bh,
                                                         sc.x0:sc.x0 + sc.bw]
                parts += [taps[o0:o0 + cg].reshape(cg, -1).T for o0 in range(c0, c0 + cn, cg)]
            wt = np.concatenate([p.reshape(-1) for p in parts])
        params = np.concatenate([bias[c0:c0 + cn], mult[c0:c0 + cn], shift[c0:c0 + cn]])
        addrs.append(ctx.consts.add(np.ascontiguousarray(wt).tobytes() + params.tobytes()))
    return addrs
