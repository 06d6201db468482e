"""POOL, REDUCE and COPY: the vector engine's windowed, reducing and moving instructions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessel.isa.access import Access, Space, box, new_access, positions, strided, view_at
from tessel.isa.cost_rules import Vector, product
from tessel.isa.events import Events
from tessel.isa.fields import (
    DType,
    Engine,
    PoolOp,
    ReduceOp,
    enum_field,
    signed_field,
    unsigned_field,
)
from tessel.isa.groups import address, clamp, extent, extents, nhwc_input, sram_stride, strided_view
from tessel.isa.opcode import Opcode
from tessel.isa.spec import ClampWithin, Frame, InstrSpec, TypeIn
from tessel.isa.window import window_fields

if TYPE_CHECKING:
    from tessel.isa.instruction import Instruction

_SRAM = Space.SRAM
_NBYTES = tuple(t.nbytes for t in DType)  # by value: `args` hold the IntEnum member
_SECTION = "(vector engine)"

# ---- POOL ---------------------------------------------------------------------------------------
POOL_FIELDS = (
    enum_field("op", PoolOp, 1, "MAX or AVG"),
    enum_field("dtype", DType, 2, "element type of input and output (I8 or I16)"),
    *nhwc_input(),
    extent("ch", "channels"),
    *window_fields(pad_bits=8, kernel_bits=8),
    address("out_addr", "SRAM byte address of output pixel (0, 0), channel 0"),
    sram_stride("out_stride_h", "bytes between output rows"),
    sram_stride("out_stride_w", "bytes between output pixels"),
    *clamp(),
)


def _pool_accesses(i: Instruction) -> tuple[Access, ...]:
    w = i.dtype.nbytes
    lo, hi = box(i.in_addr, (i.in_h, i.in_w, i.ch), (i.in_stride_h, i.in_stride_w, w), w)
    olo, ohi = box(i.out_addr, (i.out_h, i.out_w, i.ch), (i.out_stride_h, i.out_stride_w, w), w)
    return (Access("in", _SRAM, lo, hi, False), Access("out", _SRAM, olo, ohi, True))


def _pool_events(i: Instruction) -> Events:
    outs = i.out_h * i.out_w * i.ch
    e, w = outs * i.kh * i.kw, i.dtype.nbytes
    return Events(sram_read_bytes=e * w, sram_write_bytes=outs * w, vector_lane_ops=e)


# ---- REDUCE -------------------------------------------------------------------------------------
REDUCE_FIELDS = (
    enum_field("op", ReduceOp, 2, "SUM, SUMSQ (int32 out), MAX or MIN (out type = in type)"),
    enum_field("dtype", DType, 2, "input type"),
    unsigned_field("axis", 2, "reduced dimension (0, 1 or 2)", hi=2),
    *extents(3, "input:"),
    *strided_view("src", "src", 3),
    signed_field("in_zp", 32, "zero point subtracted before SUM / SUMSQ", default=0),
    address("dst_addr", "SRAM byte address of output (0, 0)"),
    sram_stride("dst_s0", "bytes between outputs along the lower kept dimension"),
    sram_stride("dst_s1", "bytes between outputs along the higher kept dimension"),
)
_SUMS = (ReduceOp.SUM, ReduceOp.SUMSQ)  # int32 outputs


def _reduce_out_bytes(i: Instruction) -> int:
    return DType.I32.nbytes if i.op in _SUMS else i.dtype.nbytes


def _reduce_accesses(i: Instruction) -> tuple[Access, ...]:
    d = (i.d0, i.d1, i.d2)
    kept = [n for k, n in enumerate(d) if k != i.axis]
    dlo, dhi = box(i.dst_addr, kept, (i.dst_s0, i.dst_s1), _reduce_out_bytes(i))
    slo, shi = box(i.src_addr, d, (i.src_s0, i.src_s1, i.src_s2), i.dtype.nbytes)
    return (Access("src", _SRAM, slo, shi, False), Access("dst", _SRAM, dlo, dhi, True))


def _reduce_events(i: Instruction) -> Events:
    e = i.d0 * i.d1 * i.d2
    outs = e // (i.d0, i.d1, i.d2)[i.axis]
    return Events(sram_read_bytes=e * i.dtype.nbytes, sram_write_bytes=outs * _reduce_out_bytes(i),
                  vector_lane_ops=e)


# ---- COPY ---------------------------------------------------------------------------------------
COPY_FIELDS = (
    enum_field("dtype", DType, 2, "element type"),
    *extents(4, "element loop:"),
    *strided_view("src", "src", 4),
    *strided_view("dst", "dst", 4),
)
_COPY_VIEWS = (view_at(COPY_FIELDS, "src", 4), view_at(COPY_FIELDS, "dst", 4))
(_COPY_TYPE,) = positions(COPY_FIELDS, "dtype")
_E4 = product("d0", "d1", "d2", "d3")


def _copy_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    w = _NBYTES[a[_COPY_TYPE]]
    slo, shi = strided(a, _COPY_VIEWS[0], w)
    dlo, dhi = strided(a, _COPY_VIEWS[1], w)
    return (new_access(Access, ("src", _SRAM, slo, shi, False, 0)),
            new_access(Access, ("dst", _SRAM, dlo, dhi, True, 0)))


def _copy_events(i: Instruction) -> Events:
    nb = i.d0 * i.d1 * i.d2 * i.d3 * i.dtype.nbytes
    return Events(sram_read_bytes=nb, sram_write_bytes=nb)


_POOL_WORK = product("out_h", "out_w", "ch", "kh", "kw")
SPECS = (
    InstrSpec(
        opcode=Opcode.POOL, engine=Engine.VECTOR,
        summary="max / average pooling over an NHWC tile", fields=POOL_FIELDS,
        cost=Vector(_POOL_WORK, _pool_events, "lane ops = work"),
        cost_fields=("dtype", "ch", "kh", "kw", "out_h", "out_w"), accesses=_pool_accesses,
        sram_elements=(("in", product("in_h", "in_w", "ch")),
                       ("out", product("out_h", "out_w", "ch"))),
        frame=Frame("ch"), rules=(TypeIn("dtype", (DType.I8, DType.I16)), ClampWithin("dtype")),
        section=f"POOL {_SECTION}"),
    InstrSpec(
        opcode=Opcode.REDUCE, engine=Engine.VECTOR,
        summary="sum / sum of squares / max / min along one axis", fields=REDUCE_FIELDS,
        cost=Vector(product("d0", "d1", "d2"), _reduce_events, "lane ops `E`"),
        cost_fields=("op", "dtype", "axis", "d0", "d1", "d2"), accesses=_reduce_accesses,
        sram_elements=(("src", product("d0", "d1", "d2")),), section=f"REDUCE {_SECTION}"),
    InstrSpec(
        opcode=Opcode.COPY, engine=Engine.VECTOR,
        summary="SRAM -> SRAM 4-D strided copy (transpose, concat)", fields=COPY_FIELDS,
        cost=Vector(_E4, _copy_events, "none besides SRAM bytes"),
        cost_fields=("dtype", "d0", "d1", "d2", "d3"), accesses=_copy_accesses,
        sram_elements=(("src", _E4),), section=f"COPY {_SECTION}"),
)
