"""The in-memory value of a .tsl file (TslProgram and its tensor descriptors) and the semantic
checks shared by the writer and the reader, so both accept exactly the same programs."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessel.binary.layout import MAX_NAME_BYTES, MAX_RANK, MAX_TENSOR_BYTES, DType, ScaleType
from tessel.errors import TesselFormatError

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
HOST_GRAPH_KEYS = ("prologue", "epilogue")  # run before / after the NPU program
# format 1.1: host part k (1-based) runs between NPU regions k and k+1 ("host_1", "host_2", ...)
_BETWEEN_KEY = re.compile(r"host_[1-9][0-9]{0,5}")


def is_host_graph_key(key: object) -> bool:
    """'prologue', 'epilogue' (format 1.0) or 'host_K' for K >= 1 (1.1: between regions)."""
    return isinstance(key, str) and (key in HOST_GRAPH_KEYS or bool(_BETWEEN_KEY.fullmatch(key)))


def format_minor(program: TslProgram) -> int:
    """The lowest minor version that describes `program`: 1 with several NPU regions."""
    return 1 if any(k not in HOST_GRAPH_KEYS for k in program.host_graphs) or \
        "npu_regions" in program.metadata else 0


def normalize_arch_hash(value: bytes | str) -> bytes:
    """A 32-byte architecture hash from raw bytes or a 64-digit hex string."""
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value)
        except ValueError as exc:
            raise TesselFormatError(f"arch hash {value!r} is not a hex string") from exc
    value = bytes(value)
    if len(value) != 32:
        raise TesselFormatError(f"arch hash must be 32 bytes (sha256), got {len(value)}")
    return value


def canonical_json(metadata: Mapping[str, Any]) -> bytes:
    """The one UTF-8 JSON encoding of `metadata` written to files (sorted keys, no spaces)."""
    try:
        text = json.dumps(
            metadata, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise TesselFormatError(f"metadata is not JSON-serialisable: {exc}") from exc
    return text.encode("utf-8")


def _f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


@dataclass(frozen=True)
class QuantParams:
    """Affine quantisation: real = scale * (q - zero_point); per tensor (axis None) or per axis.

    Scales stored as FLOAT32 are rounded to float32 here, so a written program reads back equal.
    """

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None = None
    scale_type: ScaleType = ScaleType.FLOAT32

    def __post_init__(self) -> None:
        scales = tuple(float(s) for s in self.scales)
        if self.scale_type is ScaleType.FLOAT32:
            try:
                scales = tuple(_f32(s) if math.isfinite(s) else s for s in scales)
            except OverflowError:
                pass  # out of float32 range: check_quant reports it
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "zero_points", tuple(int(z) for z in self.zero_points))


@dataclass(frozen=True)
class TensorDescriptor:
    """A program input or output: where it lives on the NPU and how to interpret its bytes."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    memory: int
    address: int
    quant: QuantParams | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class TslProgram:
    """Everything a .tsl file holds. `streams` maps a tessel.isa.Engine to its instructions
    (a tuple of Instruction) or to already-encoded bytes; the reader always returns tuples."""

    arch_hash: bytes
    streams: Mapping[Any, tuple[Any, ...] | bytes]
    constants: bytes = b""
    constants_memory: int = 0
    constants_address: int = 0
    inputs: tuple[TensorDescriptor, ...] = ()
    outputs: tuple[TensorDescriptor, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Host (CPU) parts of the model as Graph IR text, keyed by HOST_GRAPH_KEYS
    host_graphs: Mapping[str, str] = field(default_factory=dict)
    # the reader's parsed and verified host graphs: key -> (the IR text, its tessel.ir.Graph),
    # for the runtime to use instead of parsing the text again while `host_graphs` still holds
    # that text (a `dataclasses.replace` may change it); not part of the program's value
    parsed_host: Mapping[str, tuple[str, Any]] | None = field(default=None, compare=False,
                                                              repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arch_hash", normalize_arch_hash(self.arch_hash))
        streams = {
            engine: bytes(v) if isinstance(v, bytes | bytearray | memoryview) else tuple(v)
            for engine, v in self.streams.items()
        }
        object.__setattr__(self, "streams", streams)
        object.__setattr__(self, "constants", bytes(self.constants))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not isinstance(self.metadata, Mapping):
            raise TesselFormatError(f"metadata must be a mapping, got {type(self.metadata)}")
        object.__setattr__(self, "metadata", json.loads(canonical_json(self.metadata)))
        unknown = [k for k in self.host_graphs if not is_host_graph_key(k)]
        if unknown:
            raise TesselFormatError(f"host_graphs: unknown keys {sorted(map(str, unknown))} "
                                    f"(allowed: {', '.join(HOST_GRAPH_KEYS)}, host_1, host_2, ...)")
        object.__setattr__(self, "host_graphs", {k: str(v) for k, v in self.host_graphs.items()})


def check_shape(dtype: DType, shape: Sequence[int], where: str) -> None:
    """Rank <= 8, every dimension >= 1 and the byte size <= MAX_TENSOR_BYTES."""
    if len(shape) > MAX_RANK:
        raise TesselFormatError(f"{where}: rank {len(shape)} exceeds the maximum {MAX_RANK}")
    for axis, dim in enumerate(shape):
        if not 1 <= dim <= U32_MAX:
            raise TesselFormatError(f"{where}: shape[{axis}] = {dim} is not in [1, {U32_MAX}]")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise TesselFormatError(
            f"{where}: shape {tuple(shape)} of {dtype.name} is {nbytes} bytes, "
            f"more than the maximum {MAX_TENSOR_BYTES}"
        )


def check_quant(quant: QuantParams, dtype: DType, shape: Sequence[int], where: str) -> None:
    """Scales finite and > 0, zero points in the dtype's range, per-axis count == shape[axis]."""
    if not dtype.is_integer:
        raise TesselFormatError(f"{where}: dtype {dtype.name} cannot carry quantisation")
    if quant.scale_type is ScaleType.NONE:
        raise TesselFormatError(f"{where}: quantisation needs a scale type, not NONE")
    n = len(quant.scales)
    if n == 0 or n != len(quant.zero_points):
        raise TesselFormatError(
            f"{where}: {n} scale(s) and {len(quant.zero_points)} zero point(s); need the same "
            "number, at least 1"
        )
    if quant.axis is None:
        if n != 1:
            raise TesselFormatError(f"{where}: per-tensor quantisation has {n} scales, not 1")
    elif not 0 <= quant.axis < len(shape):
        raise TesselFormatError(
            f"{where}: quantisation axis {quant.axis} outside rank {len(shape)}"
        )
    elif n != shape[quant.axis]:
        raise TesselFormatError(
            f"{where}: {n} scales for axis {quant.axis} of size {shape[quant.axis]}"
        )
    limit = 3.4028234663852886e38 if quant.scale_type is ScaleType.FLOAT32 else math.inf
    for i, s in enumerate(quant.scales):
        if not (math.isfinite(s) and 0.0 < s <= limit):
            raise TesselFormatError(f"{where}: scale[{i}] = {s!r} is not a finite value > 0")
    lo, hi = dtype.int_range
    for i, z in enumerate(quant.zero_points):
        if not lo <= z <= hi:
            raise TesselFormatError(
                f"{where}: zero_point[{i}] = {z} outside the {dtype.name} range [{lo}, {hi}]"
            )


def check_descriptor(desc: TensorDescriptor, where: str) -> None:
    """Every rule on a single descriptor that does not depend on the target architecture."""
    try:
        name_bytes = desc.name.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        name_bytes = b""
    if not 1 <= len(name_bytes) <= MAX_NAME_BYTES or "\0" in desc.name:
        raise TesselFormatError(
            f"{where}: name must be 1..{MAX_NAME_BYTES} UTF-8 bytes without NUL, got {desc.name!r}"
        )
    if not isinstance(desc.dtype, DType):
        raise TesselFormatError(f"{where}: dtype {desc.dtype!r} is not a DType")
    check_shape(desc.dtype, desc.shape, where)
    if not 0 <= desc.memory <= U32_MAX:
        raise TesselFormatError(f"{where}: memory index {desc.memory} is not a u32")
    if not 0 <= desc.address or desc.address + desc.nbytes > U64_MAX + 1:
        raise TesselFormatError(
            f"{where}: address {desc.address} + {desc.nbytes} bytes leaves the 64-bit space"
        )
    if desc.quant is not None:
        check_quant(desc.quant, desc.dtype, desc.shape, where)


def check_io(inputs: Sequence[TensorDescriptor], outputs: Sequence[TensorDescriptor]) -> None:
    """Check every descriptor and that names are unique across inputs and outputs."""
    seen: dict[str, str] = {}
    for group, descs in (("input", inputs), ("output", outputs)):
        for i, desc in enumerate(descs):
            where = f"{group} {i} ({desc.name!r})"
            check_descriptor(desc, where)
            if desc.name in seen:
                raise TesselFormatError(f"{where}: name already used by {seen[desc.name]}")
            seen[desc.name] = where
