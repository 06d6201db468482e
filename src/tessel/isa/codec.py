"""Binary encoding of instructions and instruction streams, derived from the ISA table.

``encode`` / ``decode`` handle one instruction; ``encode_stream`` / ``decode_stream`` a whole
engine queue. Decoding never trusts its input: an unknown opcode, a field value outside its
legal range, non-zero padding or a truncated instruction raises ``TesselFormatError`` with the
byte offset. ``decode_stream`` also checks the queue's rules (docs/isa.md, "Queues").
"""

from __future__ import annotations

from collections.abc import Iterable

from tessel.errors import TesselFormatError
from tessel.isa.fields import Engine
from tessel.isa.instruction import Instruction
from tessel.isa.table import OPCODE_BITS, SPECS, Opcode


def _layout(op: Opcode) -> tuple[tuple[tuple[int, int], ...], int]:
    """((shift, mask) per field, size in bytes) of an opcode, from the table."""
    spec, at, out = SPECS[op], OPCODE_BITS, []
    for f in spec.fields:
        out.append((at, (1 << f.bits) - 1))
        at += f.bits
    return tuple(out), spec.size


_LAYOUT = {op: _layout(op) for op in SPECS}  # encoding is on the compiler's hot path


def encode(instr: Instruction) -> bytes:
    """The instruction's bytes (a multiple of 8 long)."""
    fields, size = _LAYOUT[instr.opcode]
    word = int(instr.opcode)
    for (at, mask), v in zip(fields, instr.args):  # noqa: B905 - same table row
        word |= (int(v) & mask) << at
    return word.to_bytes(size, "little")


def decode(data: bytes, offset: int = 0) -> tuple[Instruction, int]:
    """Decode one instruction at ``offset``; returns it and the offset just after it."""
    if offset < 0 or offset >= len(data):
        raise TesselFormatError(f"offset {offset}: no instruction (data is {len(data)} bytes)")
    code = data[offset]
    try:
        op = Opcode(code)
    except ValueError:
        raise TesselFormatError(f"offset {offset}: unknown opcode 0x{code:02x}") from None
    spec = SPECS[op]
    end = offset + spec.size
    if end > len(data):
        raise TesselFormatError(
            f"offset {offset}: {op.name} needs {spec.size} bytes, only {len(data) - offset} left"
        )
    word = int.from_bytes(data[offset:end], "little")
    at, args = OPCODE_BITS, []
    for f in spec.fields:
        v = (word >> at) & ((1 << f.bits) - 1)
        if f.signed and v >> (f.bits - 1):
            v -= 1 << f.bits
        why = f.check(v)
        if why is not None:
            raise TesselFormatError(f"offset {offset}: {op.name}.{f.name} {why}")
        args.append(f.enum(v) if f.enum is not None else v)
        at += f.bits
    if word >> at:
        raise TesselFormatError(f"offset {offset}: {op.name} has non-zero padding bits")
    return Instruction(op, tuple(args)), end


def encode_stream(instrs: Iterable[Instruction]) -> bytes:
    """Concatenated encodings of ``instrs``."""
    return b"".join(encode(i) for i in instrs)


def check_stream(engine: Engine, instrs: list[Instruction]) -> None:
    """Raise TesselFormatError unless ``instrs`` is a legal queue for ``engine``.

    Rules: every instruction belongs to ``engine`` (or is WAIT / SIGNAL / END); WAIT and SIGNAL
    name another engine; the queue ends with END and END appears nowhere else.
    """
    where = f"{Engine(engine).name} queue"
    if not instrs or instrs[-1].opcode != Opcode.END:
        raise TesselFormatError(f"{where}: does not end with END")
    for i, ins in enumerate(instrs):
        owner = ins.spec.engine
        if not ins.spec.runs_on(engine):
            raise TesselFormatError(
                f"{where}: instruction {i} ({ins.opcode.name}) belongs to the {owner.name} engine"
            )
        if ins.opcode in (Opcode.WAIT, Opcode.SIGNAL) and ins.engine == engine:
            raise TesselFormatError(
                f"{where}: instruction {i} ({ins.opcode.name}) names its own engine"
            )
        if ins.opcode == Opcode.END and i != len(instrs) - 1:
            raise TesselFormatError(f"{where}: instruction {i} is END but is not the last")


def decode_stream(engine: Engine, data: bytes) -> list[Instruction]:
    """Decode a whole queue for ``engine`` and check it with ``check_stream``.

    Errors name the instruction index and byte offset.
    """
    engine = Engine(engine)
    out: list[Instruction] = []
    offset = 0
    while offset < len(data):
        try:
            ins, nxt = decode(data, offset)
        except TesselFormatError as exc:
            raise TesselFormatError(f"{engine.name} queue, instruction {len(out)}: {exc}") from None
        owner = ins.spec.engine
        if not ins.spec.runs_on(engine):
            raise TesselFormatError(
                f"{engine.name} queue, instruction {len(out)} at offset {offset}: "
                f"{ins.opcode.name} belongs to the {owner.name} engine"
            )
        out.append(ins)
        offset = nxt
    check_stream(engine, out)
    return out
