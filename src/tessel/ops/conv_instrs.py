"""The instructions of one qconv2d tile (tessel.ops.conv_emit lays the tiles out in SRAM):
the load of its input rows, its CONV instructions (per sub-conv and conv group) or DWCONV, the
REQUANT with per-channel parameters and the fused activation clamp, and the store of its
output.
"""

from __future__ import annotations

from tessel.ir import Node
from tessel.isa import Instruction, Opcode
from tessel.isa.fields import AccMode, AccSrc, ParamMode
from tessel.ops import dma
from tessel.ops.context import ISA_DTYPE, CodegenContext
from tessel.ops.conv_geometry import ConvGeometry, per_conv, sub_convs
from tessel.ops.quantise import rounding_of


def input_load(node: Node, g: ConvGeometry, chans: tuple[int, int],
               rows_tile: tuple[int, int, int], iaddr: int, ctx: CodegenContext) -> Instruction:
    """The load of the input rows output rows `rows_tile` read, channels [c0, c0 + cl)."""
    (c0, cl), (b, oy0, rows) = chans, rows_tile
    r0, in_rows, _ = g.in_rows(oy0, rows)
    return dma.pattern(Opcode.DMA_LOAD, ctx.tensor(node.inputs[0]),
                       (b * g.h + r0) * g.w * g.c + c0, iaddr,
                       ((cl, 1, 1), (g.w, g.c, cl), (in_rows, g.w * g.c, g.w * cl)))


def compute(node: Node, g: ConvGeometry, chunk: tuple[int, int], rows_tile: tuple[int, int, int],
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
    """compute's CONV / DWCONV instructions and REQUANT."""
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
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc_addr, src_stride=cn * g.entries,
        rows=rows * g.ow, ch=cn, out_dtype=dt, dst_addr=oaddr, dst_stride=cn * itemsize,
        param_addr=paddr, param_mode=ParamMode.PER_CHANNEL,
        out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"], rounding=rounding_of(a),
        acc_width=g.acc_width)
    return compute, req


def _convs(g: ConvGeometry, a: dict, cn: int, c0: int, iaddr: int, in_rows: int, pad_top: int,
           rows: int, gaddr: int, acc_addr: int) -> list[Instruction]:
    """CONV instructions of one tile: per sub-conv (kernel block / stride phase), per conv
    group of the chunk; all but the first sub-conv accumulate. A sub-conv reads a virtual
    image (rows py, py+fy, ... of the tile); its first tap y0 shifts the padding, or the base
    when the padding runs out. A sub-conv whose taps all fall in the padding past the input's
    end (a kernel block beyond a small input) adds nothing: it has no CONV (the first sub-conv,
    taps from 0 of phase 0, always reads the input)."""
    cg = per_conv(g, cn)  # output channels of one CONV (the chunk, or one conv group)
    out, w_off = [], 0  # w_off: bytes of the blocks before this CONV's
    xb, ent = g.xb, g.entries  # bytes of an input element, entries of a result
    for k_sub, sc in enumerate(sub_convs(g)):
        sh_v, sw_v = g.w * g.c * sc.fy * xb, g.c * sc.fx * xb  # strides of the virtual image
        base = iaddr + (sc.py * g.w * g.c + sc.px * g.c) * xb
        in_h, in_w = -(-(in_rows - sc.py) // sc.fy), -(-(g.w - sc.px) // sc.fx)
        pt, pl = pad_top - sc.y0 * g.dh, g.pl - sc.x0 * g.dw
        if pt < 0:
            base, in_h, pt = base - pt * sh_v, in_h + pt, 0
        if pl < 0:
            base, in_w, pl = base - pl * sw_v, in_w + pl, 0
        block = g.block_bytes(sc.bh * sc.bw, cg)
        if (in_h <= 0 or in_w <= 0) and k_sub > 0:  # padding only: (x - in_zp) w = 0
            w_off += cn // cg * block
            continue
        for k in range(cn // cg):
            out.append(Instruction.make(
                Opcode.CONV, in_addr=base + ((c0 + k * cg) // g.cout_g) * g.cin_g * xb, in_h=in_h,
                in_w=in_w, in_stride_h=sh_v, in_stride_w=sw_v, cin=g.cin_g, in_zp=a["in_zp"],
                kh=sc.bh, kw=sc.bw, stride_h=g.sh // sc.fy, stride_w=g.sw // sc.fx,
                dil_h=g.dh, dil_w=g.dw, pad_top=pt, pad_left=pl, out_h=rows, out_w=g.ow,
                w_addr=gaddr + w_off + k * block, **g.w_fields(g.cin_g, cg), cout=cg,
                acc_addr=acc_addr + k * cg * ent, acc_stride=cn * ent,
                mode=AccMode.OVERWRITE if k_sub == 0 else AccMode.ACCUMULATE,
                in_type=g.in_type))
        w_off += cn // cg * block
    return out
