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
from tessel.isa.instruction import Instruction, _unchecked
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


def _stream_decoder(op: Opcode) -> tuple:
    """What ``decode_stream`` needs of an opcode, from the table: (opcode, size in bytes, the
    bit where padding starts, per field (shift, mask, sign bit or 0, lo, hi, enum members by
    value or None))."""
    spec, at, fields = SPECS[op], OPCODE_BITS, []
    for f in spec.fields:
        members = None if f.enum is None else {int(m): m for m in f.enum}
        fields.append((at, (1 << f.bits) - 1, 1 << (f.bits - 1) if f.signed else 0,
                       f.min, f.max, members))
        at += f.bits
    return op, spec.size, at, tuple(fields)


_DECODERS = {int(op): _stream_decoder(op) for op in SPECS}


def _decode_checked(raw: bytes, decoder: tuple) -> Instruction | None:
    """The instruction of `raw` (one whole encoding of `decoder`'s opcode), or None if a field
    is out of its legal range, an enum value unknown or a padding bit set (``decode`` then says
    which): the same checks as ``decode``, inline."""
    op, _, pad, fields = decoder
    word = int.from_bytes(raw, "little")
    if word >> pad:
        return None
    args = []
    for at, mask, sign, lo, hi, members in fields:
        v = (word >> at) & mask
        if members is not None:
            m = members.get(v)
            if m is None:
                return None
            args.append(m)
            continue
        if v & sign:
            v -= sign << 1
        if not lo <= v <= hi:
            return None
        args.append(v)
    return _unchecked(op, args)


def decode_stream(engine: Engine, data: bytes) -> list[Instruction]:
    """Decode a whole queue for ``engine`` and check it with ``check_stream``.

    Errors name the instruction index and byte offset. Each distinct encoding is decoded and
    checked once (a queue repeats its tiles' instructions: equal bytes give the same, immutable
    Instruction); a bad one is decoded again by ``decode``, whose error is the message.
    """
    engine = Engine(engine)
    out: list[Instruction] = []
    seen: dict[bytes, Instruction] = {}
    allowed: dict[Opcode, bool] = {}
    offset, n = 0, len(data)
    while offset < n:
        decoder = _DECODERS.get(data[offset])
        end = offset + decoder[1] if decoder is not None else n + 1
        ins = None
        if end <= n:
            raw = bytes(data[offset:end])
            ins = seen.get(raw)
            if ins is None:
                ins = _decode_checked(raw, decoder)  # type: ignore[arg-type]
                if ins is not None:
                    seen[raw] = ins
        if ins is None:  # the reason, from the one-instruction decoder
            try:
                decode(data, offset)
            except TesselFormatError as exc:
                raise TesselFormatError(
                    f"{engine.name} queue, instruction {len(out)}: {exc}") from None
            raise AssertionError(f"decode_stream: offset {offset} decodes alone")  # pragma: no cover
        ok = allowed.get(ins.opcode)
        if ok is None:
            ok = allowed[ins.opcode] = ins.spec.runs_on(engine)
        if not ok:
            raise TesselFormatError(
                f"{engine.name} queue, instruction {len(out)} at offset {offset}: "
                f"{ins.opcode.name} belongs to the {ins.spec.engine.name} engine"
            )
        out.append(ins)
        offset = end
    check_stream(engine, out)
    return out
