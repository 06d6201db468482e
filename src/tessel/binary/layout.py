"""Byte layout of a .tsl file: constants, enums and the fixed-size records (header, section entry,
I/O descriptor) with their pack/unpack functions. docs/binary-format.md is the prose version."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

MAGIC = b"TSL\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0

# magic, major, minor, flags, header_size, file_size, table_offset, section_count, arch_hash,
# table_crc32, reserved0, reserved1, header_crc32
HEADER_STRUCT = struct.Struct("<4sHHIIQII32sIIII")
HEADER_SIZE = HEADER_STRUCT.size  # 80
HEADER_CRC_OFFSET = 76  # the header CRC covers bytes [0, 76)
HEADER_FIELDS = (  # (name, byte offset) in struct order, for error messages
    ("magic", 0), ("version_major", 4), ("version_minor", 6), ("flags", 8),
    ("header_size", 12), ("file_size", 16), ("table_offset", 24), ("section_count", 28),
    ("arch_hash", 32), ("table_crc32", 64), ("reserved0", 68), ("reserved1", 72),
    ("header_crc32", 76),
)

# kind, flags, alignment, offset, size, count, crc32
SECTION_STRUCT = struct.Struct("<HHIQQII")
SECTION_ENTRY_SIZE = SECTION_STRUCT.size  # 32
SECTION_FIELDS = (
    ("kind", 0), ("flags", 2), ("alignment", 4), ("offset", 8), ("size", 16), ("count", 24),
    ("crc32", 28),
)

# memory, reserved, address; the constant bytes follow
CONSTANTS_PREFIX_STRUCT = struct.Struct("<IIQ")
CONSTANTS_PREFIX_SIZE = CONSTANTS_PREFIX_STRUCT.size  # 16

# direction, dtype, rank, scale_type, axis, reserved8, reserved16, memory, reserved32, address,
# nbytes, shape[8], name_offset, name_length, quant_offset, quant_count
DESCRIPTOR_STRUCT = struct.Struct("<BBBBbBHIIQQ8IIIII")
DESCRIPTOR_SIZE = DESCRIPTOR_STRUCT.size  # 80
DESCRIPTOR_FIELDS = (
    ("direction", 0), ("dtype", 1), ("rank", 2), ("scale_type", 3), ("axis", 4),
    ("reserved8", 5), ("reserved16", 6), ("memory", 8), ("reserved32", 12), ("address", 16),
    ("nbytes", 24), ("shape", 32), ("name_offset", 64), ("name_length", 68),
    ("quant_offset", 72), ("quant_count", 76),
)

MAX_SECTIONS = 64
MAX_ALIGNMENT = 4096
MAX_RANK = 8
MAX_NAME_BYTES = 1024
MAX_TENSOR_BYTES = 1 << 40
QUANT_ALIGNMENT = 8
STREAM_ALIGNMENT = 16
CONSTANTS_ALIGNMENT = 64
DEFAULT_ALIGNMENT = 8
OPTIONAL_KIND_BASE = 0x8000  # kinds >= this may be skipped by readers that do not know them


class SectionKind(IntEnum):
    """What a section holds. Kinds >= 0x8000 are optional: unknown ones are skipped."""

    INSTRUCTIONS_DMA_IN = 0x0001
    INSTRUCTIONS_MATRIX = 0x0002
    INSTRUCTIONS_VECTOR = 0x0003
    INSTRUCTIONS_DMA_OUT = 0x0004
    CONSTANTS = 0x0010
    IO = 0x0011
    METADATA = 0x0012
    HOST_GRAPHS = 0x0013  # IR text of the ops run on the host CPU (absent when there are none)


INSTRUCTION_KINDS = (
    SectionKind.INSTRUCTIONS_DMA_IN,
    SectionKind.INSTRUCTIONS_MATRIX,
    SectionKind.INSTRUCTIONS_VECTOR,
    SectionKind.INSTRUCTIONS_DMA_OUT,
)
REQUIRED_KINDS = (SectionKind.CONSTANTS, SectionKind.IO, SectionKind.METADATA)


def kind_of_engine(engine_name: str) -> SectionKind:
    """The instruction section kind of an engine, by the engine's enum member name."""
    return SectionKind[f"INSTRUCTIONS_{engine_name}"]


def engine_name_of_kind(kind: SectionKind) -> str:
    """The engine member name (e.g. "DMA_IN") whose instruction stream a section holds."""
    return kind.name.removeprefix("INSTRUCTIONS_")


def kind_label(kind: int) -> str:
    """A readable name for a section kind value, known or not."""
    try:
        return SectionKind(kind).name
    except ValueError:
        return f"0x{kind:04x}"


class Direction(IntEnum):
    """Whether a tensor descriptor is a program input or output."""

    INPUT = 1
    OUTPUT = 2


class DType(IntEnum):
    """Element type of an I/O tensor."""

    INT8 = 1
    UINT8 = 2
    INT16 = 3
    INT32 = 4
    FLOAT16 = 5
    FLOAT32 = 6

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_integer(self) -> bool:
        return self in _INT_RANGE

    @property
    def int_range(self) -> tuple[int, int]:
        return _INT_RANGE[self]


_ITEMSIZE = {
    DType.INT8: 1, DType.UINT8: 1, DType.INT16: 2, DType.INT32: 4, DType.FLOAT16: 2,
    DType.FLOAT32: 4,
}
_INT_RANGE = {
    DType.INT8: (-128, 127), DType.UINT8: (0, 255), DType.INT16: (-32768, 32767),
    DType.INT32: (-(2**31), 2**31 - 1),
}


class ScaleType(IntEnum):
    """How quantisation scales are stored (NONE: the tensor is not quantised)."""

    NONE = 0
    FLOAT32 = 1
    FLOAT64 = 2

    @property
    def itemsize(self) -> int:
        return {ScaleType.NONE: 0, ScaleType.FLOAT32: 4, ScaleType.FLOAT64: 8}[self]


@dataclass(frozen=True)
class Header:
    """The decoded 80-byte file header."""

    magic: bytes
    version_major: int
    version_minor: int
    flags: int
    header_size: int
    file_size: int
    table_offset: int
    section_count: int
    arch_hash: bytes
    table_crc32: int
    reserved0: int
    reserved1: int
    header_crc32: int

    def pack(self) -> bytes:
        return HEADER_STRUCT.pack(*(getattr(self, name) for name, _ in HEADER_FIELDS))


@dataclass(frozen=True)
class SectionEntry:
    """One decoded 32-byte section table entry; `index` is its position in the table."""

    index: int
    kind: int
    flags: int
    alignment: int
    offset: int
    size: int
    count: int
    crc32: int

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def label(self) -> str:
        return f"section {self.index} ({kind_label(self.kind)})"

    def pack(self) -> bytes:
        return SECTION_STRUCT.pack(
            self.kind, self.flags, self.alignment, self.offset, self.size, self.count, self.crc32
        )


def crc32(data: bytes | memoryview) -> int:
    """CRC-32 (IEEE 802.3, reflected, init/xorout 0xFFFFFFFF; zlib.crc32) of `data`."""
    return zlib.crc32(data) & 0xFFFFFFFF


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment
