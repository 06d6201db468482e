"""Read a .tsl file into a TslProgram, validating every byte before returning: header, section
table, bounds, alignment, overlap, checksums, section contents and (given an NpuArch) that every
address lies in its memory. Any failure is one TesselFormatError saying what and where."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tessel.binary.codec import StreamCodec, isa_codec
from tessel.binary.layout import (
    FORMAT_MAJOR,
    HEADER_CRC_OFFSET,
    HEADER_FIELDS,
    HEADER_SIZE,
    HEADER_STRUCT,
    INSTRUCTION_KINDS,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_SECTIONS,
    OPTIONAL_KIND_BASE,
    REQUIRED_KINDS,
    SECTION_ENTRY_SIZE,
    SECTION_FIELDS,
    SECTION_STRUCT,
    Header,
    SectionEntry,
    SectionKind,
    crc32,
    kind_of_engine,
)
from tessel.binary.memory import check_placements
from tessel.binary.metadata import check_metadata
from tessel.binary.program import TensorDescriptor, TslProgram, normalize_arch_hash
from tessel.binary.sections import (
    read_constants,
    read_host_graphs,
    read_io,
    read_metadata,
    read_stream,
)
from tessel.binary.tokens import check_tokens
from tessel.errors import TesselFormatError


def load_tsl(path: str | os.PathLike[str], *, arch: Any = None,
             expected_arch_hash: bytes | str | None = None,
             codec: StreamCodec | None = None) -> TslProgram:
    """Read and validate the .tsl file at `path` (see read_tsl)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TesselFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return read_tsl(data, arch=arch, expected_arch_hash=expected_arch_hash, codec=codec)
    except TesselFormatError as exc:
        raise TesselFormatError(f"{path}: {exc}") from None


def read_tsl(data: bytes | bytearray | memoryview, *, arch: Any = None,
             expected_arch_hash: bytes | str | None = None,
             codec: StreamCodec | None = None) -> TslProgram:
    """Decode and validate a .tsl file.

    arch: an NpuArch; when given, the file's arch hash must equal arch.arch_hash and every I/O
        tensor and the constants must lie inside their memory.
    expected_arch_hash: check the arch hash without an NpuArch (overrides arch.arch_hash).
    codec: the ISA used to decode and validate instruction streams (default: tessel.isa).
    """
    data = bytes(data)
    header = _read_header(data)
    _check_arch_hash(header.arch_hash, arch, expected_arch_hash)
    entries = _read_section_table(data, header)
    _check_layout(data, header, entries)
    by_kind = {SectionKind(e.kind): e for e in entries if e.kind < OPTIONAL_KIND_BASE}
    for kind in REQUIRED_KINDS:
        if kind not in by_kind:
            raise TesselFormatError(f"section table: required section {kind.name} is missing")
    codec = codec or isa_codec()
    streams = dict(read_stream(data, by_kind[k], codec) for k in INSTRUCTION_KINDS if k in by_kind)
    if codec.token_op is not None:
        check_tokens(streams, codec.token_op,
                     lambda engine: by_kind[kind_of_engine(engine.name)].label)
    constants, memory, address = read_constants(data, by_kind[SectionKind.CONSTANTS])
    inputs, outputs = read_io(data, by_kind[SectionKind.IO])
    metadata = read_metadata(data, by_kind[SectionKind.METADATA])
    host = by_kind.get(SectionKind.HOST_GRAPHS)
    host_graphs, parsed = read_host_graphs(data, host) if host is not None else ({}, {})
    where = by_kind[SectionKind.METADATA]
    try:
        check_metadata(metadata, {e.name: len(streams.get(e, ())) for e in codec.engine_type},
                       [d.name for d in inputs], [d.name for d in outputs],
                       parsed)
    except TesselFormatError as exc:
        raise TesselFormatError(f"{where.label} at offset {where.offset}: {exc}") from None
    check_declared_shapes(inputs, outputs, parsed)
    program = TslProgram(header.arch_hash, streams, constants, memory, address, tuple(inputs),
                         tuple(outputs), metadata, host_graphs,
                         parsed_host={k: (host_graphs[k], g) for k, g in parsed.items()})
    if arch is not None:
        check_placements(program, arch)
    return program


