"""CONV, MATMUL and DWCONV: int8 tiles into the int32 accumulator, on the matrix array (DWCONV
also on the vector engine); CONV and MATMUL also take int16 activations (``in_type`` I16) into
wide accumulator entries."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessel.isa.access import Access, Space, getter, new_access, positions, span2, span3
from tessel.isa.cost_rules import Gemm, Product, Vector, product
from tessel.isa.events import Events
from tessel.isa.fields import (
    AccMode,
    Engine,
    Field,
    InType,
    enum_field,
    signed_field,
    unsigned_field,
)
from tessel.isa.groups import EXTENT_BITS, acc_output, address, extent, nhwc_input, sram_stride
from tessel.isa.opcode import Opcode
from tessel.isa.sparse24 import GROUP, index_bytes
from tessel.isa.spec import AccRowsApart, Frame, InstrSpec, Rule, WideInput
from tessel.isa.window import window_fields

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch
    from tessel.isa.instruction import Instruction

_SRAM, _ACC = Space.SRAM, Space.ACC
_NHWC = ("in_addr", "in_h", "in_w", "in_stride_h", "in_stride_w")
_ACC_FIELDS = ("acc_addr", "acc_stride", "mode")
_PIXELS = ("out_h", "out_w")


class WeightType(enum.IntEnum):
    """How a matrix instruction's weights are stored. I8: one int8 per byte, strides in bytes.
    I4: two signed 4-bit weights per byte (the element at nibble index ``n`` is the low half
    of byte ``n >> 1`` when ``n`` is even, the high half when odd), the weight strides
    counting nibbles from ``2 * w_addr``; each weight enters the array as the int8 it equals.
    I8_2_4 / I4_2_4 (CONV only): 2:4 sparse, the two non-zeros of every four input channels
    stored as I8 / I4 values with 2-bit indices after them (tessel.isa.sparse24).
    """

    I8 = 0
    I4 = 1
    I8_2_4 = 2
    I4_2_4 = 3

    @property
    def per_byte(self) -> int:
        """Weights (values) per byte."""
        return 2 if self in (WeightType.I4, WeightType.I4_2_4) else 1

    @property
    def sparse(self) -> bool:
        """2:4 sparse: values and indices."""
        return self in (WeightType.I8_2_4, WeightType.I4_2_4)

    @property
    def values(self) -> WeightType:
        """The storage of the values (the type itself when dense)."""
        return {WeightType.I8_2_4: WeightType.I8, WeightType.I4_2_4: WeightType.I4}.get(
            self, self)

    def with_sparsity(self, sparse: bool) -> WeightType:
        """This storage's values, 2:4 sparse or dense."""
        base = self.values
        if not sparse:
            return base
        return WeightType.I4_2_4 if base is WeightType.I4 else WeightType.I8_2_4

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """The bytes [lo, hi) of a box of elements [lo, hi) whose base is a byte address
        scaled to elements (``per_byte * addr``)."""
        p = self.per_byte
        return lo // p, -(-hi // p)


def weight_type(name: str) -> Field:
    """The storage of the weights (the fields' last: appended to the encoding's unused bits,
    so an int8 instruction encodes as it did before the field existed)."""
    return enum_field(name, WeightType, 2, "weight storage: I8, I4 (two per byte, strides "
                      "in nibbles), I8_2_4 or I4_2_4 (2:4 sparse values and indices; CONV "
                      "only)", default=WeightType.I8)


def in_type(name: str) -> Field:
    """The activation input's type (after ``weight_type``: an int8 instruction encodes as it
    did before the field existed)."""
    return enum_field(name, InType, 1, "activation input: I8, or I16 (symmetric, zero point "
                      "0; 2 bytes per element, strides in bytes; results in wide accumulator "
                      "entries, two entries each)", default=InType.I8)


def zero_point(name: str, doc: str) -> Field:
    """A 9-bit zero point of an int8 operand (int8 minus it fits 9 bits + sign)."""
    return signed_field(name, 9, doc, default=0)


