"""Cross-layer fusion (cascading): a chain of consecutive layers around a depthwise conv (or a
max pool, or a second conv) runs as one step in row stripes of that windowed layer's output,
so the chain's intermediate tensors never leave SRAM. Chains (tessel.schedule.fusion), all batch 1, int8, each
intermediate read only by the next member (not a graph output):

* conv -> depthwise: an ordinary conv (MobileNetV2's 1x1 expand, or a stem 3x3) and the
  depthwise conv reading it ("pair");
* conv -> depthwise -> 1x1 project [-> qadd]: a MobileNetV2 inverted residual as one step, the
  residual add (its other operand any DRAM tensor of the output's shape) as an epilogue;
* depthwise -> 1x1 project [-> qadd] (blocks without an expand);
* conv -> int8 max pool (ResNet's stem): a pair whose windowed member is the pool (`pooled`):
  its POOL runs on VECTOR over the line buffer's window into the output slot (no weights, no
  requantisation, no depthwise accumulators); the pool's geometry as a depthwise conv's;
* conv -> ordinary conv of kernel height > 1 (`halo_conv`): one chunk of all the first conv's
  channels in the line buffer; the second conv's CONV (all channels) runs on MATRIX over
  each stripe's window (a DW tile on MATRIX), requantised and stored.

Tiles, per stripe of depthwise output rows and channel chunk:

* CONV: DMA_IN loads the conv's input rows for the depthwise input rows no earlier stripe
  computed; MATRIX runs the conv on them; VECTOR requantises them into the chunk's line
  buffer. The line buffer fills downwards and carries the depthwise halo from stripe to
  stripe (no row is computed twice); when a window would pass its end, the rows still needed
  move to its top (one COPY) and it fills again ("rebase");
* DW: DWCONV over the window (on MATRIX, the array's depthwise mode, or on VECTOR: a mapping
  choice) and its requantisation, into the output slot (pair, stored) or into a stripe buffer
  of all channels (project chains). With the depthwise conv on VECTOR, CONV and DW are one
  tile (CONV_DW). A depthwise-first chain loads the depthwise window from DRAM;
* P (project chains, per stripe): MATRIX runs the 1x1 CONV over the stripe buffer, VECTOR
  requantises (and runs the qadd's ELTWISE with the residual rows DMA_IN loaded), DMA_OUT
  stores the stripe.

Each layer keeps the instructions of its own qconv2d / qadd, so the result is bit-identical.

The chain's geometry and layout are tessel.ops.fused_geometry, the order of its tiles
tessel.ops.fused_order.
"""

from __future__ import annotations

from tessel.errors import TesselCompileError
from tessel.ir import DType, Node
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.fields import AccMode, AccSrc, EltOp, ParamMode, PoolOp
from tessel.ops import conv_weights, dma, eltwise_emit
from tessel.ops.context import (
    ISA_DTYPE,
    CodegenContext,
    PlacedConstants,
    StepConstants,
    const_addresses,
)
from tessel.ops.fused_geometry import (
    IN_DEPTH,
    ChainGeometry,
    FusedChain,
    FusedMapping,
    Layout,
    Stripe,
    geometries,
    layout,
    pixel,
)
from tessel.ops.fused_order import Tile, TileKind, order, tile_plan
from tessel.ops.quantise import rounding_of
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

DEPTHS = (2, 3)  # accumulator ring depths the search tries


