"""Attribute kinds and constant tensor data of IR ops."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessel.ir.types import DType, Layout


class AttrKind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    INTS = "ints"
    FLOATS = "floats"
    DTYPE = "dtype"
    LAYOUT = "layout"
    TENSOR = "tensor"


class ConstData:
    """Immutable constant tensor payload; compared and hashed by content."""

    __slots__ = ("_array", "_declared", "_digest")

    def __init__(self, array: np.ndarray, dtype: DType | None = None):
        """`dtype`: the declared element type when it narrows what numpy holds (I4 in an int8
        array; its values must fit); any other is ignored (the verifier compares types)."""
        arr = np.array(array, copy=True, order="C")
        arr.setflags(write=False)
        self._array = arr
        self._declared: DType | None = None
        if dtype is not None and dtype is not DType.from_numpy(arr.dtype) and \
                dtype.numpy == arr.dtype:
            lo, hi = dtype.bounds
            if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
                raise ValueError(f"a {dtype.value} constant holds values outside [{lo}, {hi}] "
                                 f"(from {int(arr.min())} to {int(arr.max())})")
            self._declared = dtype
        self._digest: bytes | None = None

    @property
    def array(self) -> np.ndarray:
        return self._array

    @property
    def dtype(self) -> DType:
        if self._declared is not None:
            return self._declared
        return DType.from_numpy(self._array.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self._array.shape)

    @property
    def digest(self) -> bytes:
        if self._digest is None:
            h = hashlib.sha256()
            h.update(str(self._array.dtype).encode())
            if self._declared is not None:
                h.update(self._declared.value.encode())
            h.update(repr(self._array.shape).encode())
            h.update(self._array.tobytes())
            self._digest = h.digest()
        return self._digest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstData) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"ConstData({self.dtype.value}, {self.shape}, {self.digest.hex()[:12]})"


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of an op: its kind, and a default (None: required)."""

    kind: AttrKind
    default: Any = None
    optional: bool = False  # may be absent (value None) even without a default


def check_attr(kind: AttrKind, value: Any) -> str | None:
    """Return a description of what is wrong with value for kind, or None if it fits."""
    ok = {
        AttrKind.INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
        AttrKind.FLOAT: lambda v: isinstance(v, float),
        AttrKind.BOOL: lambda v: isinstance(v, bool),
        AttrKind.STR: lambda v: isinstance(v, str),
        AttrKind.INTS: lambda v: isinstance(v, tuple)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
        AttrKind.FLOATS: lambda v: isinstance(v, tuple) and all(isinstance(x, float) for x in v),
        AttrKind.DTYPE: lambda v: isinstance(v, DType),
        AttrKind.LAYOUT: lambda v: isinstance(v, Layout),
        AttrKind.TENSOR: lambda v: isinstance(v, ConstData),
    }[kind]
    if ok(value):
        return None
    return f"expected {kind.value}, got {type(value).__name__} {value!r}"
