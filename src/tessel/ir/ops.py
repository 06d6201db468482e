"""The op set of the Graph IR: the `Op` names and the shape of an op's IR spec (`OpSpec`:
operands, attributes, type inference), with the helpers shape rules share.

Each op's spec is part of its one definition (tessel.ops): `spec(op)` reads it, loading the
definitions on first use. Shape/dtype inference raises `InferError` with a short description;
the verifier adds the node and value names. Conv and pooling ops carry a `layout` attribute:
NCHW (weights OIHW) as imported from PyTorch, NHWC (weights OHWI) after the layout pass.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.types import Layout, TensorType


class InferError(ValueError):
    """Raised by a type-inference rule; the message says what is wrong."""


class Op(enum.Enum):
    """Every IR op. The value is the op's name in IR text."""

    CONSTANT = "constant"
    # elementwise unary
    RELU = "relu"
    CLAMP = "clamp"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    GELU = "gelu"
    HARDSWISH = "hardswish"
    HARDSIGMOID = "hardsigmoid"
    SILU = "silu"
    EXP = "exp"
    LOG = "log"
    NEG = "neg"
    ABS = "abs"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    # elementwise binary, numpy broadcasting
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    POW = "pow"
    # compute
    CONV2D = "conv2d"
    CONV_TRANSPOSE2D = "conv_transpose2d"
    LINEAR = "linear"
    MATMUL = "matmul"
    BATCH_NORM = "batch_norm"
    LAYER_NORM = "layer_norm"
    SOFTMAX = "softmax"
    SDPA = "sdpa"
    MAX_POOL2D = "max_pool2d"
    AVG_POOL2D = "avg_pool2d"
    MEAN = "mean"
    SUM = "sum"
    REDUCE_MAX = "reduce_max"
    EMBEDDING = "embedding"
    UPSAMPLE_NEAREST = "upsample_nearest"
    UPSAMPLE_BILINEAR = "upsample_bilinear"
    # data movement
    RESHAPE = "reshape"
    TRANSPOSE = "transpose"
    CONCAT = "concat"
    SLICE = "slice"
    PAD = "pad"
    EXPAND = "expand"
    CAST = "cast"
    # integer ops (docs/numerics.md; each is a fixed chain of NPU instructions)
    QCONV2D = "qconv2d"
    QLINEAR = "qlinear"
    QMATMUL = "qmatmul"
    QADD = "qadd"
    QSUB = "qsub"
    QMUL = "qmul"
    REQUANTIZE = "requantize"
    LUT = "lut"
    QAVG_POOL2D = "qavg_pool2d"
    QMEAN = "qmean"
    QSOFTMAX = "qsoftmax"
    QLAYER_NORM = "qlayer_norm"
    QSOFTMAX_TOSA = "qsoftmax_tosa"  # TFLite's int8 softmax as its TOSA legalisation computes it
    QSOFTMAX16_TOSA = "qsoftmax16_tosa"  # the same for TFLite's int16 softmax
    # quantisation boundaries (PyTorch semantics: round half to even, then clamp)
    QUANTIZE = "quantize"
    DEQUANTIZE = "dequantize"
    # an op that runs on the host CPU through torch (host fallback)
    HOST = "host"


@dataclass(frozen=True)
class OpSpec:
    """Operands (names; `optional` trailing ones may be absent), attributes and inference."""

    operands: tuple[str, ...]
    infer: Callable[[Sequence[TensorType], Mapping[str, Any]], TensorType]
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    optional: int = 0  # how many trailing operands may be omitted
    variadic: bool = False  # one operand name repeated; at least 1 - optional of them

    def arity_ok(self, n: int) -> bool:
        if self.variadic:
            return n >= 1 - self.optional
        return len(self.operands) - self.optional <= n <= len(self.operands)


SPECS: dict[Op, OpSpec] = {}  # filled by the op definitions (tessel.ops.base.register)


def spec(op: Op) -> OpSpec:
    """The IR spec of `op` (from its definition in tessel.ops)."""
    s = SPECS.get(op)
    if s is None:
        load_definitions()
        s = SPECS[op]
    return s


def load_definitions() -> None:
    """Import tessel.ops, whose modules register every op's definition (specs and kernels
    here). The IR names the package, not its modules: the definitions are read through these
    tables, so the IR imports no stage above it."""
    import importlib

    importlib.import_module("tessel.ops")


# ---------------------------------------------------------------- inference helpers


def require(cond: bool, message: str) -> None:
    if not cond:
        raise InferError(message)


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        require(da == db or da == 1 or db == 1, f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db) if min(da, db) != 0 else 0)
    return tuple(reversed(out))


def same_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(ts[0].shape, ts[0].dtype, ts[0].layout)


def broadcast_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = ts
    require(a.dtype == b.dtype, f"operand dtypes differ: {a.dtype.value} vs {b.dtype.value}")
    shape = broadcast_shapes(a.shape, b.shape)
    layout = a.layout if a.shape == shape else b.layout if b.shape == shape else Layout.ANY
    return TensorType(shape, a.dtype, layout)


def axis_index(axis: int, rank: int) -> int:
    require(-rank <= axis < max(rank, 1), f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def spatial(ts: TensorType, layout: Layout) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D activation in the given layout."""
    require(ts.rank == 4, f"expected a 4-D activation, got rank {ts.rank}")
    if layout is Layout.NHWC:
        n, h, w, c = ts.shape
    else:
        n, c, h, w = ts.shape
    return n, c, h, w


def nchw_like(layout: Layout, n: int, c: int, h: int, w: int) -> tuple[int, ...]:
    return (n, h, w, c) if layout is Layout.NHWC else (n, c, h, w)


def window_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dil: int,
               ceil_mode: bool = False) -> int:
    """Output length of a sliding window (PyTorch's rule, including ceil_mode)."""
    require(stride >= 1 and dil >= 1, f"stride {stride} and dilation {dil} must be >= 1")
    eff = dil * (k - 1) + 1
    span = size + pad_lo + pad_hi - eff
    require(span >= 0, f"window {eff} larger than padded input {size + pad_lo + pad_hi}")
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad_lo:  # last window must start inside input/left pad
            out -= 1
        return out
    return span // stride + 1


# ---------------------------------------------------------------- attributes shared by ops

_I, _B, _INTS, _LAYOUT = AttrKind.INT, AttrKind.BOOL, AttrKind.INTS, AttrKind.LAYOUT
CONV_ATTRS: Mapping[str, AttrSpec] = {
    "stride": AttrSpec(_INTS, (1, 1)),
    "padding": AttrSpec(_INTS, (0, 0, 0, 0)),
    "dilation": AttrSpec(_INTS, (1, 1)),
    "groups": AttrSpec(_I, 1),
    "layout": AttrSpec(_LAYOUT, Layout.NCHW),
}
POOL_ATTRS: Mapping[str, AttrSpec] = {
    "kernel": AttrSpec(_INTS),
    "stride": AttrSpec(_INTS),
    "padding": AttrSpec(_INTS, (0, 0, 0, 0)),
    "ceil_mode": AttrSpec(_B, False),
    "layout": AttrSpec(_LAYOUT, Layout.NCHW),
}


def slice_len(size: int, start: int, end: int, step: int) -> int:
    return len(range(*slice(start, end, step).indices(size)))
