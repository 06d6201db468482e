"""tessel.isa: the Tessel NPU instruction set, one definition per instruction (``InstrSpec``,
in ``tessel.isa.instrs``; collected in ``tessel.isa.table.SPECS``) and everything derived from
it.

Public API: ``Instruction``, ``Opcode``, ``Engine``, ``encode``, ``decode``, ``encode_stream``,
``decode_stream``, ``disassemble``, ``assemble``; costs in ``tessel.isa.costs``; operand boxes
and static trap rules in ``tessel.isa.footprint``; the limits other packages need in
``tessel.isa.limits``; the window of CONV / DWCONV / POOL in ``tessel.isa.window``. Semantics:
docs/isa.md (the simulator registers its implementations in ``tessel.isa.semantics``).
"""

from tessel.isa.codec import check_stream, decode, decode_stream, encode, encode_stream
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
    Rounding,
    UnaryOp,
)
from tessel.isa.instruction import Instruction
from tessel.isa.table import NUM_TOKENS, SPECS, InstrSpec, Opcode, opcodes_of
from tessel.isa.text import assemble, disassemble

__all__ = [
    "NUM_TOKENS",
    "SPECS",
    "AccMode",
    "AccSrc",
    "DType",
    "EltOp",
    "Engine",
    "Field",
    "InstrSpec",
    "Instruction",
    "LutMode",
    "Opcode",
    "ParamMode",
    "PoolOp",
    "ReduceOp",
    "Rounding",
    "UnaryOp",
    "assemble",
    "check_stream",
    "decode",
    "decode_stream",
    "disassemble",
    "encode",
    "encode_stream",
    "opcodes_of",
]
