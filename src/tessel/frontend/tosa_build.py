"""The TOSA exporter's block under construction (tessel.frontend.tosa_export): tensors,
operators, shapes and the extensions they need, with the RESCALE / CLAMP / RESHAPE helpers the
op rules share and the window padding TOSA requires."""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tessel.errors import TesselExportError
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import Operator, RoundingMode, Tensor, TosaOp, as_bytes
from tessel.ir import DType, Graph, Layout, Node
from tessel.isa.fixedpoint import Rounding, reduce_multiplier
from tessel.ops.quantise import rounding_of

PROFILE = "PRO-INT"
DOUBLE_ROUND = "EXT-DOUBLEROUND"
INT16 = "EXT-INT16"
TYPES = {DType.I8: T.INT8, DType.I16: T.INT16, DType.I32: T.INT32}
IDENTITY_Q31 = 1 << 30  # a multiplier of one half: with shift s + 1, an exact shift by s


@dataclass
class Builder:
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
            dtype = value_dtype(self.graph, name)
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
        return self.const(f"{hint}_zp", np.array([value], numpy_dtype(dtype)), dtype)

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
            return self.rescale(wide, out, shape, T.INT16, multiplier=IDENTITY_Q31, shift=1,
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

    def rescale_wide(self, x: str, out: str, shape: Sequence[int], dtype: T, *,
                     multiplier: object, shift: object, out_zp: int = 0,
                     per_channel: bool = False, loc: str = "") -> str:
        """RESCALE of an INT48 accumulator with Tessel's wide rule (docs/numerics.md): the
        16-bit multiplier ``reduce_multiplier(q31)`` (``scale32 = false``), TOSA shift
        ``15 - shift``, one rounding."""
        mult = reduce_multiplier(np.atleast_1d(np.asarray(multiplier, np.int64)))
        tshift = (15 - np.atleast_1d(np.asarray(shift, np.int64))).astype(np.int8)
        ops = [x, self.const(f"{out}_mult", mult.astype(np.int16), T.INT16),
               self.const(f"{out}_shift", tshift, T.INT8),
               self.const(f"{out}_in_zp", np.zeros(1, np.int64), T.INT48),
               self.zp(f"{out}_out", out_zp, dtype)]
        return self.op(TosaOp.RESCALE, ops, out, shape, dtype, loc, scale32=False,
                       rounding_mode=RoundingMode.SINGLE_ROUND, per_channel=per_channel,
                       input_unsigned=False, output_unsigned=False)

    def clamp(self, x: str, out: str, lo: int, hi: int, loc: str = "") -> str:
        t = self.get(x)
        info = np.iinfo(numpy_dtype(t.dtype))
        if lo <= info.min and hi >= info.max:
            return self.op(TosaOp.IDENTITY, [x], out, t.shape, t.dtype, loc)
        npd = numpy_dtype(t.dtype)
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
        after the accumulator (bias already added), rounding as the node does."""
        a = node.attr_map
        dtype = tosa_dtype(node)
        if self.get(acc).dtype is T.INT48:
            y = self.rescale_wide(acc, self.fresh(node.name), node.type.shape, dtype,
                                  multiplier=mult, shift=shift, out_zp=a["out_zp"],
                                  per_channel=per_channel, loc=loc_of(node))
            return self.clamp(y, node.name, a["act_min"], a["act_max"], loc_of(node))
        y = self.rescale(acc, self.fresh(node.name), node.type.shape, dtype, multiplier=mult,
                         shift=shift, out_zp=a["out_zp"], per_channel=per_channel,
                         double_round=rounding_of(a) == Rounding.DOUBLE, loc=loc_of(node))
        return self.clamp(y, node.name, a["act_min"], a["act_max"], loc_of(node))


def numpy_dtype(dtype: T) -> np.dtype:
    return {T.INT8: np.dtype(np.int8), T.INT16: np.dtype(np.int16),
            T.INT32: np.dtype(np.int32)}[dtype]


def loc_of(node: Node) -> str:
    return f"{node.name} ({node.op.value})"


def plan_location(name: str, tag: str, ints: Sequence[int]) -> str:
    """The location of every operator of a planned chain (layer norm, softmax): the node, the
    op and the integers the chain is written from (its plan's steps), which the importer reads
    back and checks the chain against."""
    return f"{name} ({tag} {','.join(str(int(v)) for v in ints)})"


def refuse(node: Node, reason: str) -> TesselExportError:
    return TesselExportError(f"TOSA export: {node.described()} ({node.op.value}): {reason}")


def tosa_dtype(node: Node) -> T:
    if node.type.dtype not in TYPES:
        raise refuse(node, f"{node.type.dtype.value} result (TOSA's integer profile holds "
                           "int8, int16 and int32 tensors)")
    return TYPES[node.type.dtype]


def window_pads(node: Node, b: Builder, x: str, kernel: Sequence[int], dilation: Sequence[int]
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
             (n, h2, w2, c), b.get(x).dtype, loc_of(node))
        x = sliced
    return x, [pt, max(need_b, 0), pl, max(need_r, 0)]


def nhwc(node: Node) -> None:
    if node.attr("layout") is not Layout.NHWC:
        raise refuse(node, "the exporter writes NHWC windows; run the layout pass first")


def centred(b: Builder, node: Node, x: str, zp: int, left_shift: int) -> str:
    """int32 `(x - zp) << left_shift`, exactly (Tessel's ELTWISE input before its multiplier).

    A RESCALE by 2^30 with shift 30 - left_shift where its input range allows (TOSA requires
    |x - zp| < 2^(29 - left_shift)), as TFLite's legalisation writes it, so that other TOSA
    compilers see the quantised add / mul / mean they know; CAST, SUB and LOGICAL_LEFT_SHIFT
    otherwise (int16 with a zero point, or shifts too wide for the RESCALE)."""
    return centred_at(b, x, zp, left_shift, node.name, loc_of(node))


def centred_at(b: Builder, x: str, zp: int, left_shift: int, name: str, loc: str) -> str:
    """`centred` with the tensor names' hint and the location given."""
    t = b.get(x)
    bits = 8 if t.dtype is T.INT8 else 16
    span = (1 << bits) - 1 if zp else 1 << (bits - 1)  # the largest |x - zp|
    if (t.dtype is T.INT8 or not zp) and span < 1 << (29 - left_shift):
        return b.rescale(x, b.fresh(f"{name}_c"), t.shape, T.INT32,
                         multiplier=IDENTITY_Q31, shift=left_shift + 1, in_zp=zp,
                         double_round=False, loc=loc)
    wide = b.fresh(f"{name}_c")
    b.op(TosaOp.CAST, [x], wide, t.shape, T.INT32, loc)
    ones = (1,) * len(t.shape)
    if zp:
        z = b.const(f"{name}_zp", np.full(ones, zp, np.int32), T.INT32)
        wide = b.op(TosaOp.SUB, [wide, z], b.fresh(f"{name}_c"), t.shape, T.INT32, loc)
    if left_shift:
        s = b.const(f"{name}_ls", np.full(ones, left_shift, np.int32), T.INT32)
        wide = b.op(TosaOp.LOGICAL_LEFT_SHIFT, [wide, s], b.fresh(f"{name}_c"), t.shape,
                    T.INT32, loc)
    return wide


def same_rank(b: Builder, node: Node, x: str) -> str:
    shape, rank = b.get(x).shape, len(node.type.shape)
    if len(shape) == rank:
        return x
    return b.reshape(x, b.fresh(f"{node.name}_r"), (1,) * (rank - len(shape)) + shape, loc_of(node))


def value_dtype(graph: Graph, name: str) -> T:
    dtype = graph.type_of(name).dtype
    if dtype not in TYPES:
        raise TesselExportError(f"TOSA export: %{name} is {dtype.value} (TOSA's integer profile "
                                "holds int8, int16 and int32 tensors)")
    return TYPES[dtype]
