"""TOSA 1.0 flatbuffers, read and written with the `flatbuffers` runtime alone.

The part of the TOSA serialisation schema (`tosa.fbs`, file identifier "TOSA") that integer
graphs use: a graph with one region "main" of one basic block holding operators, tensors
(constants carry their data) and shapes (CONST_SHAPE values). Each table is read and written
by its field slots, so Tessel needs neither generated code nor the TOSA serialisation library at
run time; `ATTRIBUTES` lists, per operator, the fields of its attribute table in schema order.

The profile and extensions a file needs have no field in the schema: `TosaGraph.write` names
them in the software version's modifier string ("tessel profile=PRO-INT
extensions=EXT-DOUBLEROUND"), which readers ignore.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
from flatbuffers import number_types as N
from flatbuffers.table import Table

from tessel.errors import TesselConfigError, TesselFormatError

IDENTIFIER = b"TOSA"
VERSION = (1, 0, 0)
SOFTWARE = "tessel"


class DType(enum.IntEnum):
    """tosa.fbs `DType` (the values Tessel reads and writes)."""

    UNKNOWN = 0
    BOOL = 1
    INT4 = 2
    INT8 = 3
    INT16 = 4
    INT32 = 5
    INT48 = 6
    FP32 = 7
    FP16 = 8
    BF16 = 9
    SHAPE = 10
    INT64 = 17


NUMPY = {DType.BOOL: np.dtype(np.bool_), DType.INT8: np.dtype(np.int8),
         DType.INT16: np.dtype(np.int16), DType.INT32: np.dtype(np.int32),
         DType.FP32: np.dtype(np.float32), DType.FP16: np.dtype(np.float16),
         DType.SHAPE: np.dtype(np.int64), DType.INT64: np.dtype(np.int64)}


class TosaOp(enum.IntEnum):
    """tosa.fbs `Op`; the `Attribute` union's member for op k is k as well."""

    AVG_POOL2D = 2
    CONV2D = 3
    DEPTHWISE_CONV2D = 5
    MATMUL = 7
    MAX_POOL2D = 8
    CLAMP = 11
    SIGMOID = 13
    TANH = 14
    ADD = 15
    ARITHMETIC_RIGHT_SHIFT = 16
    BITWISE_AND = 17
    INTDIV = 20
    LOGICAL_LEFT_SHIFT = 22
    MAXIMUM = 26
    MINIMUM = 27
    MUL = 28
    SUB = 30
    TABLE = 31
    ABS = 32
    CLZ = 35
    SELECT = 45
    EQUAL = 46
    GREATER = 47
    GREATER_EQUAL = 48
    REDUCE_MAX = 51
    REDUCE_MIN = 52
    REDUCE_SUM = 54
    CONCAT = 55
    PAD = 56
    RESHAPE = 57
    SLICE = 59
    TILE = 60
    TRANSPOSE = 61
    GATHER = 62
    RESIZE = 64
    CAST = 65
    RESCALE = 66
    CONST = 67
    IDENTITY = 68
    CONST_SHAPE = 75


# every operator's name by code (tosa.fbs `Op`, the TOSA 1.0 part), for messages
OP_NAMES = (
    "UNKNOWN", "ARGMAX", "AVG_POOL2D", "CONV2D", "CONV3D", "DEPTHWISE_CONV2D", "FFT2D",
    "MATMUL", "MAX_POOL2D", "RFFT2D", "TRANSPOSE_CONV2D", "CLAMP", "ERF", "SIGMOID", "TANH",
    "ADD", "ARITHMETIC_RIGHT_SHIFT", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "INTDIV",
    "LOGICAL_AND", "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT", "LOGICAL_OR", "LOGICAL_XOR",
    "MAXIMUM", "MINIMUM", "MUL", "POW", "SUB", "TABLE", "ABS", "BITWISE_NOT", "CEIL", "CLZ",
    "COS", "EXP", "FLOOR", "LOG", "LOGICAL_NOT", "NEGATE", "RECIPROCAL", "RSQRT", "SIN",
    "SELECT", "EQUAL", "GREATER", "GREATER_EQUAL", "REDUCE_ALL", "REDUCE_ANY", "REDUCE_MAX",
    "REDUCE_MIN", "REDUCE_PRODUCT", "REDUCE_SUM", "CONCAT", "PAD", "RESHAPE", "REVERSE",
    "SLICE", "TILE", "TRANSPOSE", "GATHER", "SCATTER", "RESIZE", "CAST", "RESCALE", "CONST",
    "IDENTITY", "CUSTOM", "COND_IF", "WHILE_LOOP", "VARIABLE", "VARIABLE_WRITE",
    "VARIABLE_READ", "CONST_SHAPE",
)