def candidates(chain: FusedChain, ctx: CodegenContext) -> list[FusedMapping]:
    geoms = geometries(chain, ctx)
    g2 = geoms[1]
    cols = ctx.arch.matrix.cols
    acc_entries = ctx.arch.onchip.acc_bytes // 4
    out = []
    # a max pool runs on VECTOR only, a second conv on MATRIX over all its input channels
    engines = ((Engine.VECTOR,) if chain.pooled else (Engine.MATRIX,) if chain.halo_conv
               else (Engine.MATRIX, Engine.VECTOR))
    for engine in engines:
        width = cols if engine is Engine.MATRIX else ctx.arch.vector.lanes
        chunks = sorted({min(g2.cout, k * width) for k in (1, 2, 4, 8, 16)} | {g2.cout})
        for chunk in [g2.c] if chain.halo_conv else chunks:
            for rows in sorted({min(g2.oh, r) for r in (1, 2, 4, 8, 16, 32)}):
                for depth in DEPTHS:
                    if _acc_floor(geoms, rows, chunk, engine, depth,
                                  chain.pooled, chain.halo_conv) > acc_entries:
                        continue  # layout would refuse it at every line length
                    for line in (4, 1, 0):  # shorter line buffers where longer do not fit
                        m = FusedMapping(rows, chunk, engine, line, depth)
                        try:
                            layout(chain, ChainGeometry(chain, m, ctx, geoms), m, ctx)
                        except TesselCompileError:
                            continue
                        out.append(m)
                        break
    return out


def _acc_floor(geoms: tuple, rows: int, chunk: int, engine: Engine, depth: int,
               pooled: bool = False, halo_conv: bool = False) -> int:
    """At most the accumulator entries layout allocates for such a mapping at any line
    length (its first stripe computes every conv row it reads: keep = 0), so a mapping above
    the accumulator's capacity is skipped without building its stripes."""
    g1, g2, g3 = geoms
    rows = min(rows, g2.oh)
    entries = 1
    if g1 is not None:
        entries = max(entries, g2.in_rows(0, rows)[1] * g2.w * chunk)
    if engine is Engine.MATRIX:
        entries = max(entries, rows * g2.ow * (g2.cout if halo_conv else chunk))
    if g3 is not None:
        entries = max(entries, rows * g3.ow * g3.cout)
    return depth * entries + (0 if engine is Engine.MATRIX or pooled
                              else rows * g2.ow * chunk)


def _const_chunks(chain: FusedChain, geo: ChainGeometry) -> tuple[list, list, list]:
    """Channel chunks of the conv's, the windowed member's and the project's constant blobs
    (a max pool has none; a halo conv and the project are one chunk)."""
    g2, g3 = geo.g2, geo.g3
    return (geo.chunks if geo.g1 is not None else [],
            [] if chain.pooled else [(0, g2.cout)] if chain.halo_conv else geo.chunks,
            [(0, g3.cout)] if g3 is not None else [])


def constants(chain: FusedChain, m: FusedMapping, ctx: CodegenContext) -> StepConstants:
    """The step's constant blobs in read order: the conv's chunks, the windowed member's
    chunks, the project's (each a chunk's pre-tiled weights and parameters, conv_weights)."""
    geo = ChainGeometry(chain, m, ctx)
    members = (chain.conv, chain.dw, chain.project)
    blobs = [b for node, g, chunks in zip(members, (geo.g1, geo.g2, geo.g3),
                                          _const_chunks(chain, geo), strict=True)
             if chunks for b in conv_weights.blobs(node, g, chunks, ctx)]
    return StepConstants(tuple(blobs))


