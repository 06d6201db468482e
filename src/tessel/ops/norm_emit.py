"""qsoftmax and qlayer_norm -> their vector-engine instruction chains, tile by tile.

Both ops are row-wise: the input is viewed as [K1, R, K2] (rows before the reduced axis, the
reduced axis, rows after it; layer norm: K2 = 1, R = n). A tile is `rows` indices of K1 x all R
x `inner` indices of K2, dense in SRAM ([rows, R, inner], C order). Each tile runs exactly the
golden chain of `tessel.ops.softmax.softmax_steps` / `tessel.ops.layer_norm.layer_norm_steps`
(one instruction per step, parameters copied from the node's plan attributes):

    softmax:    REDUCE MAX -> ELTWISE SUB (max at stride 0) -> LUT I16_513 -> REDUCE SUM ->
                UNARY RECIP -> ELTWISE MUL (reciprocal at stride 0)
    layer norm: REDUCE SUM -> REQUANT src=SRAM (mean) -> ELTWISE SUB -> REDUCE SUMSQ ->
                REQUANT src=SRAM (variance + eps) -> UNARY RSQRT -> ELTWISE MUL (stride 0) ->
                ELTWISE MUL (gamma) -> ELTWISE ADD (beta)

Intermediates live in per-step scratch regions of SRAM (the vector engine runs tiles in order,
so one copy suffices): softmax's int16 exponent argument / exponential (in place in the input
slot when the input is int16), per-row max and int32 sum / reciprocal; layer norm's int32-wide
centred values (then normalised int16, then gamma-scaled int32, each in place) and per-row
int32 sum / mean and sum of squares / variance / rsqrt. Resident data, loaded once per step by
the group's parameter loads: the exp table (LUT_LOAD in the vector setup), and layer norm's
REQUANT parameters, gamma_q and beta_q (one constant blob). Inputs and outputs stream through
double-buffered rings.

Limits: a whole row (R elements x `inner`) must fit SRAM in one tile (no split reduction), R
and every tile extent <= MAX_EXTENT (instruction fields, ``tessel.isa.limits``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselCompileError, TesselConfigError
from tessel.ir import Node, Op
from tessel.isa import Instruction, Opcode
from tessel.isa.fields import AccSrc, EltOp, LutMode, ParamMode, ReduceOp, UnaryOp
from tessel.isa.fields import DType as IsaDType
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
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
from tessel.ops.layer_norm import LayerNormPlan
from tessel.ops.movement_emit import canonical
from tessel.ops.softmax import ONE_MULT, ONE_SHIFT, SoftmaxPlan
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork

MAX_DIM = dma.MAX_DIM
MAX_TILES = 512  # finer tilings only cost compile time and per-tile DMA latency
TABLE_ENTRIES = LutMode.I16_513.entries  # the exp table


@dataclass(frozen=True)
class NormMapping:
    rows: int  # indices of K1 per tile
    inner: int  # indices of K2 per tile (1 when the reduced axis is the last one)
    double_buffer: bool = True

    def __str__(self) -> str:
        inner = f" inner={self.inner}" if self.inner > 1 else ""
        return f"rows={self.rows}{inner}" + ("" if self.double_buffer else " single-buffered")


# ---------------------------------------------------------------------------- the op


@dataclass(frozen=True)
class _Op:
    """What a node computes: its view, plan and operand types."""

    view: tuple[int, int, int]  # (K1, R, K2)
    plan: SoftmaxPlan | LayerNormPlan
    in_dt: IsaDType
    out_dt: IsaDType

    @property
    def softmax(self) -> bool:
        return isinstance(self.plan, SoftmaxPlan)


def _describe(node: Node, ctx: CodegenContext) -> _Op:
    where = f"{node} at {node.loc}"
    xt = ctx.graph.type_of(node.inputs[0])
    shape = xt.shape
    try:
        if node.op is Op.QSOFTMAX:
            plan = SoftmaxPlan.from_attrs(node.attr_map, ctx.const(node.inputs[1]))
            axis = node.attr("axis") % max(len(shape), 1)
            view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
        elif node.op is Op.QLAYER_NORM:
            plan = LayerNormPlan.from_attrs(node.attr_map, ctx.const(node.inputs[1]),
                                            ctx.const(node.inputs[2]))
            view = (math.prod(shape[:-1]), shape[-1], 1)
        else:
            raise TesselCompileError(f"{where}: not a softmax / layer norm")
    except TesselConfigError as e:
        raise TesselCompileError(f"{where}: bad plan attributes: {e}") from e
    in_dt, out_dt = ISA_DTYPE.get(xt.dtype), ISA_DTYPE.get(node.type.dtype)
    if in_dt is not plan.in_dtype or out_dt is not plan.out_dtype:
        raise TesselCompileError(
            f"{where}: operand/result types {xt.dtype.value}/{node.type.dtype.value} do not "
            f"match the plan's {plan.in_dtype.name}/{plan.out_dtype.name}")
    if view[1] > MAX_DIM:
        raise TesselCompileError(f"{where}: reduced extent {view[1]} > {MAX_DIM}")
    return _Op(view, plan, in_dt, out_dt)


# ---------------------------------------------------------------------------- tile geometry


@dataclass(frozen=True)
class _Geo:
    """A tile's iteration space: three dims innermost first, the reduced one `axis`; element
    strides of the dense tile and of its per-row buffers (0 along the reduced dim)."""

    dims: tuple[int, int, int]
    axis: int
    full: tuple[int, int, int]
    row: tuple[int, int, int]

    @staticmethod
    def of(r: int, rows: int, inner: int, k2: int) -> _Geo:
        if k2 == 1:
            return _Geo((r, rows, 1), 0, (1, r, 0), (0, 1, 0))
        return _Geo((inner, r, rows), 1, (1, inner, r * inner), (1, 0, inner))

    @property
    def kept(self) -> tuple[int, int]:
        """The kept dims (lower, higher)."""
        lo, hi = (k for k in range(3) if k != self.axis)
        return lo, hi

    def fields(self, prefix: str, strides: tuple[int, int, int], isz: int) -> dict[str, int]:
        return {f"{prefix}_s{k}": s * isz for k, s in enumerate(strides)}

    def iteration(self) -> dict[str, int]:
        return {f"d{k}": d for k, d in enumerate(self.dims)}

    def rows_iteration(self, prefix: str, isz: int) -> dict[str, int]:
        """UNARY over the per-row buffer: its kept dims as (d0, d1)."""
        lo, hi = self.kept
        return {"d0": self.dims[lo], "d1": self.dims[hi], "d2": 1,
                f"{prefix}_s0": self.row[lo] * isz, f"{prefix}_s1": self.row[hi] * isz}

    def reduce_dst(self, isz: int) -> dict[str, int]:
        lo, hi = self.kept
        return {"dst_s0": self.row[lo] * isz, "dst_s1": self.row[hi] * isz}


# ---------------------------------------------------------------------------- SRAM layout


@dataclass(frozen=True)
class _Layout:
    params: int  # exp table (softmax) or REQUANT params + gamma_q + beta_q (layer norm)
    param_bytes: int
    inp: int
    inp_stride: int
    out: int
    out_stride: int
    wide: int  # softmax: d / e (int16; -1 = in place in the input slot); LN: d / t / w
    row_a: int  # softmax: max; LN: sum -> mean
    row_b: int  # softmax: sum -> reciprocal; LN: sum of squares -> variance -> rsqrt
    depth: int


def _ln_blob_offsets(n: int) -> tuple[int, int, int]:
    """(gamma_q offset, beta_q offset, total bytes) in layer norm's constant blob."""
    g = align(24)
    b = align(g + 2 * n)
    return g, b, b + 4 * n