class RoundingMode(enum.IntEnum):
    SINGLE_ROUND = 1
    INEXACT_ROUND = 2
    DOUBLE_ROUND = 3


class Kind(enum.Enum):
    """How an attribute field is stored."""

    INTS = "ints"  # [int32]
    BYTES = "bytes"  # [ubyte] (a value in the operand's element type)
    BOOL = "bool"
    U32 = "u32"  # an enum (DType, RoundingMode, NanPropagationMode)
    I32 = "i32"


_WINDOW = (("pad", Kind.INTS), ("stride", Kind.INTS), ("dilation", Kind.INTS),
           ("local_bound", Kind.BOOL), ("acc_type", Kind.U32))
ATTRIBUTES: Mapping[TosaOp, tuple[tuple[str, Kind], ...]] = {
    TosaOp.CONV2D: _WINDOW,
    TosaOp.DEPTHWISE_CONV2D: _WINDOW,
    TosaOp.MAX_POOL2D: (("kernel", Kind.INTS), ("stride", Kind.INTS), ("pad", Kind.INTS),
                        ("nan_mode", Kind.U32)),
    TosaOp.AVG_POOL2D: (("kernel", Kind.INTS), ("stride", Kind.INTS), ("pad", Kind.INTS),
                        ("acc_type", Kind.U32)),
    TosaOp.CLAMP: (("min_val", Kind.BYTES), ("max_val", Kind.BYTES), ("nan_mode", Kind.U32)),
    TosaOp.ARITHMETIC_RIGHT_SHIFT: (("round", Kind.BOOL),),
    TosaOp.MAXIMUM: (("nan_mode", Kind.U32),),
    TosaOp.MINIMUM: (("nan_mode", Kind.U32),),
    TosaOp.REDUCE_MAX: (("axis", Kind.I32), ("nan_mode", Kind.U32)),
    TosaOp.REDUCE_MIN: (("axis", Kind.I32), ("nan_mode", Kind.U32)),
    TosaOp.REDUCE_SUM: (("axis", Kind.I32),),
    TosaOp.CONCAT: (("axis", Kind.I32),),
    TosaOp.TRANSPOSE: (("perms", Kind.INTS),),
    TosaOp.RESIZE: (("mode", Kind.U32),),
    TosaOp.RESCALE: (("scale32", Kind.BOOL), ("rounding_mode", Kind.U32),
                     ("per_channel", Kind.BOOL), ("input_unsigned", Kind.BOOL),
                     ("output_unsigned", Kind.BOOL)),
}


