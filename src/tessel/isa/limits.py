"""The ISA's limits other packages need, each derived from the instruction table.

A limit is a field's legal range (``Field.min`` / ``max``), the number of values a field can
name (``1 << bits``) or a property of an enum (``LutMode.entries``); nothing here is typed
twice. The compiler's emitters, the golden model and the NPU parameters' checks read these
names instead of re-typing 65535 or 15.
"""

from __future__ import annotations

from tessel.isa.fields import DType, Engine, Field, LutMode
from tessel.isa.fixedpoint import MAX_SHIFT, MIN_SHIFT
from tessel.isa.instrs.vector import PARAM_BYTES
from tessel.isa.table import NUM_TOKENS, SPECS, Opcode

__all__ = [
    "ALL_ENGINES_MASK", "DMA_ENGINES", "MAX_ACC_ENTRIES", "MAX_DILATION", "MAX_EXTENT",
    "MAX_CENTRED_INT8", "MAX_FRAC_BITS", "MAX_KERNEL", "MAX_LEFT_SHIFT", "MAX_LUT_ENTRIES", "MAX_MATRIX_ZP",
    "MAX_OFFCHIP_BYTES", "MAX_OFFCHIP_MEMORIES", "MAX_PAD", "MAX_REDUCTION", "MAX_SHIFT",
    "MAX_STRIDE", "MAX_TILE_HW", "MIN_LUT_ENTRIES", "MIN_MATRIX_ZP", "MIN_SHIFT", "NUM_ENGINES",
    "NUM_TOKENS", "REQUANT_PARAM_BYTES", "field",
]


def field(opcode: Opcode, name: str) -> Field:
    """The field ``name`` of ``opcode``'s row."""
    return SPECS[opcode].field(name)


# ---- engines and tokens -------------------------------------------------------------------------
NUM_ENGINES = len(Engine)
ALL_ENGINES_MASK = (1 << NUM_ENGINES) - 1  # one bit per engine (bit e: Engine(e))
DMA_ENGINES = (Engine.DMA_IN, Engine.DMA_OUT)

# ---- sizes --------------------------------------------------------------------------------------
# every loop extent, channel count and GEMM size of every instruction is a 16-bit field
# (tests/unit/isa/test_isa_limits.py checks they share this maximum)
MAX_EXTENT = field(Opcode.DMA_LOAD, "d0").max
MAX_TILE_HW = field(Opcode.CONV, "in_h").max  # height and width of a CONV / DWCONV / POOL tile

# ---- CONV / DWCONV windows (POOL's kernel and padding fields are wider) ---------------------------
MAX_KERNEL = field(Opcode.CONV, "kh").max
MAX_STRIDE = field(Opcode.CONV, "stride_h").max
MAX_DILATION = field(Opcode.CONV, "dil_h").max
MAX_PAD = min(field(op, "pad_top").max for op in (Opcode.CONV, Opcode.DWCONV))
# the longest reduction of one matrix instruction: a CONV's kh * kw * cin, a MATMUL's k
MAX_REDUCTION = max(MAX_KERNEL * field(Opcode.CONV, "kw").max * field(Opcode.CONV, "cin").max,
                    field(Opcode.MATMUL, "k").max)

# ---- arithmetic ---------------------------------------------------------------------------------
MIN_MATRIX_ZP = field(Opcode.CONV, "in_zp").min  # zero points of the int8 matrix operands
MAX_MATRIX_ZP = field(Opcode.CONV, "in_zp").max
MAX_LEFT_SHIFT = field(Opcode.ELTWISE, "left_shift").max
MAX_FRAC_BITS = field(Opcode.UNARY, "frac_bits").max
# |x - zp| of an int8 operand x and a matrix zero point zp
MAX_CENTRED_INT8 = max(DType.I8.hi - MIN_MATRIX_ZP, MAX_MATRIX_ZP - DType.I8.lo)
# the multipliers' shift fields: tessel.isa.fixedpoint's MIN_SHIFT .. MAX_SHIFT (re-exported)
REQUANT_PARAM_BYTES = PARAM_BYTES  # REQUANT's int32 bias, multiplier and shift per channel

# ---- memories the fields address ----------------------------------------------------------------
MAX_OFFCHIP_MEMORIES = 1 << field(Opcode.DMA_LOAD, "mem").bits
MAX_OFFCHIP_BYTES = 1 << field(Opcode.DMA_LOAD, "ext_addr").bits
MAX_ACC_ENTRIES = 1 << field(Opcode.CONV, "acc_addr").bits
MAX_LUT_ENTRIES = 1 << field(Opcode.LUT, "lut_base").bits
MIN_LUT_ENTRIES = max(m.entries for m in LutMode)  # LUT memory holds the largest table