def check_declared_shapes(inputs: Sequence[TensorDescriptor],
                          outputs: Sequence[TensorDescriptor], host: Mapping[str, Any]) -> None:
    """Every NPU input a host graph produces and every NPU output a host graph reads has the
    shape that graph declares for it (a resized descriptor would make a run read or write
    bytes the model never has)."""
    npu = {d.name: ("input", d) for d in inputs} | {d.name: ("output", d) for d in outputs}
    for key, graph in host.items():
        declared = {v.name: v.type.shape for v in graph.inputs}
        declared.update({o: graph.type_of(o).shape for o in graph.outputs})
        for name, shape in declared.items():
            kind, desc = npu.get(name, (None, None))
            if desc is not None and tuple(desc.shape) != tuple(shape):
                raise TesselFormatError(
                    f"IO section: {kind} descriptor {name!r} has shape {list(desc.shape)}, but "
                    f"host graph {key!r} declares {list(shape)}")


def _header_field(name: str) -> str:
    return f"header field '{name}' (offset {dict(HEADER_FIELDS)[name]})"


def _read_header(data: bytes) -> Header:
    if len(data) < HEADER_SIZE:
        raise TesselFormatError(f"file is {len(data)} bytes, shorter than the {HEADER_SIZE}-byte "
                                "header (truncated or not a .tsl file)")
    header = Header(*HEADER_STRUCT.unpack_from(data, 0))
    if header.magic != MAGIC:
        raise TesselFormatError(f"{_header_field('magic')}: {header.magic!r} is not {MAGIC!r}; "
                                "not a .tsl file")
    if header.version_major != FORMAT_MAJOR:
        newer = header.version_major > FORMAT_MAJOR
        raise TesselFormatError(
            f"{_header_field('version_major')}: format version "
            f"{header.version_major}.{header.version_minor} is "
            + ("newer than this reader supports" if newer else "not supported")
            + f" (this reader reads {FORMAT_MAJOR}.x)"
            + ("; upgrade Tessel to read it" if newer else "")
        )
    actual = crc32(data[:HEADER_CRC_OFFSET])
    if actual != header.header_crc32:
        raise TesselFormatError(f"{_header_field('header_crc32')}: stored "
                                f"0x{header.header_crc32:08x}, computed 0x{actual:08x} "
                                "(header corrupted)")
    _check_header_fields(header, len(data))
    return header


def _check_header_fields(header: Header, file_len: int) -> None:
    checks = (
        ("flags", header.flags == 0, "no flags are defined in this version; must be 0"),
        ("header_size", header.header_size == HEADER_SIZE, f"must be {HEADER_SIZE}"),
        ("file_size", header.file_size == file_len,
         f"the file is {file_len} bytes (truncated or padded)"),
        ("table_offset", header.table_offset == HEADER_SIZE, f"must be {HEADER_SIZE}"),
        ("section_count", header.section_count <= MAX_SECTIONS, f"must be <= {MAX_SECTIONS}"),
        ("reserved0", header.reserved0 == 0, "must be 0"),
        ("reserved1", header.reserved1 == 0, "must be 0"),
    )
    for name, ok, why in checks:
        if not ok:
            raise TesselFormatError(f"{_header_field(name)} = {getattr(header, name)}: {why}")
    table_end = header.table_offset + header.section_count * SECTION_ENTRY_SIZE
    if table_end > file_len:
        raise TesselFormatError(
            f"{_header_field('section_count')} = {header.section_count}: the section table "
            f"would end at byte {table_end}, past the end of the {file_len}-byte file"
        )


def _check_arch_hash(actual: bytes, arch: Any, expected: bytes | str | None) -> None:
    if expected is None and arch is not None:
        expected = arch.arch_hash
    if expected is not None and normalize_arch_hash(expected) != actual:
        raise TesselFormatError(
            f"{_header_field('arch_hash')}: the file was compiled for architecture "
            f"{actual.hex()[:16]}..., not {normalize_arch_hash(expected).hex()[:16]}... "
            "(recompile for this target)"
        )


