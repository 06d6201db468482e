"""THE instruction table of the Tessel NPU: every opcode, its engine and its ordered fields.

Nothing else in Tessel lists fields: the encoder, decoder, range checks, assembler,
disassembler, cost functions and the field tables of docs/isa.md all read ``SPECS``.
Encoding (docs/isa.md, "Encoding"): byte 0 is the opcode; the fields follow in table order,
packed least-significant-bit first from bit 8 of a little-endian integer; the instruction is
padded with zero bits to a whole number of 8-byte words. Units: SRAM / off-chip addresses
and strides are in bytes; accumulator addresses and strides in int32 entries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tessel.isa.fields import (
    AccMode,
    AccSrc,
    DType,
    EltOp,
    Engine,
    Field,
    LutMode,
    ParamMode,
    PoolOp,
    ReduceOp,
    UnaryOp,
    e,
    s,
    u,
)


class Opcode(enum.IntEnum):
    """Byte 0 of every instruction. 0x00 is never an opcode (zeroed memory does not decode)."""

    END = 0x01
    WAIT = 0x02
    SIGNAL = 0x03
    DMA_LOAD = 0x10
    DMA_STORE = 0x11
    CONV = 0x20
    MATMUL = 0x21
    REQUANT = 0x30
    ELTWISE = 0x31
    LUT = 0x32
    LUT_LOAD = 0x33
    POOL = 0x34
    DWCONV = 0x35
    REDUCE = 0x36
    COPY = 0x37
    UNARY = 0x38


NUM_TOKENS = 16  # token ids per ordered (producer, consumer) engine pair
WORD_BYTES = 8  # instructions are padded to whole 8-byte words
OPCODE_BITS = 8


@dataclass(frozen=True)
class InstrSpec:
    """One row of the table. ``engine`` None: the instruction may sit in any engine's queue;
    ``also``: a second engine that runs it too (DWCONV: the array's depthwise mode, or the
    vector engine), with that engine's cost (docs/isa.md)."""

    opcode: Opcode
    engine: Engine | None
    summary: str
    fields: tuple[Field, ...]
    also: Engine | None = None

    def runs_on(self, engine: Engine) -> bool:
        """Whether an instruction of this opcode may sit in ``engine``'s queue."""
        return self.engine is None or engine in (self.engine, self.also)

    @property
    def bits(self) -> int:
        return OPCODE_BITS + sum(f.bits for f in self.fields)

    @property
    def size(self) -> int:
        """Encoded size in bytes (a multiple of 8)."""
        return -(-self.bits // (8 * WORD_BYTES)) * WORD_BYTES

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def offsets(self) -> tuple[int, ...]:
        """Bit offset of each field (opcode at bits 0-7)."""
        out, at = [], OPCODE_BITS
        for f in self.fields:
            out.append(at)
            at += f.bits
        return tuple(out)


# ---- field groups shared by several instructions -----------------------------------------------
def _addr(name: str, doc: str) -> Field:
    return u(name, 32, doc, hex=True)


def _dim(name: str, doc: str, bits: int = 16) -> Field:
    return u(name, bits, doc, lo=1, default=1)


def _sstride(name: str, doc: str) -> Field:
    return s(name, 24, doc, default=0)


def _view(prefix: str, what: str, dims: int) -> tuple[Field, ...]:
    """Base address and one byte stride per dimension of an SRAM operand."""
    return (_addr(f"{prefix}_addr", f"SRAM byte address of {what}[0, ...]"),) + tuple(
        _sstride(f"{prefix}_s{i}", f"{what}: bytes between consecutive i{i}") for i in range(dims)
    )


def _dims(n: int, doc: str) -> tuple[Field, ...]:
    return tuple(_dim(f"d{i}", f"{doc} extent of dimension {i} (0 = innermost)") for i in range(n))


def _clamp() -> tuple[Field, ...]:
    return (
        s("act_min", 32, "saturating clamp: lowest output value (within the output type)"),
        s("act_max", 32, "saturating clamp: highest output value (within the output type)"),
    )


def _mult(prefix: str, what: str) -> tuple[Field, ...]:
    return (
        u(f"{prefix}_mult", 31, f"Q31 multiplier of {what} (0 .. 2^31-1)", default=0),
        s(f"{prefix}_shift", 6, f"shift of {what} (> 0 left, < 0 right)", lo=-31, hi=30, default=0),
    )


def _window(pad_bits: int = 4, kernel_bits: int = 4) -> tuple[Field, ...]:
    return (
        _dim("kh", "kernel height", kernel_bits),
        _dim("kw", "kernel width", kernel_bits),
        _dim("stride_h", "vertical stride", 4),
        _dim("stride_w", "horizontal stride", 4),
        _dim("dil_h", "vertical dilation", 4),
        _dim("dil_w", "horizontal dilation", 4),
        u("pad_top", pad_bits, "rows of implicit padding above the input tile", default=0),
        u("pad_left", pad_bits, "columns of implicit padding left of the input tile", default=0),
    )


def _nhwc_input() -> tuple[Field, ...]:
    return (
        _addr("in_addr", "SRAM byte address of input pixel (0, 0), channel 0"),
        _dim("in_h", "input tile height (rows outside [0, in_h) are padding)", 12),
        _dim("in_w", "input tile width (columns outside [0, in_w) are padding)", 12),
        _sstride("in_stride_h", "bytes between input rows"),
        _sstride("in_stride_w", "bytes between input pixels (channels are contiguous)"),
    )


def _acc_out() -> tuple[Field, ...]:
    return (
        u("acc_addr", 24, "accumulator entry of output (0, 0), channel 0", hex=True),
        u("acc_stride", 16, "accumulator entries between consecutive output pixels / rows", lo=1),
        e("mode", AccMode, 1, "OVERWRITE or ACCUMULATE", default=AccMode.OVERWRITE),
    )


_TOKEN = (
    e("engine", Engine, 2, "peer engine (the consumer for SIGNAL, the producer for WAIT)"),
    u("token", 4, "token id (semaphore index) of the (producer, consumer) pair"),
)

_DMA = (
    u("mem", 3, "off-chip memory index (position in the preset's [[offchip]] list)"),
    e("dtype", DType, 2, "element type: every element moves as 1, 2 or 4 bytes"),
    *_dims(4, "element loop:"),
    _addr("ext_addr", "off-chip byte address of element (0, 0, 0, 0)"),
    *(s(f"ext_s{i}", 32, f"off-chip bytes between consecutive i{i}", default=0) for i in range(4)),
    _addr("sram_addr", "SRAM byte address of element (0, 0, 0, 0)"),
    *(_sstride(f"sram_s{i}", f"SRAM bytes between consecutive i{i}") for i in range(4)),
)

SPECS: dict[Opcode, InstrSpec] = {
    spec.opcode: spec
    for spec in (
        InstrSpec(Opcode.END, None, "end of this engine's queue", ()),
        InstrSpec(Opcode.WAIT, None, "take one token from a producer engine (blocks)", _TOKEN),
        InstrSpec(Opcode.SIGNAL, None, "give one token to a consumer engine", _TOKEN),
        InstrSpec(Opcode.DMA_LOAD, Engine.DMA_IN, "off-chip -> SRAM, 4-D strided", _DMA),
        InstrSpec(Opcode.DMA_STORE, Engine.DMA_OUT, "SRAM -> off-chip, 4-D strided", _DMA),
        InstrSpec(Opcode.CONV, Engine.MATRIX, "int8 conv tile, implicit window -> int32 acc", (
            *_nhwc_input(),
            u("cin", 16, "input channels", lo=1),
            s("in_zp", 9, "input zero point (subtracted; padding contributes 0)", default=0),
            *_window(),
            _dim("out_h", "output tile height", 12),
            _dim("out_w", "output tile width", 12),
            u("cout", 16, "output channels", lo=1),
            _addr("w_addr", "SRAM byte address of weight (ky=0, kx=0, ci=0, co=0)"),
            _sstride("w_stride_k", "bytes between kernel positions (ky * kw + kx)"),
            _sstride("w_stride_ci", "bytes between input channels"),
            s("w_stride_co", 24, "bytes between output channels", default=1),
            s("w_zp", 9, "weight zero point (subtracted; 0 for symmetric weights)", default=0),
            *_acc_out(),
        )),
        InstrSpec(Opcode.MATMUL, Engine.MATRIX, "int8 GEMM tile A[m,k] x B[k,n] -> int32 acc", (
            _dim("m", "rows of A and of the output"),
            _dim("n", "columns of B and of the output"),
            _dim("k", "reduction length"),
            _addr("a_addr", "SRAM byte address of A[0, 0]"),
            _sstride("a_stride_m", "bytes between rows of A"),
            s("a_stride_k", 24, "bytes between columns of A", default=1),
            s("a_zp", 9, "zero point of A (subtracted)", default=0),
            _addr("b_addr", "SRAM byte address of B[0, 0]"),
            _sstride("b_stride_k", "bytes between rows of B"),
            s("b_stride_n", 24, "bytes between columns of B", default=1),
            s("b_zp", 9, "zero point of B (subtracted)", default=0),
            *_acc_out(),
        )),
        InstrSpec(Opcode.REQUANT, Engine.VECTOR, "int32 + bias, Q31 rescale, zp, clamp", (
            e("src", AccSrc, 1, "ACC: accumulator entries; SRAM: int32 words in SRAM"),
            u("src_addr", 32, "first input (entry index for ACC, byte address for SRAM)", hex=True),
            s("src_stride", 24, "input row stride (entries for ACC, bytes for SRAM)", default=0),
            _dim("rows", "rows (pixels)"),
            _dim("ch", "channels per row (contiguous in the source)"),
            e("out_dtype", DType, 2, "output type I8, I16 or I32"),
            _addr("dst_addr", "SRAM byte address of output row 0, channel 0"),
            _sstride("dst_stride", "bytes between output rows (channels are contiguous)"),
            _addr("param_addr", "SRAM byte address of the int32 table bias[P], mult[P], shift[P]"),
            e("param_mode", ParamMode, 1, "P = ch (PER_CHANNEL) or 1 (PER_TENSOR)",
              default=ParamMode.PER_CHANNEL),
            s("out_zp", 32, "output zero point (added)", default=0),
            *_clamp(),
        )),
        InstrSpec(Opcode.ELTWISE, Engine.VECTOR, "a (op) b, per-input rescale (TFLite add/mul)", (
            e("op", EltOp, 3, "ADD, SUB, MUL, MAX or MIN"),
            e("a_dtype", DType, 2, "type of a"),
            e("b_dtype", DType, 2, "type of b"),
            e("out_dtype", DType, 2, "type of the output"),
            *_dims(3, "iteration space:"),
            *_view("a", "a", 3),
            *_view("b", "b", 3),
            *_view("out", "out", 3),
            s("a_zp", 32, "zero point of a (subtracted)", default=0),
            s("b_zp", 32, "zero point of b (subtracted)", default=0),
            u("left_shift", 5, "left shift of both inputs before rescale (ADD/SUB/MAX/MIN)",
              default=0),
            *_mult("a", "a (not MUL)"),
            *_mult("b", "b (not MUL)"),
            *_mult("out", "the result"),
            s("out_zp", 32, "output zero point (added)", default=0),
            *_clamp(),
        )),
        InstrSpec(Opcode.LUT, Engine.VECTOR, "table look-up (activation functions)", (
            e("lut_mode", LutMode, 1, "I8_256 (int8) or I16_513 (int16, interpolated)"),
            u("lut_base", 12, "first LUT-memory entry of the table"),
            *_dims(3, "iteration space:"),
            *_view("src", "src", 3),
            *_view("dst", "dst", 3),
        )),
        InstrSpec(Opcode.LUT_LOAD, Engine.VECTOR, "SRAM int16 words -> LUT memory", (
            u("lut_base", 12, "first LUT-memory entry written"),
            u("count", 13, "number of int16 entries", lo=1, hi=4096),
            _addr("src_addr", "SRAM byte address of entry 0 (int16, little-endian)"),
        )),
        InstrSpec(Opcode.POOL, Engine.VECTOR, "max / average pooling over an NHWC tile", (
            e("op", PoolOp, 1, "MAX or AVG"),
            e("dtype", DType, 2, "element type of input and output (I8 or I16)"),
            *_nhwc_input(),
            _dim("ch", "channels"),
            *_window(pad_bits=8, kernel_bits=8),
            _dim("out_h", "output tile height", 12),
            _dim("out_w", "output tile width", 12),
            _addr("out_addr", "SRAM byte address of output pixel (0, 0), channel 0"),
            _sstride("out_stride_h", "bytes between output rows"),
            _sstride("out_stride_w", "bytes between output pixels"),
            *_clamp(),
        )),
        InstrSpec(Opcode.DWCONV, Engine.MATRIX, "int8 depthwise conv tile -> int32 acc", (
            *_nhwc_input(),
            _dim("ch", "channels (depth multiplier 1)"),
            s("in_zp", 9, "input zero point (subtracted; padding contributes 0)", default=0),
            *_window(),
            _dim("out_h", "output tile height", 12),
            _dim("out_w", "output tile width", 12),
            _addr("w_addr", "SRAM byte address of weight (ky=0, kx=0, c=0); channels contiguous"),
            _sstride("w_stride_k", "bytes between kernel positions (ky * kw + kx)"),
            *_acc_out(),
        ), also=Engine.VECTOR),
        InstrSpec(Opcode.REDUCE, Engine.VECTOR, "sum / sum of squares / max / min along one axis", (
            e("op", ReduceOp, 2, "SUM, SUMSQ (int32 out), MAX or MIN (out type = in type)"),
            e("dtype", DType, 2, "input type"),
            u("axis", 2, "reduced dimension (0, 1 or 2)", hi=2),
            *_dims(3, "input:"),
            *_view("src", "src", 3),
            s("in_zp", 32, "zero point subtracted before SUM / SUMSQ", default=0),
            _addr("dst_addr", "SRAM byte address of output (0, 0)"),
            _sstride("dst_s0", "bytes between outputs along the lower kept dimension"),
            _sstride("dst_s1", "bytes between outputs along the higher kept dimension"),
        )),
        InstrSpec(Opcode.COPY, Engine.VECTOR, "SRAM -> SRAM 4-D strided copy (transpose, concat)", (
            e("dtype", DType, 2, "element type"),
            *_dims(4, "element loop:"),
            *_view("src", "src", 4),
            *_view("dst", "dst", 4),
        )),
        InstrSpec(Opcode.UNARY, Engine.VECTOR, "int32 reciprocal / reciprocal square root", (
            e("op", UnaryOp, 2, "RECIP or RSQRT"),
            u("frac_bits", 5, "fraction bits of the result"),
            *_dims(3, "iteration space:"),
            *_view("src", "src (int32)", 3),
            *_view("dst", "dst (int32)", 3),
        )),
    )
}


def spec_of(opcode: Opcode) -> InstrSpec:
    return SPECS[opcode]


def opcodes_of(engine: Engine) -> tuple[Opcode, ...]:
    """Opcodes allowed in ``engine``'s queue (its own plus WAIT, SIGNAL, END)."""
    return tuple(op for op, sp in SPECS.items() if sp.runs_on(engine))
