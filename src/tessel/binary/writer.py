"""Serialise a TslProgram to .tsl bytes (deterministic: same program -> same bytes) and save it
to disk atomically."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tessel.binary.codec import StreamCodec, isa_codec
from tessel.binary.layout import (
    CONSTANTS_ALIGNMENT,
    CONSTANTS_PREFIX_STRUCT,
    DEFAULT_ALIGNMENT,
    DESCRIPTOR_SIZE,
    DESCRIPTOR_STRUCT,
    FORMAT_MAJOR,
    HEADER_CRC_OFFSET,
    HEADER_SIZE,
    MAGIC,
    MAX_RANK,
    QUANT_ALIGNMENT,
    SECTION_ENTRY_SIZE,
    STREAM_ALIGNMENT,
    Direction,
    Header,
    ScaleType,
    SectionEntry,
    SectionKind,
    align_up,
    crc32,
    kind_of_engine,
)
from tessel.binary.program import (
    U32_MAX,
    TensorDescriptor,
    TslProgram,
    canonical_json,
    check_io,
    format_minor,
)
from tessel.binary.tokens import check_tokens
from tessel.errors import TesselFormatError
from tessel.fileio import write_atomic


@dataclass(frozen=True)
class _Payload:
    kind: SectionKind
    alignment: int
    count: int
    data: bytes


def write_tsl(program: TslProgram, *, codec: StreamCodec | None = None) -> bytes:
    """The .tsl bytes of `program`. Raises TesselFormatError if the program cannot be written
    as a file the reader would accept (bad descriptor, stream not ending with END, ...)."""
    check_io(program.inputs, program.outputs)
    if codec is None and program.streams:
        codec = isa_codec()
    payloads = _stream_payloads(program, codec)
    payloads.append(_constants_payload(program))
    payloads.append(_io_payload(program))
    payloads.append(_Payload(SectionKind.METADATA, DEFAULT_ALIGNMENT, 0,
                             canonical_json(program.metadata)))
    if program.host_graphs:
        payloads.append(_Payload(SectionKind.HOST_GRAPHS, DEFAULT_ALIGNMENT, 0,
                                 canonical_json(dict(program.host_graphs))))
    return _assemble(program.arch_hash, payloads, format_minor(program))


def save_tsl(path: str | os.PathLike[str], program: TslProgram, *,
             codec: StreamCodec | None = None) -> None:
    """Write `program` to `path` atomically (``tessel.fileio.write_atomic``): on any error the
    destination is left as it was and an OSError becomes a TesselConfigError naming the path."""
    write_atomic(path, write_tsl(program, codec=codec))


def _stream_payloads(program: TslProgram, codec: StreamCodec | None) -> list[_Payload]:
    payloads, decoded = [], {}
    for engine, stream in program.streams.items():
        try:
            kind = kind_of_engine(engine.name)
        except (KeyError, AttributeError) as exc:
            raise TesselFormatError(f"stream key {engine!r} is not an Engine") from exc
        assert codec is not None
        if isinstance(stream, bytes):
            data, instructions = stream, codec.decode(engine, stream)
        else:
            data, instructions = codec.encode(list(stream)), stream
        if not instructions or not codec.is_end(instructions[-1]):
            raise TesselFormatError(f"stream of engine {engine.name} does not end with END")
        if len(instructions) > U32_MAX:
            raise TesselFormatError(f"stream of engine {engine.name} has too many instructions")
        payloads.append(_Payload(kind, STREAM_ALIGNMENT, len(instructions), bytes(data)))
        decoded[engine] = instructions
    if codec is not None and codec.token_op is not None:
        check_tokens(decoded, codec.token_op, lambda engine: f"stream of engine {engine.name}")
    return sorted(payloads, key=lambda p: p.kind)


def _constants_payload(program: TslProgram) -> _Payload:
    memory, address = program.constants_memory, program.constants_address
    if not 0 <= memory <= U32_MAX or not 0 <= address <= 2**64 - len(program.constants):
        raise TesselFormatError(
            f"constants placement (memory {memory}, address {address}) is out of range"
        )
    prefix = CONSTANTS_PREFIX_STRUCT.pack(memory, 0, address)
    return _Payload(SectionKind.CONSTANTS, CONSTANTS_ALIGNMENT, 0, prefix + program.constants)


def _io_payload(program: TslProgram) -> _Payload:
    descs = [(Direction.INPUT, d) for d in program.inputs]
    descs += [(Direction.OUTPUT, d) for d in program.outputs]
    table = bytearray()
    heap = bytearray(len(descs) * DESCRIPTOR_SIZE)  # heap offsets count from the section start
    for direction, desc in descs:
        name_offset = len(heap)
        heap += desc.name.encode("utf-8")
        heap += bytes(align_up(len(heap), QUANT_ALIGNMENT) - len(heap))
        quant_offset, quant_count = (len(heap), len(desc.quant.scales)) if desc.quant else (0, 0)
        if desc.quant:
            heap += _quant_block(desc)
        table += _pack_descriptor(direction, desc, name_offset, quant_offset, quant_count)
    if len(heap) > U32_MAX:
        raise TesselFormatError("I/O section exceeds 4 GiB")
    heap[: len(table)] = table
    return _Payload(SectionKind.IO, DEFAULT_ALIGNMENT, len(descs), bytes(heap))


def _quant_block(desc: TensorDescriptor) -> bytes:
    import struct

    quant = desc.quant
    assert quant is not None
    fmt = "f" if quant.scale_type is ScaleType.FLOAT32 else "d"
    n = len(quant.scales)
    block = struct.pack(f"<{n}{fmt}{n}i", *quant.scales, *quant.zero_points)
    return block + bytes(align_up(len(block), QUANT_ALIGNMENT) - len(block))


def _pack_descriptor(direction: Direction, desc: TensorDescriptor, name_offset: int,
                     quant_offset: int, quant_count: int) -> bytes:
    quant = desc.quant
    scale_type = quant.scale_type if quant else ScaleType.NONE
    axis = quant.axis if quant and quant.axis is not None else -1
    shape = list(desc.shape) + [0] * (MAX_RANK - len(desc.shape))
    return DESCRIPTOR_STRUCT.pack(
        direction, desc.dtype, len(desc.shape), scale_type, axis, 0, 0, desc.memory, 0,
        desc.address, desc.nbytes, *shape, name_offset, len(desc.name.encode("utf-8")),
        quant_offset, quant_count,
    )


def _assemble(arch_hash: bytes, payloads: list[_Payload], minor: int) -> bytes:
    """Header, section table, then each payload at its aligned offset (zero padding between),
    joined in one copy (payloads can be tens of MB: a host graph with an embedding table)."""
    table_end = HEADER_SIZE + SECTION_ENTRY_SIZE * len(payloads)
    entries, cursor, body = [], table_end, []
    for index, p in enumerate(payloads):
        offset = align_up(cursor, p.alignment)
        entries.append(SectionEntry(index, p.kind, 0, p.alignment, offset, len(p.data), p.count,
                                    crc32(p.data)))
        body += [bytes(offset - cursor), p.data]
        cursor = offset + len(p.data)
    table = b"".join(e.pack() for e in entries)
    header = Header(MAGIC, FORMAT_MAJOR, minor, 0, HEADER_SIZE, cursor, HEADER_SIZE,
                    len(entries), arch_hash, crc32(table), 0, 0, 0)
    head = header.pack()[:HEADER_CRC_OFFSET]
    out = b"".join([head, crc32(head).to_bytes(4, "little"), table, *body])
    assert len(out) == cursor and HEADER_CRC_OFFSET + 4 == HEADER_SIZE
    return out
