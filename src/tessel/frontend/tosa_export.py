"""Tessel's quantised integer graph as a TOSA 1.0 flatbuffer (profile PRO-INT).

`export_tosa(graph)` maps each integer op of the golden model's IR to the TOSA operators that
compute the same integers (`MAPPING`, one table keyed by IR op: the mapping is read by this
exporter alone, so it stays here instead of adding a field to every op definition). The graph's
boundary `quantize` / `dequantize` stay outside: the TOSA graph's inputs are the quantised
input tensors and its outputs the integer tensors the model dequantises.

Numerics (docs/frontend.md, "TOSA"): Tessel's requantisation, TFLite's
MultiplyByQuantizedMultiplier, is a RESCALE with `rounding_mode=DOUBLE_ROUND` (extension
EXT-DOUBLEROUND) and shift `31 - shift`; the act_min / act_max clamp is a CLAMP after it; an
int8 LUT is a TABLE of the table's low bytes; a mean divides through its multiplier, so
it is a REDUCE_SUM of the zero-point-free inputs and a RESCALE. What TOSA's integer profile
cannot say is refused: `TesselExportError` naming the node, its op and the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tessel.errors import TesselConfigError, TesselExportError
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import Operator, RoundingMode, Tensor, TosaGraph, TosaOp, as_bytes
from tessel.ir import DType, Graph, Layout, Node, Op
from tessel.ops import Trait, definition

PROFILE = "PRO-INT"
DOUBLE_ROUND = "EXT-DOUBLEROUND"
INT16 = "EXT-INT16"
_TYPES = {DType.I8: T.INT8, DType.I16: T.INT16, DType.I32: T.INT32}
_IDENTITY_Q31 = 1 << 30  # a multiplier of one half: with shift s + 1, an exact shift by s


@dataclass
class TosaExport:
    """The exported graph and how its boundary maps to the Tessel graph's."""

    graph: TosaGraph
    inputs: tuple[str, ...]  # the Tessel values fed to the TOSA inputs (quantised inputs)
    outputs: tuple[str, ...]  # the Tessel values the TOSA outputs hold

    def to_bytes(self) -> bytes:
        return self.graph.write()


