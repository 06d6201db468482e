"""Decode and validate the contents of each section kind (instruction streams, constants, I/O
descriptors, metadata). Callers have already checked the section's bounds and checksum."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

from tessel.binary.codec import StreamCodec
from tessel.binary.layout import (
    CONSTANTS_PREFIX_SIZE,
    CONSTANTS_PREFIX_STRUCT,
    DESCRIPTOR_FIELDS,
    DESCRIPTOR_SIZE,
    DESCRIPTOR_STRUCT,
    MAX_RANK,
    QUANT_ALIGNMENT,
    Direction,
    DType,
    ScaleType,
    SectionEntry,
    SectionKind,
    engine_name_of_kind,
)
from tessel.binary.program import QuantParams, TensorDescriptor, check_descriptor, check_io
from tessel.errors import TesselFormatError


def _fail(where: str, what: str) -> TesselFormatError:
    return TesselFormatError(f"{where}: {what}")


def read_stream(data: bytes, entry: SectionEntry, codec: StreamCodec) -> tuple[Any, tuple]:
    """The (engine, instructions) of an instruction section, decoded and checked."""
    kind = SectionKind(entry.kind)
    engine = codec.engine_type[engine_name_of_kind(kind)]
    where = f"{entry.label} at offset {entry.offset}"
    if entry.count == 0 or entry.count > entry.size:
        raise _fail(where, f"instruction count {entry.count} impossible for {entry.size} bytes")
    try:
        instructions = tuple(codec.decode(engine, data[entry.offset: entry.end]))
    except TesselFormatError as exc:
        raise _fail(where, f"bad instruction stream: {exc}") from None
    if len(instructions) != entry.count:
        raise _fail(where, f"decoded {len(instructions)} instructions, table says {entry.count}")
    if not codec.is_end(instructions[-1]):
        raise _fail(where, f"stream does not end with END (last: {instructions[-1]!r})")
    return engine, instructions


def read_constants(data: bytes, entry: SectionEntry) -> tuple[bytes, int, int]:
    """(constant bytes, memory index, address) of the CONSTANTS section."""
    where = f"{entry.label} at offset {entry.offset}"
    if entry.size < CONSTANTS_PREFIX_SIZE:
        raise _fail(where, f"{entry.size} bytes, shorter than the {CONSTANTS_PREFIX_SIZE}-byte "
                    "placement prefix")
    if entry.count != 0:
        raise _fail(where, f"count must be 0, got {entry.count}")
    memory, reserved, address = CONSTANTS_PREFIX_STRUCT.unpack_from(data, entry.offset)
    if reserved != 0:
        raise _fail(where, f"reserved field at offset {entry.offset + 4} is {reserved}, not 0")
    constants = data[entry.offset + CONSTANTS_PREFIX_SIZE: entry.end]
    if address + len(constants) > 2**64:
        raise _fail(where, f"address {address} + {len(constants)} bytes leaves the 64-bit space")
    return constants, memory, address


def read_metadata(data: bytes, entry: SectionEntry) -> dict[str, Any]:
    """The METADATA section: a UTF-8 JSON object without duplicate keys, NaN or Infinity."""
    where = f"{entry.label} at offset {entry.offset}"
    if entry.count != 0:
        raise _fail(where, f"count must be 0, got {entry.count}")
    try:
        text = data[entry.offset: entry.end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(where, f"not UTF-8 at byte {entry.offset + exc.start}") from None
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                           parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise _fail(where, f"invalid JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise _fail(where, f"JSON must be an object, got {type(value).__name__}")
    return value


def read_host_graphs(data: bytes, entry: SectionEntry) -> tuple[dict[str, str], dict[str, Any]]:
    """The HOST_GRAPHS section: a JSON object mapping "prologue"/"host_K"/"epilogue" to IR text that
    parses and verifies (the runtime runs these graphs on the CPU); returned with the graphs
    parsed, so that nothing parses them again (a host part holding an embedding table is tens
    of MB of base64, MiniLM's prologue for one, and each parse of it costs a noticeable part
    of a load)."""
    from tessel.binary.program import is_host_graph_key
    from tessel.errors import TesselError
    from tessel.ir import parse_graph, verify

    value = read_metadata(data, entry)
    where = f"{entry.label} at offset {entry.offset}"
    graphs = {}
    for key, text in value.items():
        if not is_host_graph_key(key) or not isinstance(text, str):
            raise _fail(where, f"entry {key!r} is not 'prologue', 'epilogue' or 'host_K' "
                        "with IR text")
        try:
            graphs[key] = graph = parse_graph(text, source=f"host graph {key!r}")
            verify(graph)
        except TesselError as exc:  # parse_graph and verify raise only TesselErrors
            raise _fail(where, f"host graph {key!r} is not valid IR: {str(exc)[:300]}") from None
    return value, graphs


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key in object")
    return result


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} overflows a float")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def read_io(data: bytes, entry: SectionEntry) -> tuple[list, list]:
    """(inputs, outputs) descriptor lists of the IO section, each descriptor fully checked."""
    where = f"{entry.label} at offset {entry.offset}"
    if entry.count > entry.size // DESCRIPTOR_SIZE:
        raise _fail(where, f"descriptor count {entry.count} needs {entry.count * DESCRIPTOR_SIZE} "
                    f"bytes, the section has {entry.size}")
    section = data[entry.offset: entry.end]
    heap_start = entry.count * DESCRIPTOR_SIZE
    inputs: list[TensorDescriptor] = []
    outputs: list[TensorDescriptor] = []
    for i in range(entry.count):
        label = f"{where}, descriptor {i} (offset {entry.offset + i * DESCRIPTOR_SIZE})"
        direction, desc = _read_descriptor(section, i * DESCRIPTOR_SIZE, heap_start, label)
        (inputs if direction is Direction.INPUT else outputs).append(desc)
    try:
        check_io(inputs, outputs)
    except TesselFormatError as exc:
        raise _fail(where, str(exc)) from None
    return inputs, outputs


def _enum_field(enum: type, value: int, name: str, where: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        offset = dict(DESCRIPTOR_FIELDS)[name]
        raise _fail(where, f"field '{name}' (+{offset}) = {value} is not a valid "
                    f"{enum.__name__}") from None


def _read_descriptor(section: bytes, at: int, heap_start: int,
                     where: str) -> tuple[Direction, TensorDescriptor]:
    (direction, dtype, rank, scale_type, axis, r8, r16, memory, r32, address, nbytes,
     *rest) = DESCRIPTOR_STRUCT.unpack_from(section, at)
    shape_all = rest[:MAX_RANK]
    name_offset, name_length, quant_offset, quant_count = rest[MAX_RANK:]
    direction = _enum_field(Direction, direction, "direction", where)
    dtype = _enum_field(DType, dtype, "dtype", where)
    scale_type = _enum_field(ScaleType, scale_type, "scale_type", where)
    if r8 or r16 or r32:
        raise _fail(where, "reserved fields (+5, +6, +12) must be 0")
    if rank > MAX_RANK:
        raise _fail(where, f"field 'rank' (+2) = {rank} exceeds {MAX_RANK}")
    if any(shape_all[rank:]):
        raise _fail(where, f"shape entries beyond rank {rank} (+32) must be 0")
    name = _read_name(section, heap_start, name_offset, name_length, where)
    quant = _read_quant(section, heap_start, scale_type, axis, quant_offset, quant_count, where)
    desc = TensorDescriptor(name, dtype, tuple(shape_all[:rank]), memory, address, quant)
    check_descriptor(desc, where)
    if nbytes != desc.nbytes:
        raise _fail(where, f"field 'nbytes' (+24) = {nbytes}, shape and dtype give {desc.nbytes}")
    return direction, desc


def _check_range(section: bytes, heap_start: int, offset: int, length: int, what: str,
                 where: str) -> None:
    if offset < heap_start or offset + length > len(section):
        raise _fail(where, f"{what} [{offset}, {offset + length}) is outside the descriptor heap "
                    f"[{heap_start}, {len(section)}) of the section")


def _read_name(section: bytes, heap_start: int, offset: int, length: int, where: str) -> str:
    _check_range(section, heap_start, offset, length, "name", where)
    try:
        return section[offset: offset + length].decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(where, f"name at section offset {offset} is not UTF-8") from None


def _read_quant(section: bytes, heap_start: int, scale_type: ScaleType, axis: int, offset: int,
                count: int, where: str) -> QuantParams | None:
    if scale_type is ScaleType.NONE:
        if count or offset or axis != -1:
            raise _fail(where, "unquantised tensor must have quant_offset = quant_count = 0 "
                        "and axis = -1")
        return None
    if offset % QUANT_ALIGNMENT:
        raise _fail(where, f"field 'quant_offset' (+72) = {offset} not {QUANT_ALIGNMENT}-aligned")
    per_item = scale_type.itemsize + 4
    if count == 0 or count > (len(section) - min(offset, len(section))) // per_item:
        raise _fail(where, f"field 'quant_count' (+76) = {count} impossible in the section")
    _check_range(section, heap_start, offset, count * per_item, "quantisation block", where)
    fmt = "f" if scale_type is ScaleType.FLOAT32 else "d"
    values = struct.unpack_from(f"<{count}{fmt}{count}i", section, offset)
    return QuantParams(values[:count], values[count:], None if axis == -1 else axis, scale_type)