def step(chain: FusedChain, m: FusedMapping, ctx: CodegenContext,
         placed: PlacedConstants | None = None) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    geo = ChainGeometry(chain, m, ctx)
    lay = layout(chain, geo, m, ctx)
    g1, g2, g3 = geo.g1, geo.g2, geo.g3
    n1, n2, n3 = (len(c) for c in _const_chunks(chain, geo))
    addrs = const_addresses(placed, n1 + n2 + n3)
    a1 = addrs[:n1]
    a2 = addrs[n1:n1 + n2] if n2 else (0,) * len(geo.chunks)
    a3 = addrs[n1 + n2] if n3 else 0
    groups, hosts = order(tile_plan(chain, geo))
    mem = ctx.consts.memory

    def wload(addr: int, sram: int, g, cn: int) -> list[Instruction]:
        return dma.contiguous(Opcode.DMA_LOAD, mem, addr, sram, g.weight_bytes(cn) + 12 * cn)

    alike: dict[tuple[int, int, int], GroupWork] = {}  # (slot, chunk, tiles) -> a pair's group

    def group_fn(gi: int, slot: int) -> GroupWork:
        count = len(groups[gi])
        if chain.project is not None:
            if gi:
                return GroupWork([], [], [], count)
            wl = [ins for j, (_, cn) in enumerate(geo.chunks) if g1 is not None
                  for ins in wload(a1[j], lay.w1[j], g1, cn)]
            wl += wload(a3, lay.w3, g3, g3.cout)
            dwl = [ins for j, (_, cn) in enumerate(geo.chunks)
                   for ins in wload(a2[j], lay.w2[j], g2, cn)]
            return GroupWork(wl + dwl, [], [], count) if geo.dw_matrix else (
                GroupWork(wl, dwl, [], count))
        cn = geo.chunks[gi][1]
        key = (slot, cn, count)
        if placed is None and key in alike:  # estimating: every constant at address 0
            return alike[key]
        w1 = wload(a1[gi], lay.w1[slot], g1, cn) if g1 is not None else []
        w2 = [] if chain.pooled else wload(a2[gi], lay.w2[slot], g2,
                                               g2.cout if chain.halo_conv else cn)
        group = GroupWork(w1 + w2, [], [], count) if geo.dw_matrix else (
            GroupWork(w1, w2, [], count))
        if placed is None:
            alike[key] = group
        return group

    def tile_fn(gi: int, t: int, s: Slots) -> TileWork:
        tl = groups[gi][t]
        if tl.kind is TileKind.EMPTY:
            work = TileWork()
        elif tl.kind is TileKind.P:
            work = _project_tile(chain, geo, lay, tl, s, ctx)
        else:
            key = (tl.chunk if chain.project is None else -1, tl.stripe)
            work = _e_tile(chain, geo, lay, tl, s, ctx, hosts.buffer(key))
        for i, b in hosts.at(tl.pos):
            work.loads.append(_conv_rows_load(chain, geo, lay, geo.stripes[i], b, ctx))
        return work

    def tile_key(gi: int, t: int) -> tuple:
        tl = groups[gi][t]
        st = geo.stripes[tl.stripe]
        cn = geo.chunks[tl.chunk][1]
        # what the tile's costs and events read: shapes, not rows' positions or paddings, and
        # of the mapping only the depthwise engine (the others are addresses or in the shapes:
        # the key holds across the chain's candidates, StepWork.cost_scope)
        win = geo.conv_window(st)[1] if g1 is not None and st.new else 0
        hosted = tuple(geo.conv_window(geo.stripes[i])[1] for i, _ in hosts.at(tl.pos))
        return (tl.kind, geo.dw_matrix, cn, st.rows, st.n, st.keep, st.moved >= 0, st.new, win,
                hosted)

    shape = StepShape(uses_matrix=True, in_depth=IN_DEPTH, acc_depth=m.depth, group_depth=2)
    return StepWork(shape, len(groups), group_fn, tile_fn, tile_key, ctx.cost_scope(chain))


def _conv_req(node: Node, acc: int, rows: int, ch: int, dst: int, dst_stride: int,
              params: int) -> Instruction:
    a = node.attr_map
    return Instruction.make(
        Opcode.REQUANT, src=AccSrc.ACC, src_addr=acc, src_stride=ch, rows=rows, ch=ch,
        out_dtype=ISA_DTYPE[node.type.dtype], dst_addr=dst, dst_stride=dst_stride,
        param_addr=params, param_mode=ParamMode.PER_CHANNEL, out_zp=a["out_zp"],
        act_min=a["act_min"], act_max=a["act_max"], rounding=rounding_of(a))


