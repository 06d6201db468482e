"""THE instruction table of the Tessel NPU: every opcode's ``InstrSpec``, in opcode order.

The definitions live in ``tessel.isa.instrs`` (one module per family); nothing else lists
fields or per-opcode rules: the encoder, decoder, range checks, assembler, disassembler, cost
functions, operand boxes, static rules, limits and the generated parts of docs/isa.md all
read ``SPECS``. Encoding (docs/isa.md, "Encoding"): byte 0 is the opcode; the fields follow
in table order, packed least-significant-bit first from bit 8 of a little-endian integer; the
instruction is padded with zero bits to a whole number of 8-byte words.
"""

from __future__ import annotations

from tessel.isa.fields import Engine
from tessel.isa.instrs import control, data, dma, matrix, vector
from tessel.isa.opcode import OPCODE_BITS, WORD_BYTES, Opcode
from tessel.isa.spec import InstrSpec

__all__ = ["NUM_TOKENS", "OPCODE_BITS", "SPECS", "WORD_BYTES", "InstrSpec", "Opcode", "opcodes_of"]

_ALL = {s.opcode: s for family in (control, dma, matrix, vector, data) for s in family.SPECS}
assert set(_ALL) == set(Opcode), f"no spec for {sorted(set(Opcode) - set(_ALL))}"
SPECS: dict[Opcode, InstrSpec] = {op: _ALL[op] for op in Opcode}

# token ids per ordered (producer, consumer) engine pair: every value of the `token` field
NUM_TOKENS = 1 << SPECS[Opcode.WAIT].field("token").bits


def opcodes_of(engine: Engine) -> tuple[Opcode, ...]:
    """Opcodes allowed in ``engine``'s queue (its own plus WAIT, SIGNAL, END)."""
    return tuple(op for op, sp in SPECS.items() if sp.runs_on(engine))