def _acc_boxes(a: tuple, at: tuple[int, ...], pixels: int, ch: int, entries: int = 1
               ) -> tuple[Access, ...]:
    """The accumulator box of `pixels` rows of `ch` results of `entries` entries each (2:
    wide): written, and read if ACCUMULATE."""
    lo, hi = span2(a[at[0]], pixels, a[at[1]], ch, entries, entries)
    if a[at[2]] == AccMode.ACCUMULATE:
        return (new_access(Access, ("acc", _ACC, lo, hi, True, 0)),
                new_access(Access, ("acc", _ACC, lo, hi, False, 0)))
    return (new_access(Access, ("acc", _ACC, lo, hi, True, 0)),)


# ---- CONV ---------------------------------------------------------------------------------------
CONV_FIELDS = (
    *nhwc_input(),
    unsigned_field("cin", EXTENT_BITS, "input channels", lo=1),
    zero_point("in_zp", "input zero point (subtracted; padding contributes 0)"),
    *window_fields(),
    unsigned_field("cout", EXTENT_BITS, "output channels", lo=1),
    address("w_addr", "SRAM byte address of weight (ky=0, kx=0, ci=0, co=0)"),
    sram_stride("w_stride_k", "bytes between kernel positions (ky * kw + kx)"),
    sram_stride("w_stride_ci", "bytes between input channels"),
    signed_field("w_stride_co", 24, "bytes between output channels", default=1),
    zero_point("w_zp", "weight zero point (subtracted; 0 for symmetric weights)"),
    *acc_output(),
    weight_type("w_type"),
    in_type("in_type"),
)
_CONV = getter(CONV_FIELDS, *_NHWC, "cin", "w_addr", "kh", "kw", "cout", "w_stride_k",
               "w_stride_ci", "w_stride_co", *_PIXELS, "w_type", "in_type")
_CONV_ACC = positions(CONV_FIELDS, *_ACC_FIELDS)


def _conv_per_byte(i: Instruction) -> int:
    return WeightType(i.w_type).per_byte


def _conv_sparse(i: Instruction) -> bool:
    return WeightType(i.w_type).sparse


def _needs_sparsity(arch: NpuArch, i: Instruction) -> str | None:
    if arch.sparse.enabled or not WeightType(i.w_type).sparse:
        return None
    return (f"CONV with 2:4 sparse weights needs sparsity support; {arch.name} has none "
            "(sparse.enabled)")


@dataclass(frozen=True)
class DenseWeights(Rule):
    """A weight-type field takes no 2:4 sparse storage (MATMUL, DWCONV)."""

    field: str

    def error(self, i: Instruction) -> str | None:
        if WeightType(getattr(i, self.field)).sparse:
            return f"{i.opcode.name} takes dense weights only ({self.field} I8 or I4)"
        return None

    def doc(self) -> str:
        return f"`{self.field}` is `I8` or `I4`"


class SparseGroups(Rule):
    """CONV with 2:4 sparse weights: groups of four input channels, symmetric weights."""

    def error(self, i: Instruction) -> str | None:
        if not WeightType(i.w_type).sparse:
            return None
        if i.cin % GROUP:
            return f"2:4 sparse weights need cin a multiple of {GROUP}, not {i.cin}"
        if i.w_zp:
            return f"2:4 sparse weights need w_zp 0, not {i.w_zp} (a skipped weight is 0)"
        return None

    def doc(self) -> str:
        return f"`w_type` 2:4 sparse: `cin % {GROUP} == 0` and `w_zp == 0`"


def _matmul_per_byte(i: Instruction) -> int:
    return WeightType(i.b_type).per_byte