def _read_section_table(data: bytes, header: Header) -> list[SectionEntry]:
    start = header.table_offset
    table = data[start: start + header.section_count * SECTION_ENTRY_SIZE]
    actual = crc32(table)
    if actual != header.table_crc32:
        raise TesselFormatError(f"{_header_field('table_crc32')}: stored "
                                f"0x{header.table_crc32:08x}, computed 0x{actual:08x} "
                                "(section table corrupted)")
    return [SectionEntry(i, *SECTION_STRUCT.unpack_from(table, i * SECTION_ENTRY_SIZE))
            for i in range(header.section_count)]


def _entry_field(entry: SectionEntry, name: str) -> str:
    offset = HEADER_SIZE + entry.index * SECTION_ENTRY_SIZE + dict(SECTION_FIELDS)[name]
    return f"{entry.label}, table field '{name}' (offset {offset})"


def _check_entry(entry: SectionEntry, table_end: int, file_len: int) -> None:
    if entry.kind < OPTIONAL_KIND_BASE and entry.kind not in SectionKind._value2member_map_:
        raise TesselFormatError(f"{_entry_field(entry, 'kind')}: unknown required section kind "
                                f"0x{entry.kind:04x} (written by a newer Tessel?)")
    if entry.flags != 0:
        raise TesselFormatError(f"{_entry_field(entry, 'flags')} = {entry.flags}: must be 0")
    a = entry.alignment
    if not (1 <= a <= MAX_ALIGNMENT and a & (a - 1) == 0):
        raise TesselFormatError(f"{_entry_field(entry, 'alignment')} = {a}: must be a power of "
                                f"two in [1, {MAX_ALIGNMENT}]")
    if entry.offset % a:
        raise TesselFormatError(f"{_entry_field(entry, 'offset')} = {entry.offset}: not "
                                f"{a}-byte aligned")
    if entry.offset < table_end or entry.offset > file_len:
        raise TesselFormatError(f"{_entry_field(entry, 'offset')} = {entry.offset}: outside the "
                                f"data area [{table_end}, {file_len}]")
    if entry.size > file_len - entry.offset:
        raise TesselFormatError(f"{_entry_field(entry, 'size')} = {entry.size}: section would end "
                                f"at {entry.offset + entry.size}, past the {file_len}-byte file")


def _check_layout(data: bytes, header: Header, entries: Sequence[SectionEntry]) -> None:
    table_end = header.table_offset + len(entries) * SECTION_ENTRY_SIZE
    seen: dict[int, SectionEntry] = {}
    for entry in entries:
        _check_entry(entry, table_end, len(data))
        if entry.kind in seen:
            raise TesselFormatError(f"{_entry_field(entry, 'kind')}: duplicate of "
                                    f"{seen[entry.kind].label}")
        seen[entry.kind] = entry
    cursor = table_end
    for entry in sorted(entries, key=lambda e: (e.offset, e.size)):
        if entry.offset < cursor:
            raise TesselFormatError(f"{entry.label} [{entry.offset}, {entry.end}) overlaps the "
                                    f"previous section or table ending at {cursor}")
        _check_zero_gap(data, cursor, entry.offset)
        cursor = entry.end
    _check_zero_gap(data, cursor, len(data))
    for entry in entries:
        actual = crc32(memoryview(data)[entry.offset: entry.end])
        if actual != entry.crc32:
            raise TesselFormatError(f"{_entry_field(entry, 'crc32')}: stored 0x{entry.crc32:08x}, "
                                    f"computed 0x{actual:08x} over bytes [{entry.offset}, "
                                    f"{entry.end}) (section corrupted)")


def _check_zero_gap(data: bytes, start: int, end: int) -> None:
    if data.count(0, start, end) != end - start:
        first = next(i for i in range(start, end) if data[i] != 0)
        raise TesselFormatError(f"padding byte at offset {first} is 0x{data[first]:02x}; bytes "
                                "outside the header, table and sections must be 0")