def _conv_rows_load(chain: FusedChain, geo: ChainGeometry, lay: Layout, st: Stripe, b: int,
                    ctx: CodegenContext) -> Instruction:
    g1 = geo.g1
    r0, in_rows, _ = geo.conv_window(st)
    x = ctx.tensor(chain.conv.inputs[0])
    ps = pixel(g1)
    return dma.pattern(Opcode.DMA_LOAD, x, r0 * g1.w * g1.c, lay.xin + b * lay.xin_stride,
                       ((g1.c, 1, 1), (g1.w, g1.c, ps), (in_rows, g1.w * g1.c, g1.w * ps)))


def _e_tile(chain: FusedChain, geo: ChainGeometry, lay: Layout, tl: Tile, s: Slots,
            ctx: CodegenContext, xbuf: int) -> TileWork:
    """A CONV, DW or CONV_DW tile of stripe `tl.stripe`, chunk `tl.chunk`."""
    g1, g2 = geo.g1, geo.g2
    st = geo.stripes[tl.stripe]
    c0, cn = geo.chunks[tl.chunk]
    chain_mode = chain.project is not None
    w1 = lay.w1[tl.chunk if chain_mode else s.group] if g1 is not None else 0
    w2 = lay.w2[tl.chunk if chain_mode else s.group]
    acc = lay.acc + s.acc * lay.acc_stride
    iaddr = lay.inp + s.inp * lay.inp_stride
    loads: list[Instruction] = []
    matrix: list[Instruction] = []
    vector: list[Instruction] = []
    stores: list[Instruction] = []
    a2 = chain.dw.attr_map
    line = lay.line[tl.chunk] if g1 is not None else 0
    row = g2.w * cn  # bytes of one line-buffer row
    if tl.kind in (TileKind.CONV, TileKind.CONV_DW):
        if st.new:  # its input rows were loaded into buffer xbuf (fused_order.Hosts)
            _, in_rows, pad_top = geo.conv_window(st)
            ps = pixel(g1)
            matrix.append(Instruction.make(
                Opcode.CONV, in_addr=lay.xin + xbuf * lay.xin_stride, in_h=in_rows, in_w=g1.w,
                in_stride_h=g1.w * ps, in_stride_w=ps, cin=g1.c,
                in_zp=chain.conv.attr_map["in_zp"], kh=g1.kh, kw=g1.kw, stride_h=g1.sh,
                stride_w=g1.sw, dil_h=g1.dh, dil_w=g1.dw, pad_top=pad_top, pad_left=g1.pl,
                out_h=st.new, out_w=g1.ow, w_addr=w1, w_stride_k=g1.c * cn, w_stride_ci=cn,
                w_stride_co=1, w_zp=0, cout=cn, acc_addr=acc, acc_stride=cn,
                mode=AccMode.OVERWRITE, w_type=g1.w_type))
        if st.moved >= 0:  # rebase: the rows still needed move to the top (reads first)
            vector.append(Instruction.make(
                Opcode.COPY, dtype=ISA_DTYPE[DType.I8], d0=cn, d1=st.keep * g2.w,
                src_addr=line + st.moved * row, src_s0=1, src_s1=cn, dst_addr=line, dst_s0=1,
                dst_s1=cn))
        if st.new:
            vector.append(_conv_req(chain.conv, acc, st.new * g2.w, cn,
                                    line + (st.off + st.new0 - st.r0) * row, cn,
                                    w1 + g1.weight_bytes(cn)))
        if tl.kind is TileKind.CONV:
            return TileWork(loads, matrix, vector, stores)
    if g1 is not None:
        dw_in = line + st.off * row
    elif geo.dw_matrix:  # depthwise input window from DRAM, into the input slot
        dw_in = iaddr
    else:  # ... into a VIN buffer
        dw_in = lay.vin + (tl.pos % geo.vin_slots) * lay.vin_stride
    if g1 is None:
        x = ctx.tensor(chain.dw.inputs[0])
        loads.append(dma.pattern(Opcode.DMA_LOAD, x, st.r0 * g2.w * g2.c + c0, dw_in,
                                 ((cn, 1, 1), (g2.w, g2.c, cn), (st.n, g2.w * g2.c, g2.w * cn))))
    if chain.halo_conv:  # the second conv's CONV over the window (all channels), stored
        return _halo_conv_tile(chain, geo, lay, st, s, ctx, dw_in, w2, acc,
                               TileWork(loads, matrix, vector, stores))
    if chain.pooled:  # the max pool's POOL over the window, into the output slot
        y = ctx.tensor(chain.dw.name)
        oaddr = lay.out + s.out * lay.out_stride
        lo, hi = chain.dw.type.dtype.bounds
        vector.append(Instruction.make(
            Opcode.POOL, op=PoolOp.MAX, dtype=ISA_DTYPE[DType.I8], in_addr=dw_in, in_h=st.n,
            in_w=g2.w, in_stride_h=g2.w * cn, in_stride_w=cn, ch=cn, kh=g2.kh, kw=g2.kw,
            stride_h=g2.sh, stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=st.pad_top,
            pad_left=g2.pl, out_h=st.rows, out_w=g2.ow, out_addr=oaddr,
            out_stride_h=g2.ow * cn, out_stride_w=cn, act_min=lo, act_max=hi))
        stores.append(dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g2.ow * g2.cout + c0, oaddr,
                                  ((cn, 1, 1), (st.rows * g2.ow, g2.cout, cn))))
        return TileWork(loads, matrix, vector, stores)
    dacc = acc if geo.dw_matrix else lay.acc2
    dw = Instruction.make(
        Opcode.DWCONV, in_addr=dw_in, in_h=st.n, in_w=g2.w, in_stride_h=g2.w * cn,
        in_stride_w=cn, ch=cn, in_zp=a2["in_zp"], kh=g2.kh, kw=g2.kw, stride_h=g2.sh,
        stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=st.pad_top, pad_left=g2.pl,
        out_h=st.rows, out_w=g2.ow, w_addr=w2, w_stride_k=cn, acc_addr=dacc,
        acc_stride=cn, mode=AccMode.OVERWRITE, w_type=g2.w_type)
    (matrix if geo.dw_matrix else vector).append(dw)
    params = w2 + g2.weight_bytes(cn)
    if chain_mode:
        dst = lay.dwbuf + (tl.stripe % 2) * lay.dwbuf_stride + c0
        vector.append(_conv_req(chain.dw, dacc, st.rows * g2.ow, cn, dst, g2.cout, params))
    else:
        y = ctx.tensor(chain.dw.name)
        oaddr = lay.out + s.out * lay.out_stride
        vector.append(_conv_req(chain.dw, dacc, st.rows * g2.ow, cn, oaddr, cn, params))
        stores.append(dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g2.ow * g2.cout + c0, oaddr,
                                  ((cn, 1, 1), (st.rows * g2.ow, g2.cout, cn))))
    return TileWork(loads, matrix, vector, stores)


