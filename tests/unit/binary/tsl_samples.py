"""Sample programs for the .tsl tests, and a tiny fake ISA (the container format does not depend
on the ISA: the fake's programs round-trip through the same reader and writer).

The fake ISA: 4-byte instructions (u8 opcode, u8 a, u16 b); opcode 0 is END (a = b = 0)."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import Enum, IntEnum

from tessel.binary import DType, QuantParams, ScaleType, StreamCodec, TensorDescriptor, TslProgram
from tessel.errors import TesselFormatError

ARCH_HASH = bytes(range(32))


class FakeEngine(Enum):
    DMA_IN = 0
    MATRIX = 1
    VECTOR = 2
    DMA_OUT = 3


class FakeOp(IntEnum):
    END = 0
    NOP = 1
    LOAD = 2
    MAC = 3
    SIGNAL = 4  # a = peer engine, b = token
    WAIT = 5


@dataclass(frozen=True)
class FakeInstruction:
    op: FakeOp
    a: int = 0
    b: int = 0


def _encode(instructions: list[FakeInstruction]) -> bytes:
    return b"".join(struct.pack("<BBH", i.op, i.a, i.b) for i in instructions)


def _decode(engine: FakeEngine, data: bytes) -> list[FakeInstruction]:
    if len(data) % 4:
        raise TesselFormatError(f"{engine.name}: stream of {len(data)} bytes is truncated")
    out = []
    for at in range(0, len(data), 4):
        op, a, b = struct.unpack_from("<BBH", data, at)
        if op not in FakeOp._value2member_map_:
            raise TesselFormatError(f"{engine.name}: bad opcode {op} at byte {at}")
        if op in (FakeOp.END, FakeOp.NOP) and (a or b):
            raise TesselFormatError(f"{engine.name}: non-zero field at byte {at}")
        out.append(FakeInstruction(FakeOp(op), a, b))
    return out


def _token_op(i: FakeInstruction) -> tuple[bool, FakeEngine, int] | None:
    if i.op not in (FakeOp.SIGNAL, FakeOp.WAIT):
        return None
    return i.op is FakeOp.SIGNAL, FakeEngine(i.a % 4), i.b


FAKE_CODEC = StreamCodec(FakeEngine, _encode, _decode, lambda i: i.op is FakeOp.END, _token_op)


def token_instruction(codec: StreamCodec, signal: bool, peer: str, token: int) -> object:
    """A SIGNAL (or WAIT) naming engine `peer` and `token`, in `codec`'s ISA."""
    if codec is FAKE_CODEC:
        return FakeInstruction(FakeOp.SIGNAL if signal else FakeOp.WAIT, FakeEngine[peer].value,
                               token)
    from tessel.isa.instruction import Instruction
    from tessel.isa.table import Opcode

    op = Opcode.SIGNAL if signal else Opcode.WAIT
    return Instruction.make(op, engine=codec.engine_type[peer], token=token)


def _fake_streams(n: int) -> dict[FakeEngine, list[FakeInstruction]]:
    body = [FakeInstruction(FakeOp((k % 3) + 1), k % 256, k * 7 % 65536) for k in range(n)]
    body = [i if i.op is not FakeOp.NOP else FakeInstruction(FakeOp.NOP) for i in body]
    end = [FakeInstruction(FakeOp.END)]
    return {e: body[: n - e.value] + end for e in FakeEngine}


def real_codec() -> StreamCodec:
    """The tessel.isa codec."""
    from tessel.binary import isa_codec

    return isa_codec()


def sample_programs(codec: StreamCodec) -> list[TslProgram]:
    """A minimal, a typical and an edge-case program for `codec`'s ISA."""
    streams = _fake_streams
    engine = codec.engine_type
    q_axis = QuantParams((0.5, 0.25, 0.125), (0, 1, -1), axis=1, scale_type=ScaleType.FLOAT64)
    typical = TslProgram(
        ARCH_HASH, {engine[k.name]: v for k, v in streams(12).items()},
        constants=bytes(range(256)) * 3, constants_memory=0, constants_address=4096,
        inputs=(TensorDescriptor("image", DType.INT8, (1, 8, 8, 3), 1, 0,
                                 QuantParams((0.0078125,), (-3,))),),
        outputs=(TensorDescriptor("logits", DType.INT8, (1, 3), 1, 256, q_axis),
                 TensorDescriptor("raw", DType.INT32, (2, 2), 0, 1024)),
        metadata={"model": "tiny", "blocks": [{"op": "conv", "k": 3}], "pi": 3.25, "ok": True},
    )
    minimal = TslProgram(ARCH_HASH, {engine["MATRIX"]: streams(1)[FakeEngine.MATRIX]})
    edge = TslProgram(
        bytes(32), {engine["VECTOR"]: streams(40)[FakeEngine.VECTOR]}, constants=b"\x01",
        constants_memory=2, constants_address=7,
        inputs=(TensorDescriptor("s\u00e9q\u2603", DType.UINT8, (), 0, 3),
                TensorDescriptor("rank8", DType.INT16, (1,) * 7 + (2,), 0, 16,
                                 QuantParams((1.5, 2.0), (5, -7), axis=7))),
        metadata={"\u00fcnicode": "\u2603", "nested": {"a": [1, 2, {"b": None}]}},
    )
    if codec is not FAKE_CODEC:
        return [_with_real_streams(p, codec) for p in (minimal, typical, edge)]
    return [minimal, typical, edge]


