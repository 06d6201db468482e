"""The op set of the Graph IR: one `OpSpec` per `Op` (operands, attributes, type inference).

Shape/dtype inference raises `InferError` with a short description; the verifier adds the
node and value names. Conv and pooling ops carry a `layout` attribute: NCHW (weights OIHW)
as imported from PyTorch, NHWC (weights OHWI) after the layout pass.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.types import DType, Layout, QuantParams, TensorType


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


SPECS: dict[Op, OpSpec] = {}


def spec(op: Op) -> OpSpec:
    return SPECS[op]


# ---------------------------------------------------------------- inference helpers


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise InferError(message)


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        _require(da == db or da == 1 or db == 1, f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db) if min(da, db) != 0 else 0)
    return tuple(reversed(out))


def _same(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(ts[0].shape, ts[0].dtype, ts[0].layout)


def _binary(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = ts
    _require(a.dtype == b.dtype, f"operand dtypes differ: {a.dtype.value} vs {b.dtype.value}")
    shape = broadcast_shapes(a.shape, b.shape)
    layout = a.layout if a.shape == shape else b.layout if b.shape == shape else Layout.ANY
    return TensorType(shape, a.dtype, layout)


def _axis(axis: int, rank: int) -> int:
    _require(-rank <= axis < max(rank, 1), f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def _spatial(ts: TensorType, layout: Layout) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D activation in the given layout."""
    _require(ts.rank == 4, f"expected a 4-D activation, got rank {ts.rank}")
    if layout is Layout.NHWC:
        n, h, w, c = ts.shape
    else:
        n, c, h, w = ts.shape
    return n, c, h, w


def _nchw_like(layout: Layout, n: int, c: int, h: int, w: int) -> tuple[int, ...]:
    return (n, h, w, c) if layout is Layout.NHWC else (n, c, h, w)


def window_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dil: int,
               ceil_mode: bool = False) -> int:
    """Output length of a sliding window (PyTorch's rule, including ceil_mode)."""
    _require(stride >= 1 and dil >= 1, f"stride {stride} and dilation {dil} must be >= 1")
    eff = dil * (k - 1) + 1
    span = size + pad_lo + pad_hi - eff
    _require(span >= 0, f"window {eff} larger than padded input {size + pad_lo + pad_hi}")
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad_lo:  # last window must start inside input/left pad
            out -= 1
        return out
    return span // stride + 1