def conv_weight_span(wa: int, kh: int, kw: int, cin: int, cout: int, sk: int, sci: int,
                     sco: int, wt: WeightType) -> tuple[int, int]:
    """The SRAM bytes [lo, hi) of a CONV's weights (2:4 sparse: the values, then the indices
    from ``hi`` of the values on, ``sparse24.index_bytes`` of them)."""
    rows = -(-cin // 2) if wt.sparse else cin  # cin / 2 (a multiple of 4 where it runs)
    lo, hi = wt.span(*span3(wa * wt.per_byte, kh * kw, sk, rows, sci, cout, sco, 1))
    if wt.sparse:
        hi += index_bytes(kh * kw, cin, cout)
    return lo, hi


def _conv_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    ia, ih, iw, sh, sw, cin, wa, kh, kw, cout, sk, sci, sco, oh, ow, wt, it = _CONV(a)
    nb = InType(it).nbytes
    lo, hi = span3(ia, ih, sh, iw, sw, cin, nb, nb)
    wlo, whi = conv_weight_span(wa, kh, kw, cin, cout, sk, sci, sco, WeightType(wt))
    return (new_access(Access, ("in", _SRAM, lo, hi, False, 0)),
            new_access(Access, ("w", _SRAM, wlo, whi, False, 0)),
            *_acc_boxes(a, _CONV_ACC, oh * ow, cout, nb))


# ---- MATMUL -------------------------------------------------------------------------------------
MATMUL_FIELDS = (
    extent("m", "rows of A and of the output"),
    extent("n", "columns of B and of the output"),
    extent("k", "reduction length"),
    address("a_addr", "SRAM byte address of A[0, 0] (int8, or int16 per `in_type`)"),
    sram_stride("a_stride_m", "bytes between rows of A"),
    signed_field("a_stride_k", 24, "bytes between columns of A", default=1),
    zero_point("a_zp", "zero point of A (subtracted)"),
    address("b_addr", "SRAM byte address of B[0, 0]"),
    sram_stride("b_stride_k", "bytes between rows of B"),
    signed_field("b_stride_n", 24, "bytes between columns of B", default=1),
    zero_point("b_zp", "zero point of B (subtracted)"),
    *acc_output(),
    weight_type("b_type"),
    in_type("in_type"),
)
_MATMUL = getter(MATMUL_FIELDS, "a_addr", "m", "k", "a_stride_m", "a_stride_k", "b_addr", "n",
                 "b_stride_k", "b_stride_n", "b_type", "in_type")
_MATMUL_ACC = positions(MATMUL_FIELDS, *_ACC_FIELDS)


def _matmul_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    aa, m, k, sam, sak, ba, n, sbk, sbn, bt, it = _MATMUL(a)
    nb = InType(it).nbytes
    alo, ahi = span2(aa, m, sam, k, sak, nb)
    bt = WeightType(bt)
    blo, bhi = bt.span(*span2(ba * bt.per_byte, k, sbk, n, sbn, 1))
    return (new_access(Access, ("a", _SRAM, alo, ahi, False, 0)),
            new_access(Access, ("b", _SRAM, blo, bhi, False, 0)),
            *_acc_boxes(a, _MATMUL_ACC, m, n, nb))


# ---- DWCONV -------------------------------------------------------------------------------------
DWCONV_FIELDS = (
    *nhwc_input(),
    extent("ch", "channels (depth multiplier 1)"),
    zero_point("in_zp", "input zero point (subtracted; padding contributes 0)"),
    *window_fields(),
    address("w_addr", "SRAM byte address of weight (ky=0, kx=0, c=0); channels contiguous"),
    sram_stride("w_stride_k", "bytes between kernel positions (ky * kw + kx)"),
    *acc_output(),
    weight_type("w_type"),
)
_DWCONV = getter(DWCONV_FIELDS, *_NHWC, "ch", "w_addr", "kh", "kw", "w_stride_k", *_PIXELS,
                 "w_type")
_DWCONV_ACC = positions(DWCONV_FIELDS, *_ACC_FIELDS)


def _dwconv_accesses(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    ia, ih, iw, sh, sw, ch, wa, kh, kw, sk, oh, ow, wt = _DWCONV(a)
    lo, hi = span3(ia, ih, sh, iw, sw, ch, 1, 1)
    wt = WeightType(wt)
    wlo, whi = wt.span(*span2(wa * wt.per_byte, kh * kw, sk, ch, 1, 1))
    return (new_access(Access, ("in", _SRAM, lo, hi, False, 0)),
            new_access(Access, ("w", _SRAM, wlo, whi, False, 0)),
            *_acc_boxes(a, _DWCONV_ACC, oh * ow, ch))


_DW_WORK = product("out_h", "out_w", "ch", "kh", "kw")  # one MAC per output and kernel tap


def _dwconv_vector_events(i: Instruction) -> Events:
    """DWCONV on the vector engine: one input byte and one weight (a byte, or half of one
    for int4) per MAC."""
    outs = i.out_h * i.out_w * i.ch
    e = outs * i.kh * i.kw
    per_byte = _conv_per_byte(i)
    return Events(macs=e, sram_read_bytes=e + -(-e // per_byte), acc_writes=outs,
                  int4_unpacked=e if per_byte > 1 else 0,
                  acc_reads=outs * (i.mode == AccMode.ACCUMULATE))


def _in_tile(ch: str) -> Product:
    return product("in_h", "in_w", ch)


def _in_type(i: Instruction) -> InType:
    return InType(i.in_type)


SPECS = (
    InstrSpec(
        opcode=Opcode.CONV, engine=Engine.MATRIX,
        summary="int8 / int16 conv tile, implicit window -> int32 / wide acc", fields=CONV_FIELDS,
        cost=Gemm(m=product(*_PIXELS), n=product("cout"), k=product("kh", "kw", "cin"),
                  window=_in_tile("cin"), weights_per_byte=_conv_per_byte,
                  sparse=_conv_sparse, in_type=_in_type),
        cost_fields=("in_h", "in_w", "cin", "kh", "kw", "out_h", "out_w", "cout", "mode",
                     "w_type", "in_type"),
        accesses=_conv_accesses,
        sram_elements=(("in", _in_tile("cin")), ("w", product("kh", "kw", "cin", "cout"))),
        frame=Frame("cin", im2col=product(*_PIXELS, "kh", "kw", "cin")),
        rules=(AccRowsApart("cout", wide=True), SparseGroups(), WideInput("in_zp", "w_type")),
        section="CONV (matrix engine)",
        requires=_needs_sparsity),
    InstrSpec(
        opcode=Opcode.MATMUL, engine=Engine.MATRIX,
        summary="int8 / int16 GEMM tile A[m,k] x B[k,n] -> int32 / wide acc",
        fields=MATMUL_FIELDS,
        cost=Gemm(m=product("m"), n=product("n"), k=product("k"), window=None,
                  weights_per_byte=_matmul_per_byte, in_type=_in_type),
        cost_fields=("m", "n", "k", "mode", "b_type", "in_type"), accesses=_matmul_accesses,
        sram_elements=(("a", product("m", "k")), ("b", product("k", "n"))),
        rules=(AccRowsApart("n", wide=True), DenseWeights("b_type"), WideInput("a_zp", "b_type")),
        section="MATMUL (matrix engine)"),
    InstrSpec(
        opcode=Opcode.DWCONV, engine=Engine.MATRIX, also=Engine.VECTOR,
        summary="int8 depthwise conv tile -> int32 acc", fields=DWCONV_FIELDS,
        # the array's depthwise mode: channels on the columns, kernel taps on the rows
        cost=Gemm(m=product(*_PIXELS), n=product("ch"), k=product("kh", "kw"),
                  window=_in_tile("ch"), depthwise=True, weights_per_byte=_conv_per_byte),
        also_cost=Vector(_DW_WORK, _dwconv_vector_events,
                         "MACs = work (int8 MAC energy); SRAM reads `work + W`, `W` the "
                         "weight bytes read (`work`, int4: `ceil(work/2)`); acc writes "
                         "`out_h*out_w*ch` (+ reads if ACCUMULATE)"),
        cost_fields=("in_h", "in_w", "ch", "kh", "kw", "out_h", "out_w", "mode", "w_type"),
        accesses=_dwconv_accesses,
        sram_elements=(("in", _in_tile("ch")), ("out", product(*_PIXELS, "ch"))),
        frame=Frame("ch"), rules=(AccRowsApart("ch"), DenseWeights("w_type")),
        section="DWCONV (matrix engine's depthwise mode, or vector engine)"),
)
