"""Tensor types of the Graph IR: dtype, layout, quantisation parameters, and their text form."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np


class DType(enum.Enum):
    """Element types. The value is the spelling in IR text.

    I4 is a signed 4-bit integer held in an int8 array (``numpy``, ``itemsize``): the type of
    int4 weights, which the NPU stores two per byte (``bits``)."""

    F32 = "f32"
    I64 = "i64"
    I32 = "i32"
    I16 = "i16"
    I8 = "i8"
    I4 = "i4"
    U8 = "u8"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(_NUMPY[self])

    @property
    def is_float(self) -> bool:
        return self is DType.F32

    @property
    def is_int(self) -> bool:
        return self not in (DType.F32, DType.BOOL)

    @property
    def itemsize(self) -> int:
        """Bytes of one element as held in memory by numpy (I4: one)."""
        return _ITEMSIZE[self]  # a table: np.dtype per call would be on the emitters' hot paths

    @property
    def bits(self) -> int:
        """Bits of one element as the NPU stores it (I4: 4, two per byte)."""
        return 4 if self is DType.I4 else 8 * _ITEMSIZE[self]

    @property
    def bounds(self) -> tuple[int, int]:
        """(min, max) representable value of an integer dtype."""
        if self is DType.I4:
            return -8, 7
        info = np.iinfo(self.numpy)
        return int(info.min), int(info.max)

    @classmethod
    def from_numpy(cls, dt: np.dtype) -> DType:
        """The dtype numpy's `dt` holds (int8: I8; I4 is only ever declared)."""
        for member, name in _NUMPY.items():
            if member is DType.I4:
                continue
            if np.dtype(name) == np.dtype(dt):
                return member
        raise ValueError(f"no Tessel dtype for numpy dtype {dt}")


_NUMPY = {
    DType.F32: "float32",
    DType.I64: "int64",
    DType.I32: "int32",
    DType.I16: "int16",
    DType.I8: "int8",
    DType.I4: "int8",
    DType.U8: "uint8",
    DType.BOOL: "bool",
}
_ITEMSIZE = {member: np.dtype(name).itemsize for member, name in _NUMPY.items()}


class Layout(enum.Enum):
    """What the dimensions of a 4-D activation mean. ANY: no claim (most tensors)."""

    ANY = "any"
    NCHW = "nchw"
    NHWC = "nhwc"


@dataclass(frozen=True)
class QuantParams:
    """Affine quantisation: real = scale * (q - zero_point); per tensor (axis None) or per channel."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self) -> None:
        if len(self.scale) != len(self.zero_point) or not self.scale:
            raise ValueError("QuantParams needs as many scales as zero points, at least one")
        if self.axis is None and len(self.scale) != 1:
            raise ValueError("per-tensor QuantParams has exactly one scale")
        if any(not (s > 0 and math.isfinite(s)) for s in self.scale):
            raise ValueError(f"quantisation scales must be finite and > 0, got {self.scale}")

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def text(self) -> str:
        if self.axis is None:
            return f"q({_float_text(self.scale[0])}, {self.zero_point[0]})"
        scales = ", ".join(_float_text(s) for s in self.scale)
        zps = ", ".join(str(z) for z in self.zero_point)
        return f"q([{scales}], [{zps}], axis={self.axis})"


@dataclass(frozen=True)
class TensorType:
    """Shape, element type, layout tag and optional quantisation of one SSA value."""

    shape: tuple[int, ...]
    dtype: DType
    layout: Layout = Layout.ANY
    quant: QuantParams | None = None

    def __post_init__(self) -> None:
        if any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise ValueError(f"shape dims must be non-negative ints, got {self.shape}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype, self.layout, self.quant)

    def text(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        parts = [f"{dims}{self.dtype.value}"]
        if self.layout is not Layout.ANY:
            parts.append(self.layout.value)
        if self.quant is not None:
            parts.append(self.quant.text())
        return "tensor<" + ", ".join(parts) + ">"

    def __str__(self) -> str:
        return self.text()


def _float_text(x: float) -> str:
    """Exact, round-trippable spelling of a float (repr is shortest-exact for float64)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


float_text = _float_text