def _conv2d(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, w = ts[0], ts[1]
    layout = attrs["layout"]
    n, c, h, wd = _spatial(x, layout)
    _require(w.rank == 4, f"weight must be 4-D, got rank {w.rank}")
    if layout is Layout.NHWC:
        o, kh, kw, ci = w.shape
    else:
        o, ci, kh, kw = w.shape
    g = attrs["groups"]
    _require(g >= 1 and c % g == 0 and o % g == 0, f"groups={g} must divide in {c} and out {o}")
    _require(ci * g == c, f"weight expects {ci * g} input channels, input has {c}")
    if len(ts) > 2:
        _require(ts[2].shape == (o,), f"bias shape {list(ts[2].shape)} != [{o}]")
    sh, sw = attrs["stride"]
    pt, pl, pb, pr = attrs["padding"]
    dh, dw = attrs["dilation"]
    oh = window_out(h, kh, sh, pt, pb, dh)
    ow = window_out(wd, kw, sw, pl, pr, dw)
    return TensorType(_nchw_like(layout, n, o, oh, ow), x.dtype, layout)


def _pool2d(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    layout = attrs["layout"]
    n, c, h, w = _spatial(x, layout)
    kh, kw = attrs["kernel"]
    sh, sw = attrs["stride"]
    pt, pl, pb, pr = attrs["padding"]
    dh, dw = attrs.get("dilation", (1, 1)) or (1, 1)
    ceil = attrs.get("ceil_mode", False)
    oh = window_out(h, kh, sh, pt, pb, dh, ceil)
    ow = window_out(w, kw, sw, pl, pr, dw, ceil)
    return TensorType(_nchw_like(layout, n, c, oh, ow), x.dtype, layout)


def _linear(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, w = ts[0], ts[1]
    _require(w.rank == 2, f"weight must be 2-D [out, in], got rank {w.rank}")
    _require(x.rank >= 1 and x.shape[-1] == w.shape[1],
             f"input features {x.shape[-1] if x.rank else None} != weight in {w.shape[1]}")
    if len(ts) > 2:
        _require(ts[2].shape == (w.shape[0],), f"bias shape {list(ts[2].shape)} != [{w.shape[0]}]")
    return TensorType(x.shape[:-1] + (w.shape[0],), x.dtype)


def _matmul(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = ts
    _require(a.rank >= 2 and b.rank >= 2, "matmul operands must have rank >= 2")
    _require(a.shape[-1] == b.shape[-2], f"contraction {a.shape[-1]} != {b.shape[-2]}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _batch_norm(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    axis = 3 if attrs["layout"] is Layout.NHWC else 1
    _require(x.rank >= 2, "batch_norm input must have rank >= 2")
    c = x.shape[axis if x.rank == 4 else 1]
    for t in ts[1:]:
        _require(t.shape == (c,), f"per-channel parameter shape {list(t.shape)} != [{c}]")
    return TensorType(x.shape, x.dtype, x.layout)


def _layer_norm(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    ns = tuple(attrs["normalized_shape"])
    _require(x.shape[x.rank - len(ns):] == ns, f"normalized_shape {list(ns)} != trailing dims")
    for t in ts[1:]:
        _require(t.shape == ns, f"affine parameter shape {list(t.shape)} != {list(ns)}")
    return TensorType(x.shape, x.dtype, x.layout)


def _softmax(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _axis(attrs["axis"], ts[0].rank)
    return _same(ts, attrs)


def _sdpa(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    q, k, v = ts[:3]
    _require(q.rank >= 2 and k.rank == q.rank and v.rank == q.rank, "q, k, v must share rank >= 2")
    _require(q.shape[-1] == k.shape[-1], f"q/k head dims differ: {q.shape[-1]} vs {k.shape[-1]}")
    _require(k.shape[-2] == v.shape[-2], f"k/v lengths differ: {k.shape[-2]} vs {v.shape[-2]}")
    if len(ts) > 3:
        scores = q.shape[:-1] + (k.shape[-2],)
        _require(broadcast_shapes(ts[3].shape, scores) == scores, "mask does not broadcast to scores")
    return TensorType(q.shape[:-1] + (v.shape[-1],), q.dtype)


def _reduce(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    axes = {_axis(a, x.rank) for a in attrs["axes"]}
    _require(len(axes) == len(attrs["axes"]), f"repeated axes {list(attrs['axes'])}")
    keep = attrs["keepdim"]
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return TensorType(shape, x.dtype)


def _embedding(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    w, idx = ts
    _require(w.rank == 2, f"embedding table must be 2-D, got rank {w.rank}")
    _require(idx.dtype in (DType.I64, DType.I32), f"indices must be integer, got {idx.dtype.value}")
    return TensorType(idx.shape + (w.shape[1],), w.dtype)


def _upsample(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    layout = attrs["layout"]
    n, c, h, w = _spatial(ts[0], layout)
    fh, fw = attrs["scale"]
    _require(fh >= 1 and fw >= 1, f"scale factors must be >= 1, got {[fh, fw]}")
    return TensorType(_nchw_like(layout, n, c, h * fh, w * fw), ts[0].dtype, layout)


def _reshape(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    shape = tuple(attrs["shape"])
    _require(all(d >= 0 for d in shape), f"reshape target {list(shape)} has a negative dim")
    _require(math.prod(shape) == ts[0].numel, f"reshape {list(ts[0].shape)} -> {list(shape)} "
             "changes the element count")
    return TensorType(shape, ts[0].dtype)


def _transpose(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    perm = tuple(attrs["perm"])
    _require(sorted(perm) == list(range(ts[0].rank)), f"perm {list(perm)} is not a permutation "
             f"of rank {ts[0].rank}")
    return TensorType(tuple(ts[0].shape[p] for p in perm), ts[0].dtype)


def _concat(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    first = ts[0]
    axis = _axis(attrs["axis"], first.rank)
    for t in ts[1:]:
        _require(t.dtype == first.dtype, "concat operands differ in dtype")
        _require(t.rank == first.rank and all(
            d == e for i, (d, e) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis),
            f"concat operand shape {list(t.shape)} does not match {list(first.shape)} off axis {axis}")
    size = sum(t.shape[axis] for t in ts)
    return TensorType(first.shape[:axis] + (size,) + first.shape[axis + 1:], first.dtype,
                      first.layout)


def slice_len(size: int, start: int, end: int, step: int) -> int:
    return len(range(*slice(start, end, step).indices(size)))


def _slice(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    axis = _axis(attrs["axis"], x.rank)
    _require(attrs["step"] >= 1, f"slice step must be >= 1, got {attrs['step']}")
    n = slice_len(x.shape[axis], attrs["start"], attrs["end"], attrs["step"])
    return TensorType(x.shape[:axis] + (n,) + x.shape[axis + 1:], x.dtype, x.layout)


def _pad(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    pads = attrs["pads"]
    _require(len(pads) == 2 * x.rank, f"pads needs 2 x rank = {2 * x.rank} entries, got {len(pads)}")
    _require(all(p >= 0 for p in pads), f"negative padding {list(pads)}")
    shape = tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x.shape))
    return TensorType(shape, x.dtype, x.layout)


def _expand(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    shape = tuple(attrs["shape"])
    _require(broadcast_shapes(ts[0].shape, shape) == shape,
             f"cannot expand {list(ts[0].shape)} to {list(shape)}")
    return TensorType(shape, ts[0].dtype)


def _cast(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(ts[0].shape, attrs["dtype"], ts[0].layout)


def _constant(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    value = attrs["value"]
    return TensorType(value.shape, value.dtype)


def _quantize(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _require(ts[0].dtype is DType.F32, f"quantize takes f32, got {ts[0].dtype.value}")
    dtype = attrs["dtype"]
    _require(dtype in (DType.I8, DType.I16, DType.I32, DType.U8), f"cannot quantize to {dtype.value}")
    lo, hi = dtype.bounds
    _require(lo <= attrs["qmin"] <= attrs["qmax"] <= hi,
             f"qmin/qmax [{attrs['qmin']}, {attrs['qmax']}] outside {dtype.value}")
    quant = QuantParams((attrs["scale"],), (attrs["zero_point"],))
    return TensorType(ts[0].shape, dtype, ts[0].layout, quant)


def _dequantize(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _require(ts[0].dtype.is_int, f"dequantize takes an integer tensor, got {ts[0].dtype.value}")
    return TensorType(ts[0].shape, DType.F32, ts[0].layout)


def _host(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    raise InferError("host op result types are declared, not inferred")


# ---------------------------------------------------------------- the table

_I, _F, _B = AttrKind.INT, AttrKind.FLOAT, AttrKind.BOOL
_INTS, _LAYOUT = AttrKind.INTS, AttrKind.LAYOUT
_CONV_ATTRS = {
    "stride": AttrSpec(_INTS, (1, 1)),
    "padding": AttrSpec(_INTS, (0, 0, 0, 0)),
    "dilation": AttrSpec(_INTS, (1, 1)),
    "groups": AttrSpec(_I, 1),
    "layout": AttrSpec(_LAYOUT, Layout.NCHW),
}
_POOL_ATTRS = {
    "kernel": AttrSpec(_INTS),
    "stride": AttrSpec(_INTS),
    "padding": AttrSpec(_INTS, (0, 0, 0, 0)),
    "ceil_mode": AttrSpec(_B, False),
    "layout": AttrSpec(_LAYOUT, Layout.NCHW),
}

for _op in (Op.RELU, Op.SIGMOID, Op.TANH, Op.HARDSWISH, Op.HARDSIGMOID, Op.SILU, Op.EXP,
            Op.LOG, Op.NEG, Op.ABS, Op.SQRT, Op.RSQRT, Op.RECIPROCAL):
    SPECS[_op] = OpSpec(("x",), _same)
SPECS[Op.CLAMP] = OpSpec(("x",), _same, {"min": AttrSpec(_F, float("-inf")),
                                         "max": AttrSpec(_F, float("inf"))})
SPECS[Op.GELU] = OpSpec(("x",), _same, {"approximate": AttrSpec(AttrKind.STR, "none")})
for _op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAXIMUM, Op.MINIMUM, Op.POW):
    SPECS[_op] = OpSpec(("lhs", "rhs"), _binary)

SPECS[Op.CONSTANT] = OpSpec((), _constant, {"value": AttrSpec(AttrKind.TENSOR)})
SPECS[Op.CONV2D] = OpSpec(("input", "weight", "bias"), _conv2d, _CONV_ATTRS, optional=1)
SPECS[Op.LINEAR] = OpSpec(("input", "weight", "bias"), _linear, optional=1)
SPECS[Op.MATMUL] = OpSpec(("lhs", "rhs"), _matmul)
SPECS[Op.BATCH_NORM] = OpSpec(("input", "mean", "var", "weight", "bias"), _batch_norm,
                              {"eps": AttrSpec(_F, 1e-5), "layout": AttrSpec(_LAYOUT, Layout.NCHW)},
                              optional=2)
SPECS[Op.LAYER_NORM] = OpSpec(("input", "weight", "bias"), _layer_norm,
                              {"normalized_shape": AttrSpec(_INTS), "eps": AttrSpec(_F, 1e-5)},
                              optional=2)
SPECS[Op.SOFTMAX] = OpSpec(("x",), _softmax, {"axis": AttrSpec(_I, -1)})
SPECS[Op.SDPA] = OpSpec(("query", "key", "value", "mask"), _sdpa,
                        {"scale": AttrSpec(_F), "causal": AttrSpec(_B, False)}, optional=1)
SPECS[Op.MAX_POOL2D] = OpSpec(("x",), _pool2d, {**_POOL_ATTRS,
                                                "dilation": AttrSpec(_INTS, (1, 1))})
SPECS[Op.AVG_POOL2D] = OpSpec(("x",), _pool2d, {**_POOL_ATTRS,
                                                "count_include_pad": AttrSpec(_B, True)})
for _op in (Op.MEAN, Op.SUM, Op.REDUCE_MAX):
    SPECS[_op] = OpSpec(("x",), _reduce, {"axes": AttrSpec(_INTS), "keepdim": AttrSpec(_B, False)})
SPECS[Op.EMBEDDING] = OpSpec(("weight", "indices"), _embedding)
SPECS[Op.UPSAMPLE_NEAREST] = OpSpec(("x",), _upsample, {"scale": AttrSpec(_INTS),
                                                        "layout": AttrSpec(_LAYOUT, Layout.NCHW)})
SPECS[Op.RESHAPE] = OpSpec(("x",), _reshape, {"shape": AttrSpec(_INTS)})
SPECS[Op.TRANSPOSE] = OpSpec(("x",), _transpose, {"perm": AttrSpec(_INTS)})
SPECS[Op.CONCAT] = OpSpec(("inputs",), _concat, {"axis": AttrSpec(_I)}, variadic=True)
SPECS[Op.SLICE] = OpSpec(("x",), _slice, {"axis": AttrSpec(_I), "start": AttrSpec(_I),
                                          "end": AttrSpec(_I), "step": AttrSpec(_I, 1)})
SPECS[Op.PAD] = OpSpec(("x",), _pad, {"pads": AttrSpec(_INTS), "value": AttrSpec(_F, 0.0)})
SPECS[Op.EXPAND] = OpSpec(("x",), _expand, {"shape": AttrSpec(_INTS)})
SPECS[Op.CAST] = OpSpec(("x",), _cast, {"dtype": AttrSpec(AttrKind.DTYPE)})
SPECS[Op.QUANTIZE] = OpSpec(("x",), _quantize, {
    "scale": AttrSpec(_F), "zero_point": AttrSpec(_I), "qmin": AttrSpec(_I), "qmax": AttrSpec(_I),
    "dtype": AttrSpec(AttrKind.DTYPE)})
SPECS[Op.DEQUANTIZE] = OpSpec(("x",), _dequantize, {"scale": AttrSpec(_F),
                                                    "zero_point": AttrSpec(_I)})
SPECS[Op.HOST] = OpSpec(("inputs",), _host, {"target": AttrSpec(AttrKind.STR),
                                             "args": AttrSpec(AttrKind.STR, "")},
                      variadic=True, optional=1)

from tessel.ir import qops  # noqa: E402  (registers the integer ops' specs into SPECS)

del qops
assert set(SPECS) == set(Op), f"ops without a spec: {set(Op) - set(SPECS)}"

ELEMENTWISE_UNARY = frozenset({Op.RELU, Op.CLAMP, Op.SIGMOID, Op.TANH, Op.GELU, Op.HARDSWISH,
                               Op.HARDSIGMOID, Op.SILU, Op.EXP, Op.LOG, Op.NEG, Op.ABS, Op.SQRT,
                               Op.RSQRT, Op.RECIPROCAL})
ELEMENTWISE_BINARY = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAXIMUM, Op.MINIMUM, Op.POW})
