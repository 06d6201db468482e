"""tessel.binary: the versioned .tsl container (writer and validating reader).

A .tsl file holds one compiled program: an instruction stream per engine, packed constants,
I/O tensor descriptors and JSON metadata, behind a checksummed header and section table.
docs/binary-format.md specifies every byte."""

from __future__ import annotations

from tessel.binary.codec import StreamCodec, isa_codec
from tessel.binary.layout import (
    FORMAT_MAJOR,
    FORMAT_MINOR,
    MAGIC,
    Direction,
    DType,
    ScaleType,
    SectionKind,
)
from tessel.binary.memory import check_placements, memory_sizes
from tessel.binary.program import QuantParams, TensorDescriptor, TslProgram
from tessel.binary.reader import load_tsl, read_tsl
from tessel.binary.writer import save_tsl, write_tsl

__all__ = [
    "FORMAT_MAJOR", "FORMAT_MINOR", "MAGIC", "DType", "Direction", "QuantParams", "ScaleType",
    "SectionKind", "StreamCodec", "TensorDescriptor", "TslProgram", "check_placements",
    "isa_codec", "load_tsl", "memory_sizes", "read_tsl", "save_tsl", "write_tsl",
]