def _layout(op: _Op, m: NormMapping, ctx: CodegenContext, node: Node) -> _Layout:
    _, r, _ = op.view
    if m.rows > MAX_DIM or m.inner > MAX_DIM:
        raise TesselCompileError(f"{node}: tile {m} exceeds the 16-bit extents")
    depth = 2 if m.double_buffer else 1
    elems, rows = m.rows * r * m.inner, m.rows * m.inner
    plan = SramPlan(ctx.arch, f"{node}")
    pbytes = 2 * TABLE_ENTRIES if op.softmax else _ln_blob_offsets(r)[2]
    params = plan.sram(pbytes, "parameters")
    ib = align(elems * op.in_dt.nbytes)
    inp = plan.sram(depth * ib, "input tiles")
    if op.softmax:
        wide = -1 if op.in_dt is IsaDType.I16 else plan.sram(2 * elems, "exponentials")
        row_a = plan.sram(rows * op.in_dt.nbytes, "row max")
    else:
        wide = plan.sram(4 * elems, "centred values")
        row_a = plan.sram(4 * rows, "row mean")
    row_b = plan.sram(4 * rows, "row sums")
    ob = align(elems * op.out_dt.nbytes)
    out = plan.sram(depth * ob, "output tiles")
    return _Layout(params, pbytes, inp, ib, out, ob, wide, row_a, row_b, depth)


# ---------------------------------------------------------------------------- candidates


def candidates(node: Node, ctx: CodegenContext) -> list[NormMapping]:
    """The largest tile that fits (double-buffered if possible), and a few smaller ones with
    balanced tile counts (more tiles overlap DMA and the vector engine; fewer pay fewer
    per-instruction latencies)."""
    op = _describe(node, ctx)
    k1, _, k2 = op.view
    lut = ctx.arch.onchip.lut_entries
    if op.softmax and lut < TABLE_ENTRIES:
        raise TesselCompileError(f"{node}: the exp table needs {TABLE_ENTRIES} LUT entries, "
                                 f"the NPU has {lut}")
    for db in (True, False):
        inner = k2 if _fits(op, NormMapping(1, k2, db), ctx, node) else _largest(
            op, ctx, node, lambda c, db=db: NormMapping(1, c, db), k2)
        if inner == 0:
            continue
        if inner < k2:
            return [NormMapping(1, c, db) for c in _balanced(k2, inner)]
        best = _largest(op, ctx, node, lambda c, db=db: NormMapping(c, k2, db), k1)
        out = [NormMapping(c, k2, db) for c in _balanced(k1, best)]
        few = [m for m in out if _tiles(op, m) <= MAX_TILES]
        return few or out[:1]
    return []