@dataclass
class _Builder:
    """The TOSA block under construction; Tessel value names are kept as tensor names."""

    graph: Graph
    ops: list[Operator] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    extensions: set[str] = field(default_factory=set)
    count: int = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}__t{self.count}"

    def tensor(self, name: str, shape: Sequence[int], dtype: T) -> str:
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype)
        if dtype is T.INT16:
            self.extensions.add(INT16)
        return name

    def const(self, hint: str, values: np.ndarray, dtype: T) -> str:
        name = self.fresh(hint)
        arr = np.asarray(values)
        self.tensors[name] = Tensor(name, arr.shape, dtype, as_bytes(arr, dtype))
        self.ops.append(Operator(TosaOp.CONST, (), (name,)))
        return name

    def shape(self, hint: str, values: Sequence[int]) -> str:
        name = self.fresh(hint)
        self.shapes[name] = tuple(int(v) for v in values)
        self.ops.append(Operator(TosaOp.CONST_SHAPE, (), (name,)))
        return name

    def get(self, name: str) -> Tensor:
        """The tensor `name`; a Tessel constant becomes a CONST on its first read."""
        if name not in self.tensors:
            value = self.graph.constant_value(name)
            if value is None:
                raise TesselExportError(f"TOSA export: %{name} has no TOSA definition")
            dtype = _value_dtype(self.graph, name)
            arr = np.asarray(value)
            self.tensors[name] = Tensor(name, arr.shape, dtype, as_bytes(arr, dtype))
            self.ops.append(Operator(TosaOp.CONST, (), (name,)))
        return self.tensors[name]

    def op(self, op: TosaOp, inputs: Sequence[str], out: str, shape: Sequence[int], dtype: T,
           loc: str = "", **attrs: object) -> str:
        for name in inputs:
            if name not in self.shapes:
                self.get(name)
        self.tensor(out, shape, dtype)
        self.ops.append(Operator(op, tuple(inputs), (out,), attrs, loc))
        return out

    def zp(self, hint: str, value: int, dtype: T) -> str:
        return self.const(f"{hint}_zp", np.array([value], _numpy(dtype)), dtype)

    def rescale(self, x: str, out: str, shape: Sequence[int], dtype: T, *, multiplier: object,
                shift: object, in_zp: int = 0, out_zp: int = 0, per_channel: bool = False,
                double_round: bool = True, loc: str = "") -> str:
        """RESCALE with Tessel's (q31, shift) multipliers: TOSA's shift is `31 - shift`. An
        int16 result with a zero point (TOSA's signed int16 RESCALE takes none) is rescaled to
        int32, the zero point ADDed, and RESCALEd by one to int16 (saturating, as Tessel's
        requantisation clamps)."""
        if dtype is T.INT16 and out_zp:
            wide = self.rescale(x, self.fresh(out), shape, T.INT32, multiplier=multiplier,
                                shift=shift, in_zp=in_zp, per_channel=per_channel,
                                double_round=double_round, loc=loc)
            z = self.const(f"{out}_zp", np.full((1,) * len(shape), out_zp, np.int32), T.INT32)
            wide = self.op(TosaOp.ADD, [wide, z], self.fresh(out), shape, T.INT32, loc)
            return self.rescale(wide, out, shape, T.INT16, multiplier=_IDENTITY_Q31, shift=1,
                                double_round=False, loc=loc)
        mult = np.atleast_1d(np.asarray(multiplier, np.int64)).astype(np.int32)
        tshift = (31 - np.atleast_1d(np.asarray(shift, np.int64))).astype(np.int8)
        in_t = self.get(x).dtype
        ops = [x, self.const(f"{out}_mult", mult, T.INT32),
               self.const(f"{out}_shift", tshift, T.INT8), self.zp(f"{out}_in", in_zp, in_t),
               self.zp(f"{out}_out", out_zp, dtype)]
        if double_round and np.any(tshift > 31):
            self.extensions.add(DOUBLE_ROUND)
        mode = RoundingMode.DOUBLE_ROUND if double_round else RoundingMode.SINGLE_ROUND
        return self.op(TosaOp.RESCALE, ops, out, shape, dtype, loc, scale32=True,
                       rounding_mode=mode, per_channel=per_channel, input_unsigned=False,
                       output_unsigned=False)

    def clamp(self, x: str, out: str, lo: int, hi: int, loc: str = "") -> str:
        t = self.get(x)
        info = np.iinfo(_numpy(t.dtype))
        if lo <= info.min and hi >= info.max:
            return self.op(TosaOp.IDENTITY, [x], out, t.shape, t.dtype, loc)
        npd = _numpy(t.dtype)
        return self.op(TosaOp.CLAMP, [x], out, t.shape, t.dtype, loc,
                       min_val=np.array(lo, npd).tobytes(), max_val=np.array(hi, npd).tobytes(),
                       nan_mode=1)

    def reshape(self, x: str, out: str, shape: Sequence[int], loc: str = "") -> str:
        t = self.get(x)
        return self.op(TosaOp.RESHAPE, [x, self.shape(f"{out}_shape", shape)], out, shape,
                       t.dtype, loc)

    def requant_out(self, acc: str, node: Node, mult: object, shift: object,
                    per_channel: bool) -> str:
        """RESCALE to the node's type (its out_zp) and its activation clamp: Tessel's REQUANT
        after the accumulator (bias already added)."""
        a = node.attr_map
        dtype = tosa_dtype(node)
        y = self.rescale(acc, self.fresh(node.name), node.type.shape, dtype, multiplier=mult,
                         shift=shift, out_zp=a["out_zp"], per_channel=per_channel,
                         loc=_loc(node))
        return self.clamp(y, node.name, a["act_min"], a["act_max"], _loc(node))


def _numpy(dtype: T) -> np.dtype:
    return {T.INT8: np.dtype(np.int8), T.INT16: np.dtype(np.int16),
            T.INT32: np.dtype(np.int32)}[dtype]


def _loc(node: Node) -> str:
    return f"{node.name} ({node.op.value})"


def refuse(node: Node, reason: str) -> TesselExportError:
    return TesselExportError(f"TOSA export: {node.described()} ({node.op.value}): {reason}")


def tosa_dtype(node: Node) -> T:
    if node.type.dtype not in _TYPES:
        raise refuse(node, f"{node.type.dtype.value} result (TOSA's integer profile holds "
                           "int8, int16 and int32 tensors)")
    return _TYPES[node.type.dtype]


# ---------------------------------------------------------------- windows