def _halo_conv_tile(chain: FusedChain, geo: ChainGeometry, lay: Layout, st: Stripe, s: Slots,
                    ctx: CodegenContext, src: int, w2: int, acc: int, work: TileWork
                    ) -> TileWork:
    """The DW tile of a conv -> conv chain: the second conv over the line buffer's window of
    all its input channels, requantised into the output slot and stored."""
    g2 = geo.g2
    a2 = chain.dw.attr_map
    cin, cout, pix = g2.c, g2.cout, st.rows * g2.ow
    work.matrix.append(Instruction.make(
        Opcode.CONV, in_addr=src, in_h=st.n, in_w=g2.w, in_stride_h=g2.w * cin,
        in_stride_w=cin, cin=cin, in_zp=a2["in_zp"], kh=g2.kh, kw=g2.kw, stride_h=g2.sh,
        stride_w=g2.sw, dil_h=g2.dh, dil_w=g2.dw, pad_top=st.pad_top, pad_left=g2.pl,
        out_h=st.rows, out_w=g2.ow, w_addr=w2, w_stride_k=cin * cout, w_stride_ci=cout,
        w_stride_co=1, w_zp=0, cout=cout, acc_addr=acc, acc_stride=cout,
        mode=AccMode.OVERWRITE, w_type=g2.w_type))
    oaddr = lay.out + s.out * lay.out_stride
    work.vector.append(_conv_req(chain.dw, acc, pix, cout, oaddr, cout,
                                 w2 + g2.weight_bytes(cout)))
    y = ctx.tensor(chain.dw.name)
    work.stores.append(dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g2.ow * cout, oaddr,
                                   ((cout, 1, 1), (pix, cout, cout))))
    return work