def _balanced(total: int, best: int) -> list[int]:
    """Chunk sizes best, best/2, ... (down to best/32), each evened out over its tile count."""
    out = []
    for k in range(6):
        c = max(1, best >> k)
        n = -(-total // c)
        out.append(-(-total // n))
    return sorted(set(out), reverse=True)


def _tiles(op: _Op, m: NormMapping) -> int:
    k1, _, k2 = op.view
    return -(-k1 // m.rows) * -(-k2 // m.inner)


def _fits(op: _Op, m: NormMapping, ctx: CodegenContext, node: Node) -> bool:
    try:
        _layout(op, m, ctx, node)
    except TesselCompileError:
        return False
    return True


def _largest(op: _Op, ctx: CodegenContext, node: Node, make, limit: int) -> int:
    """Largest c in [1, min(limit, MAX_DIM)] with make(c) fitting (binary search), 0 if none."""
    lo, hi = 0, min(limit, MAX_DIM)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(op, make(mid), ctx, node):
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------------------------------------------------------------------------- the step


def constants(node: Node, m: NormMapping, ctx: CodegenContext) -> StepConstants:
    """The step's one constant blob (see _blob)."""
    return StepConstants((_blob(_describe(node, ctx)),))


def step(node: Node, m: NormMapping, ctx: CodegenContext, placed: PlacedConstants | None = None
         ) -> StepWork:
    """The step's work, reading its constants where `placed` put them (None: estimation)."""
    op = _describe(node, ctx)
    lay = _layout(op, m, ctx, node)
    k1, r, k2 = op.view
    (addr,) = const_addresses(placed, 1)
    tiles = [(a0, min(m.rows, k1 - a0), b0, min(m.inner, k2 - b0))
             for a0 in range(0, k1, m.rows) for b0 in range(0, k2, m.inner)]

    def group_fn(g: int, slot: int) -> GroupWork:
        loads = dma.contiguous(Opcode.DMA_LOAD, ctx.consts.memory, addr, lay.params,
                               lay.param_bytes)
        setup = [Instruction.make(Opcode.LUT_LOAD, lut_base=0, count=TABLE_ENTRIES,
                                  src_addr=lay.params)] if op.softmax else []
        return GroupWork([], loads, setup, len(tiles))

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        a0, an, b0, bn = tiles[t]
        geo = _Geo.of(r, an, bn, k2)
        iaddr = lay.inp + s.inp * lay.inp_stride
        oaddr = lay.out + s.out * lay.out_stride
        x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.name)
        dims = canonical(((bn, 1, 1), (r, k2, bn), (an, r * k2, r * bn)), MAX_DIM)
        off = a0 * r * k2 + b0
        load = dma.pattern(Opcode.DMA_LOAD, x, off, iaddr, dims)
        store = dma.pattern(Opcode.DMA_STORE, y, off, oaddr, dims)
        chain = _softmax_chain if op.softmax else _layer_norm_chain
        return TileWork([load], [], chain(op, lay, geo, iaddr, oaddr), [store])

    shape = StepShape(uses_matrix=False, in_depth=lay.depth, out_depth=lay.depth,
                      group_depth=1)
    return StepWork(shape, 1, group_fn, tile_fn)


def _blob(op: _Op) -> bytes:
    """The step's resident constants: the exp table, or layer norm's REQUANT parameters
    (mean: bias 0; variance: bias var_bias), gamma_q and beta_q."""
    p = op.plan
    if isinstance(p, SoftmaxPlan):
        return np.asarray(p.exp_table).astype("<i2").tobytes()
    g, b, total = _ln_blob_offsets(p.n)
    blob = bytearray(total)
    blob[:24] = np.array([0, p.mean_mult, p.mean_shift, p.var_bias, p.var_mult, p.var_shift],
                         "<i4").tobytes()
    blob[g:g + 2 * p.n] = np.asarray(p.gamma_q).astype("<i2").tobytes()
    blob[b:b + 4 * p.n] = np.asarray(p.beta_q).astype("<i4").tobytes()
    return bytes(blob)


# ---------------------------------------------------------------------------- the chains


def _reduce(op: ReduceOp, dt: IsaDType, geo: _Geo, src: int, dst: int, in_zp: int = 0
            ) -> Instruction:
    dst_isz = dt.nbytes if op in (ReduceOp.MAX, ReduceOp.MIN) else 4
    return Instruction.make(Opcode.REDUCE, op=op, dtype=dt, axis=geo.axis, **geo.iteration(),
                            src_addr=src, **geo.fields("src", geo.full, dt.nbytes),
                            in_zp=in_zp, dst_addr=dst, **geo.reduce_dst(dst_isz))


def _eltwise(op: EltOp, geo: _Geo, a: tuple[int, IsaDType, tuple[int, int, int]],
             b: tuple[int, IsaDType, tuple[int, int, int]], out: tuple[int, IsaDType],
             **rescale: int) -> Instruction:
    """ELTWISE over the tile; a/b = (address, dtype, element strides); out dense."""
    (aa, adt, ast), (ba, bdt, bst), (oa, odt) = a, b, out
    if "act_min" not in rescale:
        rescale = dict(rescale, act_min=odt.lo, act_max=odt.hi)
    return Instruction.make(Opcode.ELTWISE, op=op, a_dtype=adt, b_dtype=bdt, out_dtype=odt,
                            **geo.iteration(), a_addr=aa, **geo.fields("a", ast, adt.nbytes),
                            b_addr=ba, **geo.fields("b", bst, bdt.nbytes), out_addr=oa,
                            **geo.fields("out", geo.full, odt.nbytes), **rescale)


def _unary(op: UnaryOp, frac_bits: int, geo: _Geo, addr: int) -> Instruction:
    it = geo.rows_iteration("src", 4)
    it.update({k.replace("src", "dst"): v for k, v in it.items() if k.startswith("src")})
    return Instruction.make(Opcode.UNARY, op=op, frac_bits=frac_bits, src_addr=addr,
                            dst_addr=addr, **it)


def _requant_rows(geo: _Geo, addr: int, params: int, lo: int) -> Instruction:
    """REQUANT src=SRAM PER_TENSOR of the per-row int32 buffer at `addr`, in place."""
    n = geo.dims[geo.kept[0]] * geo.dims[geo.kept[1]]
    return Instruction.make(Opcode.REQUANT, src=AccSrc.SRAM, src_addr=addr, src_stride=4 * n,
                            rows=1, ch=n, out_dtype=IsaDType.I32, dst_addr=addr,
                            dst_stride=4 * n, param_addr=params,
                            param_mode=ParamMode.PER_TENSOR, out_zp=0, act_min=lo,
                            act_max=INT32_MAX)


def _softmax_chain(op: _Op, lay: _Layout, geo: _Geo, x: int, y: int) -> list[Instruction]:
    p = op.plan
    assert isinstance(p, SoftmaxPlan)
    i16, i32 = IsaDType.I16, IsaDType.I32
    d = x if lay.wide < 0 else lay.wide  # int16 input: d and e overwrite the input slot
    one = dict(a_mult=ONE_MULT, a_shift=ONE_SHIFT, b_mult=ONE_MULT, b_shift=ONE_SHIFT)
    return [
        _reduce(ReduceOp.MAX, op.in_dt, geo, x, lay.row_a),
        _eltwise(EltOp.SUB, geo, (x, op.in_dt, geo.full), (lay.row_a, op.in_dt, geo.row),
                 (d, i16), a_zp=p.in_zp, b_zp=p.in_zp, left_shift=0, **one,
                 out_mult=p.sub_mult, out_shift=p.sub_shift, out_zp=p.sub_zp),
        Instruction.make(Opcode.LUT, lut_mode=LutMode.I16_513, lut_base=0, **geo.iteration(),
                         src_addr=d, **geo.fields("src", geo.full, 2), dst_addr=d,
                         **geo.fields("dst", geo.full, 2)),
        _reduce(ReduceOp.SUM, i16, geo, d, lay.row_b),
        _unary(UnaryOp.RECIP, p.recip_frac_bits, geo, lay.row_b),
        _eltwise(EltOp.MUL, geo, (d, i16, geo.full), (lay.row_b, i32, geo.row),
                 (y, op.out_dt), a_zp=0, b_zp=0, out_mult=p.mul_mult, out_shift=p.mul_shift,
                 out_zp=p.out_zp, act_min=p.act_min, act_max=p.act_max),
    ]


def _layer_norm_chain(op: _Op, lay: _Layout, geo: _Geo, x: int, y: int
                      ) -> list[Instruction]:
    p = op.plan
    assert isinstance(p, LayerNormPlan)
    i16, i32 = IsaDType.I16, IsaDType.I32
    w, gamma_off, beta_off = lay.wide, *_ln_blob_offsets(p.n)[:2]
    along = (geo.full[0], 0, 0)  # gamma / beta: per element of the row, same for every row
    return [
        _reduce(ReduceOp.SUM, op.in_dt, geo, x, lay.row_a, p.in_zp),
        _requant_rows(geo, lay.row_a, lay.params, INT32_MIN),
        _eltwise(EltOp.SUB, geo, (x, op.in_dt, geo.full), (lay.row_a, i32, geo.row),
                 (w, p.d_dtype), a_zp=p.in_zp, b_zp=0, left_shift=0, a_mult=ONE_MULT,
                 a_shift=p.sub_a_shift, b_mult=ONE_MULT, b_shift=ONE_SHIFT,
                 out_mult=p.sub_mult, out_shift=p.sub_shift, out_zp=0),
        _reduce(ReduceOp.SUMSQ, p.d_dtype, geo, w, lay.row_b),
        _requant_rows(geo, lay.row_b, lay.params + 12, 0),
        _unary(UnaryOp.RSQRT, p.rsqrt_frac_bits, geo, lay.row_b),
        _eltwise(EltOp.MUL, geo, (w, p.d_dtype, geo.full), (lay.row_b, i32, geo.row),
                 (w, i16), out_mult=p.norm_mult, out_shift=p.norm_shift),
        _eltwise(EltOp.MUL, geo, (w, i16, geo.full), (lay.params + gamma_off, i16, along),
                 (w, i32), out_mult=p.gamma_mult, out_shift=p.gamma_shift),
        _eltwise(EltOp.ADD, geo, (w, i32, geo.full), (lay.params + beta_off, i32, along),
                 (y, op.out_dt), left_shift=0, a_mult=ONE_MULT, a_shift=ONE_SHIFT,
                 b_mult=ONE_MULT, b_shift=ONE_SHIFT, out_mult=p.out_mult,
                 out_shift=p.out_shift, out_zp=p.out_zp, act_min=p.act_min,
                 act_max=p.act_max),
    ]