def _window_pads(node: Node, b: _Builder, x: str, kernel: Sequence[int], dilation: Sequence[int]
                 ) -> tuple[str, list[int]]:
    """TOSA [top, bottom, left, right] padding giving the node's output size exactly (TOSA
    requires the window to end on the last output; extra bottom / right padding is never read
    by a conv and never wins a max), slicing off input rows / columns no output reads."""
    pt, pl, pb, pr = node.attr("padding")
    stride = node.attr("stride")
    n, h, w, c = b.get(x).shape
    oh, ow = node.type.shape[1], node.type.shape[2]
    need_b = (oh - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1 - h - pt
    need_r = (ow - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1 - w - pl
    if need_b < 0 or need_r < 0:
        h2, w2 = h + min(need_b, 0), w + min(need_r, 0)
        sliced = b.fresh(f"{node.name}_in")
        b.op(TosaOp.SLICE, [x, b.shape(f"{sliced}_start", (0, 0, 0, 0)),
                            b.shape(f"{sliced}_size", (n, h2, w2, c))], sliced,
             (n, h2, w2, c), b.get(x).dtype, _loc(node))
        x = sliced
    return x, [pt, max(need_b, 0), pl, max(need_r, 0)]


def _nhwc(node: Node) -> None:
    if node.attr("layout") is not Layout.NHWC:
        raise refuse(node, "the exporter writes NHWC windows; run the layout pass first")


def _qconv2d(b: _Builder, node: Node) -> None:
    _nhwc(node)
    g = b.graph
    a = node.attr_map
    w = g.constant_value(node.inputs[1])
    if w is None or g.type_of(node.inputs[1]).dtype is not DType.I8:
        raise refuse(node, "the weights must be an int8 constant")
    o, kh, kw, ci = w.shape
    c = g.type_of(node.inputs[0]).shape[3]
    groups = a["groups"]
    x, pads = _window_pads(node, b, node.inputs[0], (kh, kw), a["dilation"])
    in_t = b.get(x).dtype
    bias = np.asarray(g.constant_value(node.inputs[2]), np.int32)
    if groups == 1:
        op, weight = TosaOp.CONV2D, w
    elif groups == c and o == c and ci == 1:
        op, weight = TosaOp.DEPTHWISE_CONV2D, w.transpose(1, 2, 0, 3)  # [KH, KW, C, 1]
    else:
        raise refuse(node, f"grouped convolution ({groups} groups of {ci} channels): TOSA "
                           "has no grouped CONV2D")
    inputs = [x, b.const(f"{node.name}_w", weight, T.INT8), b.const(f"{node.name}_b", bias, T.INT32),
              b.zp(f"{node.name}_x", a["in_zp"], in_t), b.zp(f"{node.name}_w", 0, T.INT8)]
    acc = b.op(op, inputs, b.fresh(f"{node.name}_acc"), node.type.shape, T.INT32, _loc(node),
               pad=pads, stride=list(a["stride"]), dilation=list(a["dilation"]),
               local_bound=False, acc_type=int(T.INT32))
    _requant_consts(b, node, acc)


def _requant_consts(b: _Builder, node: Node, acc: str) -> None:
    g = b.graph
    mult = np.asarray(g.constant_value(node.inputs[3]), np.int64)
    shift = np.asarray(g.constant_value(node.inputs[4]), np.int64)
    b.requant_out(acc, node, mult, shift, per_channel=mult.size > 1)


def _qlinear(b: _Builder, node: Node) -> None:
    """A 1x1 CONV2D over the rows of x (weights [N, K] are already OHWI [N, 1, 1, K])."""
    g = b.graph
    x_t = g.type_of(node.inputs[0])
    w = g.constant_value(node.inputs[1])
    if w is None or g.type_of(node.inputs[1]).dtype is not DType.I8:
        raise refuse(node, "the weights must be an int8 constant")
    n_out, k = w.shape
    rows = int(np.prod(x_t.shape[:-1]))
    x = b.reshape(node.inputs[0], b.fresh(f"{node.name}_rows"), (1, rows, 1, k), _loc(node))
    a = node.attr_map
    bias = np.asarray(g.constant_value(node.inputs[2]), np.int32)
    inputs = [x, b.const(f"{node.name}_w", w.reshape(n_out, 1, 1, k), T.INT8),
              b.const(f"{node.name}_b", bias, T.INT32),
              b.zp(f"{node.name}_x", a["in_zp"], b.get(x).dtype),
              b.zp(f"{node.name}_w", 0, T.INT8)]
    acc = b.op(TosaOp.CONV2D, inputs, b.fresh(f"{node.name}_acc"), (1, rows, 1, n_out), T.INT32,
               _loc(node), pad=[0, 0, 0, 0], stride=[1, 1], dilation=[1, 1], local_bound=False,
               acc_type=int(T.INT32))
    acc = b.reshape(acc, b.fresh(f"{node.name}_acc"), node.type.shape, _loc(node))
    _requant_consts(b, node, acc)


def _max_pool(b: _Builder, node: Node) -> None:
    _nhwc(node)
    if not node.type.dtype.is_int:
        raise refuse(node, "a float max pool (the integer profile pools integers)")
    a = node.attr_map
    dil = tuple(a.get("dilation") or (1, 1))
    if dil != (1, 1):
        raise refuse(node, f"dilation {list(dil)}: MAX_POOL2D has no dilation")
    x, pads = _window_pads(node, b, node.inputs[0], a["kernel"], dil)
    b.op(TosaOp.MAX_POOL2D, [x], node.name, node.type.shape, tosa_dtype(node), _loc(node),
         kernel=list(a["kernel"]), stride=list(a["stride"]), pad=pads, nan_mode=1)


def _qavg_pool(b: _Builder, node: Node) -> None:
    """Tessel's POOL AVG, `rounding_div(sum of the valid taps, their count)`: the sums are a
    DEPTHWISE_CONV2D of ones (padding adds 0), the division rounds half away from zero as
    INTDIV (truncating) of `sum +- count // 2` (SELECT on the sign); a RESCALE by one to int8 and
    the CLAMP."""
    _nhwc(node)
    a = node.attr_map
    x, pads = _window_pads(node, b, node.inputs[0], a["kernel"], (1, 1))
    t = b.get(x)
    n, h, w, c = t.shape
    kh, kw = a["kernel"]
    shape = node.type.shape
    sums = b.op(TosaOp.DEPTHWISE_CONV2D, [
        x, b.const(f"{node.name}_ones", np.ones((kh, kw, c, 1), np.int8), T.INT8),
        b.const(f"{node.name}_b", np.zeros(c, np.int32), T.INT32),
        b.zp(f"{node.name}_x", 0, t.dtype), b.zp(f"{node.name}_w", 0, T.INT8)],
        b.fresh(f"{node.name}_sum"), shape, T.INT32, _loc(node), pad=pads,
        stride=list(a["stride"]), dilation=[1, 1], local_bound=False, acc_type=int(T.INT32))
    if t.dtype is not T.INT8:
        raise refuse(node, "an int16 average pool (DEPTHWISE_CONV2D of int16 accumulates in 48 "
                           "bits)")
    rows = _valid_taps(h, shape[1], kh, a["stride"][0], a["padding"][0])
    cols = _valid_taps(w, shape[2], kw, a["stride"][1], a["padding"][1])
    count = (rows[:, None] * cols[None, :]).reshape(1, shape[1], shape[2], 1).astype(np.int32)
    cnt = b.const(f"{node.name}_count", count, T.INT32)
    half = b.const(f"{node.name}_half", count // 2, T.INT32)
    zero = b.const(f"{node.name}_zero", np.zeros((1, 1, 1, 1), np.int32), T.INT32)
    pos = b.op(TosaOp.GREATER_EQUAL, [sums, zero], b.fresh(f"{node.name}_pos"), shape, T.BOOL,
               _loc(node))
    up = b.op(TosaOp.ADD, [sums, half], b.fresh(f"{node.name}_up"), shape, T.INT32, _loc(node))
    down = b.op(TosaOp.SUB, [sums, half], b.fresh(f"{node.name}_dn"), shape, T.INT32, _loc(node))
    num = b.op(TosaOp.SELECT, [pos, up, down], b.fresh(f"{node.name}_num"), shape, T.INT32,
               _loc(node))
    q = b.op(TosaOp.INTDIV, [num, cnt], b.fresh(f"{node.name}_q"), shape, T.INT32, _loc(node))
    q = b.rescale(q, b.fresh(f"{node.name}_q"), shape, tosa_dtype(node),
                  multiplier=_IDENTITY_Q31, shift=1, double_round=False, loc=_loc(node))
    b.clamp(q, node.name, a["act_min"], a["act_max"], _loc(node))


def _valid_taps(size: int, out: int, k: int, stride: int, pad: int) -> np.ndarray:
    """Per output position, how many of the k taps fall inside the input."""
    idx = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :]
    return ((idx >= 0) & (idx < size)).sum(axis=1)


def _upsample(b: _Builder, node: Node) -> None:
    """Nearest upsampling by integer factors: RESIZE NEAREST with scale s / 1, offset
    -(s // 2) and border s - 1 - s // 2 (every output row oy reads input row oy // s)."""
    _nhwc(node)
    sy, sx = node.attr("scale")
    hy, hx = sy // 2, sx // 2
    b.op(TosaOp.RESIZE, [node.inputs[0], b.shape(f"{node.name}_scale", (sy, 1, sx, 1)),
                         b.shape(f"{node.name}_offset", (-hy, -hx)),
                         b.shape(f"{node.name}_border", (sy - 1 - hy, sx - 1 - hx))],
         node.name, node.type.shape, tosa_dtype(node), _loc(node), mode=1)


def _qsoftmax(b: _Builder, node: Node) -> None:
    """Tessel's softmax chain (docs/numerics.md): REDUCE_MAX; `x - max` rescaled to int16; the
    int16 exp TABLE (its 32-bit interpolation rounded back by a SINGLE_ROUND RESCALE, as the LUT
    does); REDUCE_SUM; the reciprocal `round(2^30 / s)` as INTDIV of `2^30 + s >> 1`;
    MUL (the product stays below 2^31: every term is at most the sum) and the output RESCALE."""
    a = node.attr_map
    table = b.graph.constant_value(node.inputs[1])
    x = node.inputs[0]
    shape = list(node.type.shape)
    axis = a["axis"] % len(shape)
    row = list(shape)
    row[axis] = 1
    loc = _loc(node)
    m = b.op(TosaOp.REDUCE_MAX, [x], b.fresh(f"{node.name}_max"), row, b.get(x).dtype, loc,
             axis=axis, nan_mode=1)
    diff = b.op(TosaOp.SUB, [_centred(b, node, x, 0, 0), _centred(b, node, m, 0, 0)],
                b.fresh(f"{node.name}_d"), shape, T.INT32, loc)
    d = b.rescale(diff, b.fresh(f"{node.name}_d"), shape, T.INT16, multiplier=a["sub_mult"],
                  shift=a["sub_shift"], out_zp=a["sub_zp"], loc=loc)
    interp = b.op(TosaOp.TABLE, [d, b.const(f"{node.name}_exp", np.asarray(table, np.int16),
                                            T.INT16)],
                  b.fresh(f"{node.name}_e"), shape, T.INT32, loc)
    e = b.rescale(interp, b.fresh(f"{node.name}_e"), shape, T.INT16, multiplier=_IDENTITY_Q31,
                  shift=-6, double_round=False, loc=loc)  # floor((v + 64) / 128)
    e32 = _centred(b, node, e, 0, 0)
    s = b.op(TosaOp.REDUCE_SUM, [e32], b.fresh(f"{node.name}_s"), row, T.INT32, loc, axis=axis)
    ones = (1,) * len(shape)

    def c(hint: str, value: int) -> str:
        return b.const(f"{node.name}_{hint}", np.full(ones, value, np.int32), T.INT32)

    half = b.op(TosaOp.ARITHMETIC_RIGHT_SHIFT, [s, c("one", 1)], b.fresh(f"{node.name}_h"), row,
                T.INT32, loc, round=False)
    num = b.op(TosaOp.ADD, [half, c("unit", 1 << a["recip_frac_bits"])],
               b.fresh(f"{node.name}_n"), row, T.INT32, loc)
    den = b.op(TosaOp.MAXIMUM, [s, c("min", 1)], b.fresh(f"{node.name}_den"), row, T.INT32, loc,
               nan_mode=1)
    q = b.op(TosaOp.INTDIV, [num, den], b.fresh(f"{node.name}_q"), row, T.INT32, loc)
    pos = b.op(TosaOp.GREATER, [s, c("zero", 0)], b.fresh(f"{node.name}_pos"), row, T.BOOL, loc)
    r = b.op(TosaOp.SELECT, [pos, q, c("max", 2**31 - 1)], b.fresh(f"{node.name}_r"), row,
             T.INT32, loc)
    shift0 = b.const(f"{node.name}_mshift", np.zeros((1,), np.int8), T.INT8)
    prod = b.op(TosaOp.MUL, [e32, r, shift0], b.fresh(f"{node.name}_p"), shape, T.INT32, loc)
    b.requant_out(prod, node, a["mul_mult"], a["mul_shift"], per_channel=False)


# ---------------------------------------------------------------- element-wise


def _centred(b: _Builder, node: Node, x: str, zp: int, left_shift: int) -> str:
    """int32 `(x - zp) << left_shift`, exactly (Tessel's ELTWISE input before its multiplier).

    A RESCALE by 2^30 with shift 30 - left_shift where its input range allows (TOSA requires
    |x - zp| < 2^(29 - left_shift)), as TFLite's legalisation writes it, so that other TOSA
    compilers see the quantised add / mul / mean they know; CAST, SUB and LOGICAL_LEFT_SHIFT
    otherwise (int16 with a zero point, or shifts too wide for the RESCALE)."""
    t = b.get(x)
    bits = 8 if t.dtype is T.INT8 else 16
    span = (1 << bits) - 1 if zp else 1 << (bits - 1)  # the largest |x - zp|
    if (t.dtype is T.INT8 or not zp) and span < 1 << (29 - left_shift):
        return b.rescale(x, b.fresh(f"{node.name}_c"), t.shape, T.INT32,
                         multiplier=_IDENTITY_Q31, shift=left_shift + 1, in_zp=zp,
                         double_round=False, loc=_loc(node))
    wide = b.fresh(f"{node.name}_c")
    b.op(TosaOp.CAST, [x], wide, t.shape, T.INT32, _loc(node))
    ones = (1,) * len(t.shape)
    if zp:
        z = b.const(f"{node.name}_zp", np.full(ones, zp, np.int32), T.INT32)
        wide = b.op(TosaOp.SUB, [wide, z], b.fresh(f"{node.name}_c"), t.shape, T.INT32, _loc(node))
    if left_shift:
        s = b.const(f"{node.name}_ls", np.full(ones, left_shift, np.int32), T.INT32)
        wide = b.op(TosaOp.LOGICAL_LEFT_SHIFT, [wide, s], b.fresh(f"{node.name}_c"), t.shape,
                    T.INT32, _loc(node))
    return wide


def _same_rank(b: _Builder, node: Node, x: str) -> str:
    shape, rank = b.get(x).shape, len(node.type.shape)
    if len(shape) == rank:
        return x
    return b.reshape(x, b.fresh(f"{node.name}_r"), (1,) * (rank - len(shape)) + shape, _loc(node))


def _qadd_sub(b: _Builder, node: Node) -> None:
    a = node.attr_map
    ls = a["left_shift"]
    xs = []
    for k, key in ((0, "a"), (1, "b")):
        v = _same_rank(b, node, node.inputs[k])
        v = _centred(b, node, v, a[f"{key}_zp"], ls)
        xs.append(b.rescale(v, b.fresh(f"{node.name}_{key}"), b.get(v).shape, T.INT32,
                            multiplier=a[f"{key}_multiplier"], shift=a[f"{key}_shift"],
                            loc=_loc(node)))
    op = TosaOp.ADD if node.op is Op.QADD else TosaOp.SUB
    r = b.op(op, xs, b.fresh(f"{node.name}_r"), node.type.shape, T.INT32, _loc(node))
    b.requant_out(r, node, a["out_multiplier"], a["out_shift"], per_channel=False)


def _qmul(b: _Builder, node: Node) -> None:
    a = node.attr_map
    xs = [_centred(b, node, _same_rank(b, node, node.inputs[k]), a[f"{key}_zp"], 0)
          for k, key in ((0, "a"), (1, "b"))]
    shift = b.const(f"{node.name}_mshift", np.zeros((1,), np.int8), T.INT8)
    r = b.op(TosaOp.MUL, [*xs, shift], b.fresh(f"{node.name}_r"), node.type.shape, T.INT32,
             _loc(node))
    b.requant_out(r, node, a["out_multiplier"], a["out_shift"], per_channel=False)


def _requantize(b: _Builder, node: Node) -> None:
    """One RESCALE with the input zero point (TOSA takes a zero point on int8 inputs only:
    int16 is centred first)."""
    a = node.attr_map
    x, zp = node.inputs[0], a["in_zp"]
    if zp and b.get(x).dtype is not T.INT8:
        x, zp = _centred(b, node, x, zp, 0), 0
    y = b.rescale(x, b.fresh(node.name), node.type.shape, tosa_dtype(node),
                  multiplier=a["multiplier"], shift=a["shift"], in_zp=zp, out_zp=a["out_zp"],
                  loc=_loc(node))
    b.clamp(y, node.name, a["act_min"], a["act_max"], _loc(node))


def _lut(b: _Builder, node: Node) -> None:
    """int8: TABLE of the table's entries (Tessel's int8 LUT holds int8). int16: TABLE's 32-bit
    interpolation `(base << 7) + slope * frac`, rounded back as Tessel's LUT rounds it
    (`floor((v + 64) / 128)`, a SINGLE_ROUND RESCALE); TOSA requires each slope to fit int16
    where Tessel wraps it, so a table with a wider step is refused."""
    table = b.graph.constant_value(node.inputs[1])
    if table is None:
        raise refuse(node, "the table must be a constant")
    t = np.asarray(table, np.int64)
    if node.type.dtype is DType.I8:
        b.op(TosaOp.TABLE, [node.inputs[0], b.const(f"{node.name}_table", t.astype(np.int8),
                                                    T.INT8)],
             node.name, node.type.shape, T.INT8, _loc(node))
        return
    if np.any(np.abs(np.diff(t)) > 32767):
        raise refuse(node, "an int16 table step wider than int16 (TOSA's TABLE requires the "
                           "slope to fit; Tessel's LUT wraps it)")
    shape = node.type.shape
    interp = b.op(TosaOp.TABLE, [node.inputs[0], b.const(f"{node.name}_table",
                                                         t.astype(np.int16), T.INT16)],
                  b.fresh(f"{node.name}_i"), shape, T.INT32, _loc(node))
    b.rescale(interp, node.name, shape, T.INT16, multiplier=_IDENTITY_Q31, shift=-6,
              double_round=False, loc=_loc(node))

def _qmean(b: _Builder, node: Node) -> None:
    a = node.attr_map
    x_t = b.graph.type_of(node.inputs[0])
    v = _centred(b, node, node.inputs[0], a["in_zp"], 0)
    shape = list(x_t.shape)
    for ax in sorted({ax % len(shape) for ax in a["axes"]}):
        shape[ax] = 1
        v = b.op(TosaOp.REDUCE_SUM, [v], b.fresh(f"{node.name}_sum"), shape, T.INT32, _loc(node),
                 axis=ax)
    if tuple(shape) != node.type.shape:
        v = b.reshape(v, b.fresh(f"{node.name}_sum"), node.type.shape, _loc(node))
    b.requant_out(v, node, a["multiplier"], a["shift"], per_channel=False)


def _qmatmul(b: _Builder, node: Node) -> None:
    a = node.attr_map
    g = b.graph
    sa, sb = g.type_of(node.inputs[0]).shape, g.type_of(node.inputs[1]).shape
    if sa[:-2] != sb[:-2]:
        raise refuse(node, "broadcast batch dimensions (TOSA MATMUL takes equal batches)")
    batch = int(np.prod(sa[:-2]))
    x = b.reshape(node.inputs[0], b.fresh(node.name), (batch, *sa[-2:]), _loc(node))
    y = b.reshape(node.inputs[1], b.fresh(node.name), (batch, *sb[-2:]), _loc(node))
    in_t = b.get(x).dtype
    acc = b.op(TosaOp.MATMUL, [x, y, b.zp(f"{node.name}_a", a["a_zp"], in_t),
                               b.zp(f"{node.name}_b", a["b_zp"], b.get(y).dtype)],
               b.fresh(f"{node.name}_acc"), (batch, sa[-2], sb[-1]), T.INT32, _loc(node))
    acc = b.reshape(acc, b.fresh(f"{node.name}_acc"), node.type.shape, _loc(node))
    b.requant_out(acc, node, a["multiplier"], a["shift"], per_channel=False)


# ---------------------------------------------------------------- data movement


def _reshape(b: _Builder, node: Node) -> None:
    tosa_dtype(node)
    b.reshape(node.inputs[0], node.name, node.type.shape, _loc(node))


def _transpose(b: _Builder, node: Node) -> None:
    b.op(TosaOp.TRANSPOSE, [node.inputs[0]], node.name, node.type.shape, tosa_dtype(node),
         _loc(node), perms=list(node.attr("perm")))


def _concat(b: _Builder, node: Node) -> None:
    axis = node.attr("axis") % len(node.type.shape)
    b.op(TosaOp.CONCAT, list(node.inputs), node.name, node.type.shape, tosa_dtype(node),
         _loc(node), axis=axis)


def _slice(b: _Builder, node: Node) -> None:
    a = node.attr_map
    if a["step"] != 1:
        raise refuse(node, f"step {a['step']}: TOSA SLICE takes contiguous ranges")
    shape = b.graph.type_of(node.inputs[0]).shape
    axis = a["axis"] % len(shape)
    start = [0] * len(shape)
    start[axis] = range(shape[axis])[slice(a["start"], a["end"])].start if node.type.shape[axis] \
        else 0
    b.op(TosaOp.SLICE, [node.inputs[0], b.shape(f"{node.name}_start", start),
                        b.shape(f"{node.name}_size", node.type.shape)], node.name,
         node.type.shape, tosa_dtype(node), _loc(node))


def _pad(b: _Builder, node: Node) -> None:
    dtype = tosa_dtype(node)
    value = node.attr("value")
    if value != int(value):
        raise refuse(node, f"pad value {value} is not an integer")
    b.op(TosaOp.PAD, [node.inputs[0], b.shape(f"{node.name}_pads", node.attr("pads")),
                      b.const(f"{node.name}_value", np.array([int(value)], _numpy(dtype)), dtype)],
         node.name, node.type.shape, dtype, _loc(node))


_Rule = Callable[[_Builder, Node], None]
# the IR ops that are one TOSA operator both ways (the importer builds them from this table)
IR_OF: Mapping[TosaOp, Op] = {
    TosaOp.RESHAPE: Op.RESHAPE, TosaOp.TRANSPOSE: Op.TRANSPOSE, TosaOp.CONCAT: Op.CONCAT,
    TosaOp.SLICE: Op.SLICE, TosaOp.PAD: Op.PAD, TosaOp.MAX_POOL2D: Op.MAX_POOL2D,
    TosaOp.TABLE: Op.LUT, TosaOp.RESIZE: Op.UPSAMPLE_NEAREST,
}
MAPPING: Mapping[Op, _Rule] = {
    Op.QCONV2D: _qconv2d, Op.QLINEAR: _qlinear, Op.QMATMUL: _qmatmul, Op.QADD: _qadd_sub,
    Op.QSUB: _qadd_sub, Op.QMUL: _qmul, Op.REQUANTIZE: _requantize, Op.QMEAN: _qmean,
    Op.QAVG_POOL2D: _qavg_pool, Op.QSOFTMAX: _qsoftmax,
    **{IR_OF[t]: rule for t, rule in ((TosaOp.RESHAPE, _reshape), (TosaOp.TRANSPOSE, _transpose),
                                      (TosaOp.CONCAT, _concat), (TosaOp.SLICE, _slice),
                                      (TosaOp.PAD, _pad), (TosaOp.MAX_POOL2D, _max_pool),
                                      (TosaOp.TABLE, _lut), (TosaOp.RESIZE, _upsample))},
}
REFUSED: Mapping[Op, str] = {
    Op.QLAYER_NORM: "its inverse square root (Tessel's UNARY RSQRT fixed-point iteration) has "
                    "no TOSA integer operator (TOSA's RSQRT is floating point)",
    Op.HOST: "an op the compiler runs on the host has no TOSA form",
}


def export_tosa(graph: Graph) -> TosaExport:
    """The TOSA graph of an integer graph (`QuantizedModel.graph`); TesselExportError for an op
    TOSA's integer profile cannot express, naming the op and why."""
    b = _Builder(graph)
    inputs, outputs = _boundary(graph)
    for name in inputs:
        b.tensor(name, graph.type_of(name).shape, _value_dtype(graph, name))
    for node in graph.nodes:
        if node.is_constant or _boundary_op(node):
            if node.is_constant and not node.type.dtype.is_int:
                raise refuse(node, "a float constant (the integer profile holds integers)")
            continue
        rule = MAPPING.get(node.op)
        if rule is None:
            reason = REFUSED.get(node.op, "no TOSA mapping (not an integer op of the golden "
                                          "model, or a float op the quantiser left)")
            raise refuse(node, reason)
        rule(b, node)
    tosa = TosaGraph(b.ops, b.tensors, b.shapes, list(inputs), list(outputs), PROFILE,
                     tuple(sorted(b.extensions)))
    return TosaExport(tosa, inputs, outputs)


def _value_dtype(graph: Graph, name: str) -> T:
    dtype = graph.type_of(name).dtype
    if dtype not in _TYPES:
        raise TesselExportError(f"TOSA export: %{name} is {dtype.value} (TOSA's integer profile "
                                "holds int8, int16 and int32 tensors)")
    return _TYPES[dtype]


def _boundary(graph: Graph) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The integer values a TOSA graph exchanges: each quantised graph input (a float input
    read only by `quantize` nodes, or an integer input) and each graph output (before its
    `dequantize`)."""
    users = graph.users
    inputs: list[str] = []
    for v in graph.inputs:
        if v.type.dtype.is_int:
            inputs.append(v.name)
            continue
        readers = users.get(v.name, ())
        if not readers or not all(_boundary_op(n) for n in readers):
            bad = next((n for n in readers if not _boundary_op(n)), None)
            what = f"read by {bad.described()} ({bad.op.value})" if bad else "unused"
            raise TesselExportError(f"TOSA export: float input %{v.name} is {what}; the TOSA "
                                    "graph takes the quantised inputs only")
        inputs.extend(n.name for n in readers)
    outputs = []
    for name in graph.outputs:
        node = graph.producer(name)
        outputs.append(node.inputs[0] if node is not None and _boundary_op(node) else name)
    return tuple(inputs), tuple(outputs)


def _boundary_op(node: Node) -> bool:
    """The model's boundary `quantize` / `dequantize` (outside the TOSA graph)."""
    return definition(node.op).has(Trait.BOUNDARY)


def mlir_text(path: str | Path) -> str:
    """The TOSA MLIR text of a .tosa file, through `tosa-opt --tosa-deserialize` (the
    exporter writes flatbuffers itself; only this text form needs the tool)."""
    tool = shutil.which("tosa-opt") or _beside_python("tosa-opt")
    if tool is None:
        raise TesselConfigError("MLIR text needs tosa-opt on PATH (pip install tosa-tools)")
    with tempfile.NamedTemporaryFile("w", suffix=".mlir") as empty:
        done = subprocess.run([tool, f"--tosa-deserialize=tosa-flatbuffer-filename={path}",
                               empty.name], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TesselExportError(f"tosa-opt could not read {path}: {done.stderr.strip()[:500]}")
    return done.stdout


def _beside_python(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else None