def _with_real_streams(program: TslProgram, codec: StreamCodec) -> TslProgram:
    """`program` with each stream replaced by real ISA instructions of about the same length
    (random legal field values; a DMA_IN -> MATRIX -> VECTOR -> DMA_OUT token chain when all four
    engines are present)."""
    import dataclasses
    import random

    rng = random.Random(len(program.streams) * 1000 + sum(map(len, program.streams.values())))
    chain = len(program.streams) == 4
    longest = max(map(len, program.streams.values()))
    streams = {e: _real_stream(e, longest if chain else len(s), rng, chain)
               for e, s in program.streams.items()}
    return dataclasses.replace(program, streams=streams)


def _real_stream(engine: Enum, n: int, rng: object, chain: bool) -> list:
    from tessel.isa.instruction import Instruction
    from tessel.isa.table import SPECS, Opcode, opcodes_of

    def make(op: Opcode, **fixed: object) -> Instruction:
        values = {}
        for f in SPECS[op].fields:
            if f.name in fixed:
                values[f.name] = fixed[f.name]
            elif f.enum is not None:
                values[f.name] = rng.choice(list(f.enum))
            else:
                values[f.name] = rng.randint(f.min, f.max)
        return Instruction.make(op, **values)

    own = [op for op in opcodes_of(engine) if op not in (Opcode.END, Opcode.WAIT, Opcode.SIGNAL)]
    order = [type(engine)[name] for name in ("DMA_IN", "MATRIX", "VECTOR", "DMA_OUT")]
    at = order.index(engine)
    out: list = []
    for _ in range(max(1, (n - 1) // 3)):
        if chain and at > 0:
            out.append(make(Opcode.WAIT, engine=order[at - 1], token=at))
        out.append(make(rng.choice(own)))
        if chain and at < 3:
            out.append(make(Opcode.SIGNAL, engine=order[at + 1], token=at + 1))
    return out + [make(Opcode.END)]


def codec_and_programs(fake: bool = False) -> tuple[StreamCodec, list[TslProgram]]:
    """The real ISA's codec and samples (`fake`: the fake ISA's)."""
    codec = FAKE_CODEC if fake else real_codec()
    return codec, sample_programs(codec)


def patch(data: bytes, offset: int, fmt: str, *values: object) -> bytes:
    """`data` with struct `fmt` (little-endian) packed at `offset`."""
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, offset, *values)
    return bytes(out)


def entry_offset(index: int) -> int:
    """File offset of section table entry `index`."""
    return 80 + 32 * index


def section_of(data: bytes, kind: int) -> tuple[int, int, int]:
    """(table index, offset, size) of the first section of `kind` in a well-formed file."""
    count = struct.unpack_from("<I", data, 28)[0]
    for i in range(count):
        k, _, _, offset, size, _, _ = struct.unpack_from("<HHIQQII", data, entry_offset(i))
        if k == kind:
            return i, offset, size
    raise KeyError(kind)


def fix_checksums(data: bytes) -> bytes:
    """Recompute every checksum that can be located, so a mutation reaches the deeper checks.
    Tolerates any garbage (never raises)."""
    out = bytearray(data)
    if len(out) < 80:
        return bytes(out)
    count = min(struct.unpack_from("<I", out, 28)[0], (len(out) - 80) // 32)
    for i in range(count):
        at = entry_offset(i)
        offset, size = struct.unpack_from("<QQ", out, at + 8)
        if offset + size <= len(out):
            struct.pack_into("<I", out, at + 28, zlib.crc32(out[offset: offset + size]))
    struct.pack_into("<I", out, 64, zlib.crc32(out[80: 80 + 32 * count]))
    struct.pack_into("<I", out, 76, zlib.crc32(out[:76]))
    return bytes(out)


def assemble(sections: list[tuple[int, int, int, bytes]], arch_hash: bytes = ARCH_HASH,
             version: tuple[int, int] = (1, 0)) -> bytes:
    """A .tsl file from (kind, alignment, count, payload) tuples, written straight from the spec
    (independently of tessel.binary.writer), with correct checksums."""
    table_end = 80 + 32 * len(sections)
    placed, cursor = [], table_end
    for kind, alignment, count, payload in sections:
        offset = -(-cursor // alignment) * alignment
        placed.append((kind, alignment, offset, count, payload))
        cursor = offset + len(payload)
    out = bytearray(cursor)
    for i, (kind, alignment, offset, count, payload) in enumerate(placed):
        out[offset: offset + len(payload)] = payload
        struct.pack_into("<HHIQQII", out, entry_offset(i), kind, 0, alignment, offset,
                         len(payload), count, zlib.crc32(payload))
    struct.pack_into("<4sHHIIQII32s", out, 0, b"TSL\0", *version, 0, 80, cursor, 80,
                     len(sections), arch_hash)
    return fix_checksums(bytes(out))


def minimal_sections(stream: bytes, count: int, kind: int = 2) -> list[tuple[int, int, int, bytes]]:
    """One instruction section plus empty constants, IO and metadata."""
    return [(kind, 16, count, stream), (0x10, 64, 0, bytes(16)), (0x11, 8, 0, b""),
            (0x12, 8, 0, b"{}")]
