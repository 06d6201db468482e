"""REQUANT, ELTWISE, LUT, LUT_LOAD and UNARY: the vector engine's element-wise instructions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tessel.isa.access import Access, Space, getter, new_access, positions, span2, strided, view_at
from tessel.isa.cost_rules import Vector, product
from tessel.isa.events import Events
from tessel.isa.fields import (
    AccSrc,
    AccWidth,
    DType,
    EltOp,
    Engine,
    LutMode,
    ParamMode,
    Rounding,
    UnaryOp,
    enum_field,
    signed_field,
    unsigned_field,
)
from tessel.isa.groups import (
    address,
    clamp,
    extent,
    extents,
    multiplier,
    sram_stride,
    strided_view,
)
from tessel.isa.opcode import Opcode
from tessel.isa.spec import ClampWithin, InstrSpec, WideSource

if TYPE_CHECKING:
    from tessel.isa.instruction import Instruction

_SRAM, _ACC, _LUT = Space.SRAM, Space.ACC, Space.LUT
_NBYTES = tuple(t.nbytes for t in DType)  # by value: `args` hold the IntEnum member
_I32 = DType.I32.nbytes
PARAM_BYTES = 3 * _I32  # REQUANT's parameters per channel: int32 bias, multiplier, shift
WIDE_PARAM_BYTES = 8 + 2 * _I32  # acc_width WIDE: int64 bias, multiplier, shift
UNARY_STEPS = 8  # RECIP / RSQRT: iterative radix-16 divider, 8 steps per 32-bit element
LUT_INDEX_BITS = 12  # LUT-memory entry index
_E3 = product("d0", "d1", "d2")

# ---- REQUANT ------------------------------------------------------------------------------------
REQUANT_FIELDS = (
    enum_field("src", AccSrc, 1, "ACC: accumulator entries; SRAM: int32 words in SRAM"),
    unsigned_field("src_addr", 32, "first input (entry index for ACC, byte address for SRAM)",
                   hex=True),
    signed_field("src_stride", 24, "input row stride (entries for ACC, bytes for SRAM)",
                 default=0),
    extent("rows", "rows (pixels)"),
    extent("ch", "channels per row (contiguous in the source)"),
    enum_field("out_dtype", DType, 2, "output type I8, I16 or I32"),
    address("dst_addr", "SRAM byte address of output row 0, channel 0"),
    sram_stride("dst_stride", "bytes between output rows (channels are contiguous)"),
    address("param_addr", "SRAM byte address of the int32 table bias[P], mult[P], shift[P]"),
    enum_field("param_mode", ParamMode, 1, "P = ch (PER_CHANNEL) or 1 (PER_TENSOR)",
               default=ParamMode.PER_CHANNEL),
    signed_field("out_zp", 32, "output zero point (added)", default=0),
    *clamp(),
    enum_field("rounding", Rounding, 1, "DOUBLE: SRDHM then rounding right shift; SINGLE: one "
               "rounding of the 64-bit product", default=Rounding.DOUBLE),
    enum_field("acc_width", AccWidth, 1, "NARROW: int32 entries; WIDE: 48-bit values two "
               "entries each (an int16 CONV / MATMUL's), int64 bias, the wide rule (`rounding` "
               "does not apply)", default=AccWidth.NARROW),
)
_REQUANT = getter(REQUANT_FIELDS, "src", "src_addr", "rows", "ch", "src_stride", "param_mode",
                  "param_addr", "out_dtype", "dst_addr", "dst_stride", "acc_width")


def _requant_accesses(i: Instruction) -> tuple[Access, ...]:
    src, sa, rows, ch, ss, pm, pa, od, da, ds, aw = _REQUANT(i.args)
    if src == AccSrc.ACC:
        e = 2 if aw else 1
        lo, hi = span2(sa, rows, ss, ch, e, e)
        s = new_access(Access, ("src", _ACC, lo, hi, False, 0))
    else:
        lo, hi = span2(sa, rows, ss, ch, _I32, _I32)
        s = new_access(Access, ("src", _SRAM, lo, hi, False, 0))
    p = ch if pm == ParamMode.PER_CHANNEL else 1
    w = _NBYTES[od]
    dlo, dhi = span2(da, rows, ds, ch, w, w)
    pb = WIDE_PARAM_BYTES if aw else PARAM_BYTES
    return (s, new_access(Access, ("params", _SRAM, pa, pa + pb * p, False, 0)),
            new_access(Access, ("dst", _SRAM, dlo, dhi, True, 0)))


def _requant_events(i: Instruction) -> Events:
    e = i.rows * i.ch
    p = i.ch if i.param_mode == ParamMode.PER_CHANNEL else 1
    src_acc = i.src == AccSrc.ACC
    wide = i.acc_width == AccWidth.WIDE
    return Events(acc_reads=(2 * e if wide else e) if src_acc else 0,
                  sram_read_bytes=(WIDE_PARAM_BYTES if wide else PARAM_BYTES) * p
                  + (0 if src_acc else _I32 * e),
                  sram_write_bytes=e * i.out_dtype.nbytes, vector_lane_ops=e)


# ---- ELTWISE ------------------------------------------------------------------------------------
ELTWISE_FIELDS = (
    enum_field("op", EltOp, 3, "ADD, SUB, MUL, MAX or MIN"),
    enum_field("a_dtype", DType, 2, "type of a"),
    enum_field("b_dtype", DType, 2, "type of b"),
    enum_field("out_dtype", DType, 2, "type of the output"),
    *extents(3, "iteration space:"),
    *strided_view("a", "a", 3),
    *strided_view("b", "b", 3),
    *strided_view("out", "out", 3),
    signed_field("a_zp", 32, "zero point of a (subtracted)", default=0),
    signed_field("b_zp", 32, "zero point of b (subtracted)", default=0),
    unsigned_field("left_shift", 5, "left shift of both inputs before rescale (ADD/SUB/MAX/MIN)",
                   default=0),
    *multiplier("a", "a (not MUL)"),
    *multiplier("b", "b (not MUL)"),
    *multiplier("out", "the result"),
    signed_field("out_zp", 32, "output zero point (added)", default=0),
    *clamp(),
    enum_field("rounding", Rounding, 1, "DOUBLE: MBQM for the three multipliers; SINGLE: one "
               "rounding of each 64-bit product", default=Rounding.DOUBLE),
)
_ELTWISE = tuple(view_at(ELTWISE_FIELDS, p, 3) for p in ("a", "b", "out"))
_ELTWISE_TYPES = positions(ELTWISE_FIELDS, "a_dtype", "b_dtype", "out_dtype")


def _eltwise_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    ta, tb, to = (_NBYTES[a[k]] for k in _ELTWISE_TYPES)
    alo, ahi = strided(a, _ELTWISE[0], ta)
    blo, bhi = strided(a, _ELTWISE[1], tb)
    olo, ohi = strided(a, _ELTWISE[2], to)
    return (new_access(Access, ("a", _SRAM, alo, ahi, False, 0)),
            new_access(Access, ("b", _SRAM, blo, bhi, False, 0)),
            new_access(Access, ("out", _SRAM, olo, ohi, True, 0)))


def _eltwise_events(i: Instruction) -> Events:
    e = i.d0 * i.d1 * i.d2
    return Events(sram_read_bytes=e * (i.a_dtype.nbytes + i.b_dtype.nbytes),
                  sram_write_bytes=e * i.out_dtype.nbytes, vector_lane_ops=e)


# ---- LUT, LUT_LOAD ------------------------------------------------------------------------------
LUT_FIELDS = (
    enum_field("lut_mode", LutMode, 1, "I8_256 (int8) or I16_513 (int16, interpolated)"),
    unsigned_field("lut_base", LUT_INDEX_BITS, "first LUT-memory entry of the table"),
    *extents(3, "iteration space:"),
    *strided_view("src", "src", 3),
    *strided_view("dst", "dst", 3),
)
_LUT_VIEWS = (view_at(LUT_FIELDS, "src", 3), view_at(LUT_FIELDS, "dst", 3))
_LUT_MODE, _LUT_BASE = positions(LUT_FIELDS, "lut_mode", "lut_base")


def _lut_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    mode: LutMode = a[_LUT_MODE]
    w, base = mode.dtype.nbytes, a[_LUT_BASE]
    slo, shi = strided(a, _LUT_VIEWS[0], w)
    dlo, dhi = strided(a, _LUT_VIEWS[1], w)
    return (new_access(Access, ("src", _SRAM, slo, shi, False, 0)),
            new_access(Access, ("lut", _LUT, base, base + mode.entries, False, 0)),
            new_access(Access, ("dst", _SRAM, dlo, dhi, True, 0)))


def _lut_events(i: Instruction) -> Events:
    e, w = i.d0 * i.d1 * i.d2, i.lut_mode.dtype.nbytes
    return Events(sram_read_bytes=e * w, sram_write_bytes=e * w, vector_lane_ops=e,
                  lut_accesses=e * w)


_ENTRY = DType.I16.nbytes  # LUT memory holds int16 entries
LUT_LOAD_FIELDS = (
    unsigned_field("lut_base", LUT_INDEX_BITS, "first LUT-memory entry written"),
    unsigned_field("count", LUT_INDEX_BITS + 1, "number of int16 entries", lo=1,
                   hi=1 << LUT_INDEX_BITS),
    address("src_addr", "SRAM byte address of entry 0 (int16, little-endian)"),
)


def _lut_load_accesses(i: Instruction) -> tuple[Access, ...]:
    return (Access("src", _SRAM, i.src_addr, i.src_addr + _ENTRY * i.count, False),
            Access("lut", _LUT, i.lut_base, i.lut_base + i.count, True))


def _lut_load_events(i: Instruction) -> Events:
    return Events(sram_read_bytes=_ENTRY * i.count, lut_accesses=i.count)


# ---- UNARY --------------------------------------------------------------------------------------
UNARY_FIELDS = (
    enum_field("op", UnaryOp, 2, "RECIP or RSQRT"),
    unsigned_field("frac_bits", 5, "fraction bits of the result"),
    *extents(3, "iteration space:"),
    *strided_view("src", "src (int32)", 3),
    *strided_view("dst", "dst (int32)", 3),
)
_UNARY_VIEWS = (view_at(UNARY_FIELDS, "src", 3), view_at(UNARY_FIELDS, "dst", 3))


def _unary_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    slo, shi = strided(a, _UNARY_VIEWS[0], _I32)
    dlo, dhi = strided(a, _UNARY_VIEWS[1], _I32)
    return (new_access(Access, ("src", _SRAM, slo, shi, False, 0)),
            new_access(Access, ("dst", _SRAM, dlo, dhi, True, 0)))


def _unary_events(i: Instruction) -> Events:
    e = i.d0 * i.d1 * i.d2
    return Events(sram_read_bytes=_I32 * e, sram_write_bytes=_I32 * e,
                  vector_lane_ops=e * UNARY_STEPS)


_SECTION = "(vector engine)"
SPECS = (
    InstrSpec(
        opcode=Opcode.REQUANT, engine=Engine.VECTOR, summary="int32 + bias, Q31 rescale, zp, clamp",
        fields=REQUANT_FIELDS,
        cost=Vector(product("rows", "ch"), _requant_events,
                    "lane ops `E`; acc reads `E` if `src == ACC` (WIDE: `2E`), else SRAM reads "
                    "`4E`; SRAM reads `12*P` (params; WIDE: `16*P`)"),
        cost_fields=("src", "rows", "ch", "out_dtype", "param_mode", "acc_width"),
        accesses=_requant_accesses, sram_elements=(("dst", product("rows", "ch")),),
        rules=(ClampWithin("out_dtype"), WideSource()), section=f"REQUANT {_SECTION}"),
    InstrSpec(
        opcode=Opcode.ELTWISE, engine=Engine.VECTOR,
        summary="a (op) b, per-input rescale (TFLite add/mul)", fields=ELTWISE_FIELDS,
        cost=Vector(_E3, _eltwise_events, "lane ops `E`"),
        cost_fields=("a_dtype", "b_dtype", "out_dtype", "d0", "d1", "d2"),
        accesses=_eltwise_accesses, sram_elements=(("a", _E3),),
        rules=(ClampWithin("out_dtype"),), section=f"ELTWISE {_SECTION}"),
    InstrSpec(
        opcode=Opcode.LUT, engine=Engine.VECTOR, summary="table look-up (activation functions)",
        fields=LUT_FIELDS,
        cost=Vector(_E3, _lut_events, "lane ops `E`; LUT accesses `E` (I8_256) or `2E` (I16_513)"),
        cost_fields=("lut_mode", "d0", "d1", "d2"), accesses=_lut_accesses,
        sram_elements=(("src", _E3),), section=f"LUT, LUT_LOAD {_SECTION}"),
    InstrSpec(
        opcode=Opcode.LUT_LOAD, engine=Engine.VECTOR, summary="SRAM int16 words -> LUT memory",
        fields=LUT_LOAD_FIELDS,
        cost=Vector(product("count"), _lut_load_events, "LUT accesses `count`"),
        cost_fields=("count",), accesses=_lut_load_accesses,
        section=f"LUT, LUT_LOAD {_SECTION}"),
    InstrSpec(
        opcode=Opcode.UNARY, engine=Engine.VECTOR,
        summary="int32 reciprocal / reciprocal square root", fields=UNARY_FIELDS,
        cost=Vector(product("d0", "d1", "d2", factor=UNARY_STEPS), _unary_events,
                    f"lane ops `{UNARY_STEPS}E` (iterative divider, {UNARY_STEPS} steps)"),
        cost_fields=("d0", "d1", "d2"), accesses=_unary_accesses,
        sram_elements=(("src", _E3),), section=f"UNARY {_SECTION}"),
)


def requant_param_bytes(width: AccWidth) -> int:
    """Bytes of one channel's REQUANT parameters: int32 bias, q31 and shift; WIDE: int64 bias."""
    return WIDE_PARAM_BYTES if width is AccWidth.WIDE else PARAM_BYTES


def requant_params(bias: np.ndarray, mult: np.ndarray, shift: np.ndarray, width: AccWidth,
                   chunks: Sequence[tuple[int, int]]) -> bytes:
    """REQUANT's per-channel parameter table of the channel ranges ``chunks`` ((first, count),
    in order), each range's biases, then its multipliers, then its shifts, little-endian."""
    b = np.asarray(bias).astype("<i8" if width is AccWidth.WIDE else "<i4")
    m, s = np.asarray(mult).astype("<i4"), np.asarray(shift).astype("<i4")
    return b"".join(b[c0:c0 + n].tobytes() + m[c0:c0 + n].tobytes() + s[c0:c0 + n].tobytes()
                    for c0, n in chunks)
