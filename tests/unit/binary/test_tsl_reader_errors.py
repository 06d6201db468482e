"""Each malformed-file rule of the reader: one crafted file per rule, checking the message says
what is wrong and where."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from tsl_samples import (
    assemble,
    codec_and_programs,
    entry_offset,
    fix_checksums,
    minimal_sections,
    patch,
    section_of,
    token_instruction,
)

from tessel.binary import SectionKind, read_tsl, write_tsl
from tessel.errors import TesselFormatError

CODEC, PROGRAMS = codec_and_programs()
BASE = write_tsl(PROGRAMS[1], codec=CODEC)  # 4 streams, constants, 3 I/O descriptors, metadata
SMALL = write_tsl(PROGRAMS[0], codec=CODEC)
ENGINE, STREAM = next(iter(PROGRAMS[0].streams.items()))
STREAM_BYTES = CODEC.encode(list(STREAM))
CONST_I, CONST_AT, _ = section_of(BASE, SectionKind.CONSTANTS)
IO_I, IO_AT, IO_SIZE = section_of(BASE, SectionKind.IO)
META_I, META_AT, _ = section_of(BASE, SectionKind.METADATA)


def fixed(data: bytes, offset: int, fmt: str, *values: object) -> bytes:
    return fix_checksums(patch(data, offset, fmt, *values))


def entry(index: int, field: int, fmt: str, value: int, data: bytes = BASE) -> bytes:
    return fixed(data, entry_offset(index) + field, fmt, value)


def desc(index: int, field: int, fmt: str, *values: object) -> bytes:
    return fixed(BASE, IO_AT + 80 * index + field, fmt, *values)


def with_metadata(text: bytes, count: int = 0) -> bytes:
    sections = minimal_sections(STREAM_BYTES, len(STREAM), kind=0)
    sections[0] = (int(SectionKind[f"INSTRUCTIONS_{ENGINE.name}"]), 16, len(STREAM), STREAM_BYTES)
    sections[3] = (0x12, 8, count, text)
    return assemble(sections)


def first_gap(data: bytes) -> int:
    covered = set(range(0, 80 + 32 * struct.unpack_from("<I", data, 28)[0]))
    for i in range(struct.unpack_from("<I", data, 28)[0]):
        offset, size = struct.unpack_from("<QQ", data, entry_offset(i) + 8)
        covered |= set(range(offset, offset + size))
    return min(set(range(len(data))) - covered)


def heap_name_offset(index: int) -> int:
    return IO_AT + struct.unpack_from("<I", BASE, IO_AT + 80 * index + 64)[0]


CASES: list[tuple[str, Callable[[], bytes], str]] = [
    ("short", lambda: BASE[:10], "file is 10 bytes, shorter than the 80-byte header"),
    ("magic", lambda: fixed(BASE, 0, "4s", b"ELF\0"), "'magic' \\(offset 0\\).*not a .tsl file"),
    ("newer", lambda: fixed(BASE, 4, "H", 2), "version 2.0 is newer than.*upgrade Tessel"),
    ("older", lambda: fixed(BASE, 4, "H", 0), "version 0.0 is not supported"),
    ("header crc", lambda: patch(BASE, 40, "B", 0xEE), "header_crc32.*header corrupted"),
    ("truncated", lambda: fix_checksums(BASE[:-1]), "file_size.*truncated or padded"),
    ("appended", lambda: fix_checksums(BASE + bytes(8)), "file_size.*truncated or padded"),
    ("flags", lambda: fixed(BASE, 8, "I", 4), "'flags' \\(offset 8\\) = 4"),
    ("header size", lambda: fixed(BASE, 12, "I", 96), "'header_size'.*must be 80"),
    ("table offset", lambda: fixed(BASE, 24, "I", 96), "'table_offset'.*must be 80"),
    ("reserved", lambda: fixed(BASE, 72, "I", 1), "'reserved1'.*must be 0"),
    ("count huge", lambda: fixed(BASE, 28, "I", 0xFFFFFFFF), "section_count.*must be <= 64"),
    ("count past end", lambda: fixed(SMALL, 28, "I", 60), "section table would end at byte 2000"),
    ("table crc", lambda: fix_header(patch(BASE, 100, "B", 9)), "table_crc32.*table corrupted"),
    ("kind", lambda: entry(0, 0, "H", 0x42), "section 0.*'kind'.*unknown required .*0x0042"),
    ("missing", lambda: entry(META_I, 0, "H", 0x8001), "required section METADATA is missing"),
    ("entry flags", lambda: entry(1, 2, "H", 1), "section 1 .*'flags' \\(offset 114\\) = 1"),
    ("alignment", lambda: entry(1, 4, "I", 3), "'alignment'.* = 3: must be a power of two"),
    ("alignment big", lambda: entry(1, 4, "I", 8192), "'alignment'.*power of two"),
    ("misaligned", lambda: entry(CONST_I, 8, "Q", CONST_AT + 8), "not 64-byte aligned"),
    ("offset huge", lambda: entry(CONST_I, 8, "Q", 1 << 62), "outside the data area"),
    ("offset in table", lambda: entry(0, 8, "Q", 96), "'offset' \\(offset 88\\) = 96: outside"),
    ("size huge", lambda: entry(CONST_I, 16, "Q", 1 << 63), "'size'.*past the"),
    ("overlap", lambda: entry(META_I, 8, "Q", IO_AT), "overlaps the previous section"),
    ("duplicate", lambda: entry(1, 0, "H", int(SectionKind.INSTRUCTIONS_DMA_IN)),
     "section 1 .*duplicate of section 0"),
    ("padding", lambda: fixed(BASE, first_gap(BASE), "B", 1), "padding byte at offset"),
    ("section crc", lambda: patch(BASE, META_AT + 1, "B", ord("X")),
     f"section {META_I} \\(METADATA\\), table field 'crc32'.*section corrupted"),
    ("stream garbage", lambda: fixed(BASE, section_of(BASE, 1)[1], "4B", 255, 255, 255, 255),
     "section 0 \\(INSTRUCTIONS_DMA_IN\\) at offset \\d+: bad instruction stream"),
    ("stream count", lambda: entry(0, 24, "I", len(PROGRAMS[1].streams[next(iter(
        PROGRAMS[1].streams))]) + 1), "decoded \\d+ instructions, table says"),
    ("stream count 0", lambda: entry(0, 24, "I", 0), "instruction count 0 impossible"),
    ("no END", lambda: assemble(minimal_sections(CODEC.encode(list(STREAM)[:-1]) or b"",
                                                 len(STREAM) - 1, kind=kind_of(ENGINE))),
     "does not end with END|instruction count 0|bad instruction stream"),
    ("const short", lambda: assemble(minimal_sections(STREAM_BYTES, len(STREAM),
                                                      kind_of(ENGINE))[:1]
                                     + [(0x10, 64, 0, bytes(8)), (0x11, 8, 0, b""),
                                        (0x12, 8, 0, b"{}")]), "shorter than the 16-byte"),
    ("const reserved", lambda: fixed(BASE, CONST_AT + 4, "I", 1), "reserved field at offset"),
    ("io count", lambda: entry(IO_I, 24, "I", 10**6), "descriptor count 1000000 needs"),
    ("direction", lambda: desc(0, 0, "B", 0), "descriptor 0 \\(offset \\d+\\).*'direction'"),
    ("dtype", lambda: desc(1, 1, "B", 99), "descriptor 1 .*field 'dtype' \\(\\+1\\) = 99"),
    ("rank", lambda: desc(0, 2, "B", 9), "'rank' \\(\\+2\\) = 9 exceeds 8"),
    ("beyond rank", lambda: desc(2, 32 + 4 * 7, "I", 5), "beyond rank 2"),
    ("dim zero", lambda: desc(0, 36, "I", 0), "shape\\[1\\] = 0"),
    ("nbytes", lambda: desc(0, 24, "Q", 7), "'nbytes' \\(\\+24\\) = 7, shape and dtype give 192"),
    ("name far", lambda: desc(0, 64, "I", 10**6), "name \\[1000000, .*outside the descriptor heap"),
    ("name in table", lambda: desc(0, 64, "I", 8), "name \\[8, .*outside the descriptor heap"),
    ("name utf8", lambda: fixed(BASE, heap_name_offset(0), "B", 0xFF), "name.*not UTF-8"),
    ("dup name", lambda: desc(1, 64, "II", *struct.unpack_from("<II", BASE, IO_AT + 64)),
     "output 0 \\('image'\\): name already used by input 0"),
    ("unquant extra", lambda: desc(2, 76, "I", 1), "unquantised tensor"),
    ("quant align", lambda: desc(0, 72, "I", struct.unpack_from("<I", BASE, IO_AT + 72)[0] + 4),
     "quant_offset.*not 8-aligned"),
    ("quant count", lambda: desc(0, 76, "I", 0xFFFFFFFF), "quant_count.*impossible"),
    ("quant axis", lambda: desc(0, 4, "b", 3), "per-tensor|axis"),
    ("scale nan", lambda: fixed(BASE, IO_AT + struct.unpack_from("<I", BASE, IO_AT + 72)[0], "f",
                                float("nan")), "scale\\[0\\] = nan"),
    ("zero point", lambda: fixed(BASE, IO_AT + struct.unpack_from("<I", BASE, IO_AT + 72)[0] + 4,
                                 "i", 1000), "zero_point\\[0\\] = 1000 outside the INT8 range"),
    ("meta utf8", lambda: with_metadata(b'{"a":"\xff"}'), "METADATA.*not UTF-8 at byte"),
    ("meta json", lambda: with_metadata(b'{"a":'), "METADATA.*invalid JSON"),
    ("meta array", lambda: with_metadata(b"[1]"), "JSON must be an object, got list"),
    ("meta dup", lambda: with_metadata(b'{"a":1,"a":2}'), "duplicate key"),
    ("meta nan", lambda: with_metadata(b'{"a":NaN}'), "NaN is not allowed"),
    ("meta inf", lambda: with_metadata(b'{"a":1e999}'), "invalid JSON: number 1e999 overflows"),
    ("meta deep", lambda: with_metadata(b"[" * 100_000), "invalid JSON"),
    ("meta count", lambda: with_metadata(b"{}", count=1), "count must be 0"),
]


def kind_of(engine: object) -> int:
    return int(SectionKind[f"INSTRUCTIONS_{engine.name}"])


def fix_header(data: bytes) -> bytes:
    import zlib

    return patch(data, 76, "I", zlib.crc32(data[:76]))


@pytest.mark.parametrize(("name", "make", "message"), CASES, ids=[c[0] for c in CASES])
def test_malformed_file_gives_one_clear_error(name: str, make: Callable[[], bytes],
                                              message: str) -> None:
    data = make()
    with pytest.raises(TesselFormatError, match=message):
        read_tsl(data, codec=CODEC)


def test_newer_minor_version_and_unknown_optional_section_are_accepted() -> None:
    assert read_tsl(fixed(BASE, 6, "H", 9), codec=CODEC) == PROGRAMS[1]
    sections = minimal_sections(STREAM_BYTES, len(STREAM), kind_of(ENGINE))
    sections.append((0x8001, 4, 3, b"future data"))
    program = read_tsl(assemble(sections, version=(1, 3)), codec=CODEC)
    assert program.streams == {ENGINE: STREAM} and program.metadata == {}


def test_deadlocked_streams_are_rejected_with_their_section() -> None:
    end = STREAM[-1]
    wait = token_instruction(CODEC, False, "DMA_IN", 2)
    stream = CODEC.encode([wait, end])
    data = assemble(minimal_sections(stream, 2, kind_of(CODEC.engine_type["MATRIX"])))
    with pytest.raises(TesselFormatError, match="section 0 \\(INSTRUCTIONS_MATRIX\\): deadlock: "
                       "instruction 0 waits for token 2 from DMA_IN"):
        read_tsl(data, codec=CODEC)
    signal = token_instruction(CODEC, True, "MATRIX", 2)
    dma_in = kind_of(CODEC.engine_type["DMA_IN"])
    sections = minimal_sections(CODEC.encode([signal, end]), 2, dma_in)
    sections.insert(1, (kind_of(CODEC.engine_type["MATRIX"]), 16, 2, stream))
    assert read_tsl(assemble(sections), codec=CODEC).streams[CODEC.engine_type["MATRIX"]] == (
        wait, end)
    unbalanced = minimal_sections(CODEC.encode([signal, signal, end]), 3, dma_in)
    unbalanced.insert(1, (kind_of(CODEC.engine_type["MATRIX"]), 16, 2, stream))
    with pytest.raises(TesselFormatError, match="section 0 \\(INSTRUCTIONS_DMA_IN\\): 1 SIGNAL"):
        read_tsl(assemble(unbalanced), codec=CODEC)


def test_independent_assembler_matches_writer() -> None:
    """The spec-level assembler in the tests produces the writer's exact bytes."""
    sections = minimal_sections(STREAM_BYTES, len(STREAM), kind_of(ENGINE))
    assert assemble(sections) == SMALL