def _project_tile(chain: FusedChain, geo: ChainGeometry, lay: Layout, tl: Tile, s: Slots,
                  ctx: CodegenContext) -> TileWork:
    g3 = geo.g3
    st = geo.stripes[tl.stripe]
    a3 = chain.project.attr_map
    cin, cout, pix = g3.c, g3.cout, st.rows * g3.ow
    acc = lay.acc + s.acc * lay.acc_stride
    src = lay.dwbuf + (tl.stripe % 2) * lay.dwbuf_stride
    conv = Instruction.make(
        Opcode.CONV, in_addr=src, in_h=st.rows, in_w=g3.w, in_stride_h=g3.w * cin,
        in_stride_w=cin, cin=cin, in_zp=a3["in_zp"], kh=1, kw=1, stride_h=1, stride_w=1,
        dil_h=1, dil_w=1, pad_top=0, pad_left=0, out_h=st.rows, out_w=g3.ow, w_addr=lay.w3,
        w_stride_k=cin * cout, w_stride_ci=cout, w_stride_co=1, w_zp=0, cout=cout,
        acc_addr=acc, acc_stride=cout, mode=AccMode.OVERWRITE, w_type=g3.w_type)
    oaddr = lay.out + s.out * lay.out_stride
    params = lay.w3 + g3.weight_bytes(cout)
    loads: list[Instruction] = []
    if chain.add is None:
        vector = [_conv_req(chain.project, acc, pix, cout, oaddr, cout, params)]
    else:
        res = ctx.tensor(chain.residual)
        raddr = lay.vin + (tl.pos % geo.vin_slots) * lay.vin_stride
        loads.append(dma.pattern(Opcode.DMA_LOAD, res, st.oy0 * g3.ow * cout, raddr,
                                 ((cout, 1, 1), (pix, cout, cout))))
        vector = [_conv_req(chain.project, acc, pix, cout, lay.tmp, cout, params),
                  _residual_add(chain, lay.tmp, raddr, oaddr, pix, cout)]
    y = ctx.tensor(chain.last.name)
    store = dma.pattern(Opcode.DMA_STORE, y, st.oy0 * g3.ow * cout, oaddr,
                        ((cout, 1, 1), (pix, cout, cout)))
    return TileWork(loads, [conv], vector, [store])


def _residual_add(chain: FusedChain, proj: int, res: int, out: int, pix: int, cout: int
                  ) -> Instruction:
    """The qadd's ELTWISE on a stripe (operands in the qadd's order)."""
    add = chain.add
    a = add.attr_map
    first, second = (proj, res) if add.inputs[0] == chain.project.name else (res, proj)
    i8 = ISA_DTYPE[DType.I8]
    fields = dict(op=EltOp.ADD, a_dtype=i8, b_dtype=i8, out_dtype=i8, a_addr=first,
                  b_addr=second, out_addr=out, out_zp=a["out_zp"], act_min=a["act_min"],
                  act_max=a["act_max"], d0=cout, d1=pix, a_s0=1, a_s1=cout, b_s0=1,
                  b_s1=cout, out_s0=1, out_s1=cout)
    fields.update(eltwise_emit._rescale(add))
    return Instruction.make(Opcode.ELTWISE, **fields)
