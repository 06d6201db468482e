"""The opcodes of the Tessel NPU (byte 0 of every instruction) and the encoding's word size.

Each opcode's definition (fields, cost, operands, rules) is its ``InstrSpec`` in one of the
modules of ``tessel.isa.instrs``; ``tessel.isa.table.SPECS`` collects them.
"""

from __future__ import annotations

import enum


class Opcode(enum.IntEnum):
    """Byte 0 of every instruction. 0x00 is never an opcode (zeroed memory does not decode)."""

    END = 0x01
    WAIT = 0x02
    SIGNAL = 0x03
    DMA_LOAD = 0x10
    DMA_STORE = 0x11
    DMA_LOAD_W = 0x12
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


WORD_BYTES = 8  # instructions are padded to whole 8-byte words
OPCODE_BITS = 8