@dataclass(frozen=True)
class Tensor:
    """A tensor of the block; `data` (little-endian bytes) makes it a constant."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    data: bytes | None = None

    def array(self) -> np.ndarray:
        if self.data is not None and self.dtype is DType.INT48:
            return self._int48()
        if self.data is None or self.dtype not in NUMPY:
            raise TesselFormatError(f"TOSA tensor {self.name}: no {self.dtype.name} data to read")
        arr = np.frombuffer(self.data, NUMPY[self.dtype].newbyteorder("<"))
        count = int(np.prod(self.shape))
        if arr.size > count and len(self.data) - count * arr.itemsize < 8:
            arr = arr[:count]  # writers pad data to a multiple of 8 bytes
        if count == 1 and arr.size > 1 and np.all(arr == arr[0]):
            # ExecuTorch writes a weight zero point once per output channel into a shape-[1]
            # tensor; the reference model reads the first, and all of them are that value
            arr = arr[:1]
        if arr.size != count:
            raise TesselFormatError(f"TOSA tensor {self.name}: {arr.size} values for shape "
                                    f"{list(self.shape)}")
        return arr.reshape(self.shape).astype(NUMPY[self.dtype])

    def _int48(self) -> np.ndarray:
        """INT48 data: 6 little-endian bytes per value, sign-extended to int64."""
        count = int(np.prod(self.shape))
        if len(self.data) < 6 * count or len(self.data) - 6 * count >= 8:
            raise TesselFormatError(f"TOSA tensor {self.name}: {len(self.data)} bytes of INT48 "
                                    f"data for shape {list(self.shape)} ({6 * count} expected)")
        raw = np.frombuffer(self.data[:6 * count], np.uint8).reshape(count, 6)
        wide = np.zeros((count, 8), np.uint8)
        wide[:, :6] = raw
        wide[:, 6:] = np.where(raw[:, 5:6] >= 0x80, 0xFF, 0)  # the sign byte, extended
        return wide.view("<i8").reshape(self.shape).astype(np.int64)


@dataclass(frozen=True)
class Operator:
    op: TosaOp
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    location: str = ""


@dataclass
class TosaGraph:
    """One basic block "main": operators in order, tensors and shapes by name."""

    operators: list[Operator]
    tensors: dict[str, Tensor]
    shapes: dict[str, tuple[int, ...]]
    inputs: list[str]
    outputs: list[str]
    profile: str = "PRO-INT"
    extensions: tuple[str, ...] = ()
    version: tuple[int, int, int] = VERSION

    def write(self) -> bytes:
        return _Writer().graph(self)


def as_bytes(values: np.ndarray, dtype: DType) -> bytes:
    if dtype is DType.INT48:  # 6 little-endian bytes per value
        v = np.ascontiguousarray(values, "<i8").reshape(-1)
        if v.size and (int(v.min()) < -(2**47) or int(v.max()) >= 2**47):
            raise TesselConfigError(f"INT48 data: values [{int(v.min())}, {int(v.max())}] "
                                    "outside int48")
        return v.view(np.uint8).reshape(-1, 8)[:, :6].tobytes()
    return np.ascontiguousarray(values, NUMPY[dtype].newbyteorder("<")).tobytes()


# ---------------------------------------------------------------- writing


class _Writer:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1 << 16)

    def strings(self, items: Sequence[str]) -> int:
        offs = [self.b.CreateString(s) for s in items]
        return self.offsets(offs)

    def offsets(self, offs: Sequence[int]) -> int:
        self.b.StartVector(4, len(offs), 4)
        for o in reversed(offs):
            self.b.PrependUOffsetTRelative(o)
        return self.b.EndVector()

    def ints(self, values: Sequence[int]) -> int:
        self.b.StartVector(4, len(values), 4)
        for v in reversed(values):
            self.b.PrependInt32(int(v))
        return self.b.EndVector()

    def raw(self, data: bytes) -> int:
        """A [ubyte] vector aligned to 8 (`force_align: 8`)."""
        b = self.b
        b.StartVector(1, len(data), 8)
        b.head = b.head - len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        return b.EndVector()

    def table(self, fields: Sequence[tuple[int, Kind | str, Any]]) -> int:
        """`fields`: (slot, kind, value); offsets ("off") must be built before."""
        b = self.b
        b.StartObject(max((s for s, _, _ in fields), default=-1) + 1)
        for slot, kind, value in fields:
            if kind == "off":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            elif kind in (Kind.BOOL, "bool"):
                b.PrependBoolSlot(slot, bool(value), not value)  # always stored
            elif kind in (Kind.U32, "u32"):
                b.PrependUint32Slot(slot, int(value), 0)
            elif kind in (Kind.I32, "i32"):
                b.PrependInt32Slot(slot, int(value), int(value) + 1)  # always stored
            elif kind == "u64":
                b.PrependUint64Slot(slot, int(value), 0)
            elif kind == "u8":
                b.PrependUint8Slot(slot, int(value), 0)
        return b.EndObject()

    def attribute(self, op: Operator) -> int:
        fields = []
        for slot, (name, kind) in enumerate(ATTRIBUTES.get(op.op, ())):
            if name not in op.attrs:
                continue
            value = op.attrs[name]
            if kind is Kind.INTS:
                fields.append((slot, "off", self.ints(value)))
            elif kind is Kind.BYTES:
                fields.append((slot, "off", self.raw(value)))
            else:
                fields.append((slot, kind, value))
        return self.table(fields)

    def operator(self, op: Operator) -> int:
        attr = self.attribute(op)
        ins, outs = self.strings(op.inputs), self.strings(op.outputs)
        fields: list[tuple[int, Kind | str, Any]] = [
            (0, "u32", op.op), (1, "u8", op.op), (2, "off", attr), (3, "off", ins),
            (4, "off", outs)]
        if op.location:
            text = self.b.CreateString(op.location)
            fields.append((5, "off", self.table([(0, "off", text)])))
        return self.table(fields)

    def tensor(self, t: Tensor) -> int:
        name, shape = self.b.CreateString(t.name), self.ints(t.shape)
        fields: list[tuple[int, Kind | str, Any]] = [(0, "off", name), (1, "off", shape),
                                                    (2, "u32", t.dtype)]
        if t.data is not None:
            fields.append((3, "off", self.raw(t.data)))
        return self.table(fields)

    def shape(self, name: str, values: tuple[int, ...]) -> int:
        n = self.b.CreateString(name)
        data = self.raw(as_bytes(np.asarray(values, np.int64), DType.SHAPE))
        return self.table([(0, "off", n), (1, "u32", len(values)), (2, "off", data)])

    def graph(self, g: TosaGraph) -> bytes:
        b = self.b
        ops = self.offsets([self.operator(op) for op in g.operators])
        tensors = self.offsets([self.tensor(t) for t in g.tensors.values()])
        shapes = self.offsets([self.shape(n, v) for n, v in g.shapes.items()])
        ins, outs = self.strings(g.inputs), self.strings(g.outputs)
        main = b.CreateString("main")
        block = self.table([(0, "off", main), (1, "off", ops), (2, "off", tensors),
                            (3, "off", ins), (4, "off", outs), (5, "off", shapes)])
        region = self.table([(0, "off", b.CreateString("main")), (1, "off", self.offsets([block]))])
        regions = self.offsets([region])
        modifier = b.CreateString(describe_profile(g.profile, g.extensions))
        b.StartObject(4)
        for slot, v in enumerate(VERSION[:3]):
            b.PrependInt32Slot(slot, v, -1)
        b.PrependBoolSlot(3, False, True)
        version = b.EndObject()
        software = self.table([(3, "off", modifier)])
        root = self.table([(0, "off", version), (1, "off", regions), (2, "off", software)])
        b.Finish(root, IDENTIFIER)
        return bytes(b.Output())


def describe_profile(profile: str, extensions: Sequence[str]) -> str:
    ext = ",".join(extensions)
    return f"{SOFTWARE} profile={profile}" + (f" extensions={ext}" if ext else "")


# ---------------------------------------------------------------- reading


class _Reader:
    """Field access on one table of the buffer (offsets checked against its size)."""

    def __init__(self, buf: bytes, pos: int) -> None:
        if not 0 <= pos < len(buf):
            raise TesselFormatError(f"TOSA file: table offset {pos} outside the {len(buf)} bytes")
        self.buf, self.t = buf, Table(buf, pos)

    def _off(self, slot: int) -> int:
        return self.t.Offset(4 + 2 * slot)

    def table(self, slot: int) -> _Reader | None:
        o = self._off(slot)
        return None if not o else _Reader(self.buf, self.t.Indirect(o + self.t.Pos))

    def scalar(self, slot: int, flags: Any, default: Any) -> Any:
        o = self._off(slot)
        return default if not o else self.t.Get(flags, o + self.t.Pos)

    def string(self, slot: int) -> str:
        o = self._off(slot)
        return "" if not o else self.t.String(o + self.t.Pos).decode("utf-8", "replace")

    def _vector(self, slot: int) -> tuple[int, int]:
        o = self._off(slot)
        if not o:
            return 0, 0
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        if start + n > len(self.buf):
            raise TesselFormatError("TOSA file: a vector runs past the end of the file")
        return start, n

    def ints(self, slot: int) -> tuple[int, ...]:
        start, n = self._vector(slot)
        return tuple(int(v) for v in np.frombuffer(self.buf, "<i4", n, start)) if n else ()

    def raw(self, slot: int) -> bytes | None:
        o = self._off(slot)
        if not o:
            return None
        start, n = self._vector(slot)
        return bytes(self.buf[start:start + n])

    def tables(self, slot: int) -> list[_Reader]:
        start, n = self._vector(slot)
        return [_Reader(self.buf, self.t.Indirect(start + 4 * k)) for k in range(n)]

    def strings(self, slot: int) -> tuple[str, ...]:
        start, n = self._vector(slot)
        return tuple(self.t.String(start + 4 * k).decode("utf-8", "replace") for k in range(n))


def read_form(op: Operator) -> Operator:
    """`op` with its attributes as `read` gives them back once written (every field of its
    attribute table, the absent ones at their defaults)."""
    attrs: dict[str, Any] = {}
    for name, kind in ATTRIBUTES.get(op.op, ()):
        v = op.attrs.get(name)
        if kind is Kind.INTS:
            attrs[name] = tuple(int(x) for x in v) if v is not None else ()
        elif kind is Kind.BYTES:
            attrs[name] = bytes(v) if v is not None else b""
        elif kind is Kind.BOOL:
            attrs[name] = bool(v)
        else:
            attrs[name] = int(v) if v is not None else 0
    return Operator(op.op, op.inputs, op.outputs, attrs, op.location)


def _attrs(op: TosaOp, r: _Reader | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if r is None:
        return out
    for slot, (name, kind) in enumerate(ATTRIBUTES.get(op, ())):
        if kind is Kind.INTS:
            out[name] = r.ints(slot)
        elif kind is Kind.BYTES:
            out[name] = r.raw(slot) or b""
        elif kind is Kind.BOOL:
            out[name] = bool(r.scalar(slot, N.BoolFlags, False))
        elif kind is Kind.U32:
            out[name] = int(r.scalar(slot, N.Uint32Flags, 0))
        else:
            out[name] = int(r.scalar(slot, N.Int32Flags, 0))
    return out


def _operator(r: _Reader) -> Operator:
    code = int(r.scalar(0, N.Uint32Flags, 0))
    try:
        op = TosaOp(code)
    except ValueError:
        what = OP_NAMES[code] if 0 <= code < len(OP_NAMES) else f"code {code}"
        raise TesselFormatError(f"TOSA operator {what} ({', '.join(r.strings(4))}): not an "
                                "integer operator Tessel imports") from None
    loc = r.table(5)
    return Operator(op, r.strings(3), r.strings(4), _attrs(op, r.table(2)),
                    loc.string(0) if loc is not None else "")


def _dtype(code: int, name: str) -> DType:
    try:
        return DType(code)
    except ValueError:
        raise TesselFormatError(f"TOSA tensor {name}: element type {code} is not one Tessel "
                                "imports") from None


def read(data: bytes) -> TosaGraph:
    """The one basic block of a TOSA flatbuffer; TesselFormatError if it is not one."""
    if len(data) < 8 or data[4:8] != IDENTIFIER:
        raise TesselFormatError("not a TOSA flatbuffer (file identifier 'TOSA' missing)")
    try:
        return _read(bytes(data))
    except TesselFormatError:
        raise
    except Exception as exc:  # a corrupt offset surfaces as struct / index errors
        raise TesselFormatError(f"TOSA file is corrupt: {type(exc).__name__}: {exc}") from None


def _read(data: bytes) -> TosaGraph:
    root = _Reader(data, int(np.frombuffer(data, "<u4", 1, 0)[0]))
    version = root.table(0)
    ver = (0, 0, 0) if version is None else tuple(
        int(version.scalar(k, N.Int32Flags, -1)) for k in range(3))
    regions = root.tables(1)
    if len(regions) != 1 or len(blocks := regions[0].tables(1)) != 1:
        raise TesselFormatError("TOSA file: Tessel imports one region with one basic block "
                                "(control flow is refused)")
    block = blocks[0]
    tensors = {}
    for t in block.tables(2):
        name = t.string(0)
        tensors[name] = Tensor(name, t.ints(1), _dtype(int(t.scalar(2, N.Uint32Flags, 0)), name),
                               t.raw(3))
    shapes = {}
    for s in block.tables(5):
        raw = s.raw(2) or b""
        shapes[s.string(0)] = tuple(int(v) for v in np.frombuffer(raw, "<i8"))
    software = root.table(2)
    profile, extensions = _profile(software.string(3) if software is not None else "")
    return TosaGraph([_operator(o) for o in block.tables(1)], tensors, shapes,
                     list(block.strings(3)), list(block.strings(4)), profile, extensions,
                     ver)  # type: ignore[arg-type]


def _profile(modifier: str) -> tuple[str, tuple[str, ...]]:
    words = dict(w.split("=", 1) for w in modifier.split() if "=" in w)
    ext = words.get("extensions", "")
    return words.get("profile", "PRO-INT"), tuple(e for e in ext.split(",") if e)
