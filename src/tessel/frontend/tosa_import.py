"""An integer TOSA 1.0 graph (`model.tosa`) as Tessel's integer IR, without re-quantising.

TOSA spells a quantised layer as several operators with int32 values between them (CONV2D ->
RESCALE -> CLAMP; RESCALE to int32 -> RESCALE -> ADD -> RESCALE for a quantised add). The
importer walks the operators in order and keeps each int32 intermediate symbolic (the symbols
and the rules that build and close them: `tosa_patterns`), so that the RESCALE to int8 / int16
(and a CLAMP right after it) closes one Tessel integer op: qconv2d, qmatmul, qadd / qsub, qmul,
qmean, qavg_pool2d or requantize. The exporter's layer-norm and softmax chains (operators
located at their plan) import as one qlayer_norm / qsoftmax once checked against the chain the
plan writes (`tosa_planned`); tosa-converter-for-tflite's int8 and int16 softmax chains
import as one host-run qsoftmax_tosa / qsoftmax16_tosa (`tosa_softmax`). Data movement,
MAX_POOL2D, RESIZE and int8 TABLE map one to one (`tosa_export.IR_OF`). A RESCALE is Tessel's
requantisation (MultiplyByQuantizedMultiplier) when it rounds DOUBLE_ROUND, or SINGLE_ROUND
with no right shift beyond 31 bits, or the single-rounding mode of a qconv2d / qadd / qsub /
qmul (their `rounding` attribute) when it closes one; anything else is refused with the
operator and the reason (TesselFormatError), as is any int32 value that reaches a graph output.

The Tessel graph takes float inputs that `quantize` (scale 1, zero point 0) turns into the TOSA
inputs, and `dequantize`s (scale 1) its outputs (a converter's float quantise / dequantise
operators become the `quantize` / `dequantize` they spell, with or without the MUL of a
scale of 1 and the ADD / SUB of a zero point of 0): `tosa_module` wraps it as a
QDQModule, so `tessel compile model.tosa` lowers nothing and compiles it as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tessel.errors import TesselFormatError
from tessel.frontend.contract import check_elements, node_boundary
from tessel.frontend.tosa_export import IR_OF
from tessel.frontend.tosa_patterns import (
    Symbol,
    _Boundary,
    _cast,
    _Centred,
    _clamp,
    _conv,
    _dtype,
    _greater_equal,
    _intdiv,
    _matmul,
    _mul,
    _Pending,
    _reduce_sum,
    _rescale,
    _resize,
    _select,
    _shift_left,
    _sub_add,
    _valid_taps,
    _window,
    dequantize,
    is_quantize,
    quantize,
)
from tessel.frontend.tosa_planned import import_planned, is_planned
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import Operator, TosaGraph, TosaOp, read
from tessel.frontend.tosa_softmax import import_softmax
from tessel.ir import DType, Graph, GraphBuilder, Op, TensorType
from tessel.ir.builder import sanitize_name


@dataclass
class _Importer:
    g: TosaGraph
    b: GraphBuilder
    values: dict[str, Symbol] = field(default_factory=dict)
    users: dict[str, list[Operator]] = field(default_factory=dict)
    skip: set[int] = field(default_factory=set)

    # ------------------------------------------------------------ operands

    def const(self, name: str, what: str) -> np.ndarray:
        t = self.g.tensors.get(name)
        if t is None or t.data is None:
            raise TesselFormatError(f"TOSA {what}: %{name} must be a constant")
        return t.array()

    def ints(self, name: str, what: str) -> np.ndarray:
        """A constant of integers (a multiplier, shift or zero point)."""
        v = self.const(name, what)
        if v.dtype.kind not in "iu":
            raise TesselFormatError(f"TOSA {what}: %{name} must hold integers, got {v.dtype}")
        return v

    def scalar(self, name: str, what: str) -> int:
        v = self.ints(name, what)
        if v.size != 1:
            raise TesselFormatError(f"TOSA {what}: %{name} must hold one value, got {v.size}")
        return int(v.reshape(-1)[0])

    def shape_of(self, name: str) -> tuple[int, ...]:
        if name in self.g.shapes:
            return self.g.shapes[name]
        raise TesselFormatError(f"TOSA: shape operand %{name} is not a CONST_SHAPE")

    def value(self, name: str, what: str) -> str:
        """The Tessel value of an int8 / int16 / int32 TOSA tensor (constants materialised)."""
        v = self.values.get(name)
        if v is None and name in self.g.tensors and self.g.tensors[name].data is not None:
            arr = self.const(name, what)
            dtype = _dtype(self.g.tensors[name].dtype, name)
            v = self.values[name] = self.b.constant(arr.astype(dtype.numpy), sanitize_name(name))
        if not isinstance(v, str):
            raise TesselFormatError(f"TOSA {what}: %{name} is "
                                    f"{'undefined' if v is None else 'an int32 intermediate'} "
                                    "where Tessel needs a tensor")
        return v

    def centred(self, name: str, what: str) -> _Centred:
        v = self.values.get(name)
        if isinstance(v, _Centred):
            return v
        if isinstance(v, str) and self.b.type_of(v).dtype is DType.I32:
            return _Centred(v)
        raise TesselFormatError(f"TOSA {what}: %{name} is not an int32 value Tessel can import "
                                "here (expected CAST / SUB / LOGICAL_LEFT_SHIFT of a tensor)")

    def only_user(self, name: str, *ops: TosaOp) -> Operator | None:
        users = self.users.get(name, [])
        if len(users) == 1 and users[0].op in ops and name not in self.g.outputs:
            return users[0]
        return None

    # ------------------------------------------------------------ the walk

    def run(self) -> Graph:
        for op in self.g.operators:
            for name in op.inputs:
                self.users.setdefault(name, []).append(op)
        with node_boundary("TOSA graph inputs"):
            self.inputs()
        for k, op in enumerate(self.g.operators):
            if k in self.skip:
                continue
            rule = RULES.get(op.op)
            where = f"TOSA {op.op.name} %{op.outputs[0]}" if op.outputs else f"TOSA {op.op.name}"
            if is_planned(op.location):  # an exporter's layer norm / softmax chain
                rule = import_planned
            elif rule is None:
                raise TesselFormatError(f"{where}: not an integer operator Tessel imports")
            with node_boundary(where):
                if not op.outputs and op.op not in (TosaOp.CONST, TosaOp.CONST_SHAPE):
                    raise TesselFormatError("an operator without outputs")
                rule(self, op, k)
        with node_boundary("TOSA graph outputs"):
            return self.outputs()

    def inputs(self) -> None:
        for name in self.g.inputs:
            t = self.g.tensors.get(name)
            if t is None:
                raise TesselFormatError(f"TOSA graph input %{name} has no tensor")
            check_elements(t.shape, f"TOSA input '{name}'")
            x = self.b.input(sanitize_name(name), TensorType(t.shape, DType.F32))
            if t.dtype is T.FP32:
                self.values[name] = _Boundary(x, "float")
                continue
            self.values[name] = quantize(self, x, f"{name}_q", _dtype(t.dtype, name))

    def outputs(self) -> Graph:
        outs = []
        for name in self.g.outputs:
            b = self.values.get(name)
            if isinstance(b, _Boundary) and b.stage in ("cast", "centred"):
                # scale 1: the converter writes no MUL by the scale after CAST (and SUB)
                outs.append(dequantize(self, b.src, f"{sanitize_name(name)}_out", 1.0, b.zp))
                continue
            v = self.value(name, "graph output")
            outs.append(v if self.b.type_of(v).dtype is DType.F32
                        else dequantize(self, v, f"{name}_out"))
        return self.b.build(outs)

    def define(self, op: Operator, symbol: Symbol) -> None:
        self.values[op.outputs[0]] = symbol

    def add(self, op: Operator, kind: Op, inputs: Sequence[str], attrs: Mapping[str, Any]) -> str:
        name = self.b.add(kind, list(inputs), dict(attrs), name=sanitize_name(op.outputs[0]))
        declared = self.g.tensors.get(op.outputs[0])
        if declared is not None and tuple(declared.shape) != self.b.type_of(name).shape:
            raise TesselFormatError(f"TOSA {op.op.name} %{op.outputs[0]}: declared shape "
                                    f"{list(declared.shape)}, computed "
                                    f"{list(self.b.type_of(name).shape)}")
        self.define(op, name)
        return name


# ---------------------------------------------------------------- rules


def _noop(im: _Importer, op: Operator, k: int) -> None:
    """CONST / CONST_SHAPE: read where used."""


def _reshape(im: _Importer, op: Operator, k: int) -> None:
    shape = im.shape_of(op.inputs[1])
    src = im.values.get(op.inputs[0])
    t = im.g.tensors.get(op.inputs[0])
    if src is None and t is not None and t.data is not None:  # a constant, reshaped as one
        im.g.tensors[op.outputs[0]] = replace(t, name=op.outputs[0], shape=tuple(shape))
        return
    if isinstance(src, _Pending):
        im.define(op, replace(src, shape=tuple(shape)))
        return
    im.add(op, IR_OF[op.op], [im.value(op.inputs[0], f"RESHAPE %{op.outputs[0]}")],
           {"shape": tuple(shape)})


def _identity(im: _Importer, op: Operator, k: int) -> None:
    im.define(op, im.value(op.inputs[0], f"IDENTITY %{op.outputs[0]}"))


def _transpose(im: _Importer, op: Operator, k: int) -> None:
    im.add(op, IR_OF[op.op], [im.value(op.inputs[0], f"TRANSPOSE %{op.outputs[0]}")],
           {"perm": tuple(op.attrs["perms"])})


def _concat(im: _Importer, op: Operator, k: int) -> None:
    ins = [im.value(n, f"CONCAT %{op.outputs[0]}") for n in op.inputs]
    im.add(op, IR_OF[op.op], ins, {"axis": op.attrs["axis"]})


def _slice(im: _Importer, op: Operator, k: int) -> None:
    x = im.value(op.inputs[0], f"SLICE %{op.outputs[0]}")
    start, size = im.shape_of(op.inputs[1]), im.shape_of(op.inputs[2])
    for axis, (s0, n) in enumerate(zip(start, size, strict=True)):
        if s0 != 0 or n != im.b.type_of(x).shape[axis]:
            x = im.b.add(IR_OF[op.op], [x], {"axis": axis, "start": s0, "end": s0 + n, "step": 1},
                         name=sanitize_name(op.outputs[0]))
    im.define(op, x)


def _pad(im: _Importer, op: Operator, k: int) -> None:
    what = f"PAD %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    value = im.scalar(op.inputs[2], what) if len(op.inputs) > 2 else 0
    im.add(op, IR_OF[op.op], [x], {"pads": tuple(im.shape_of(op.inputs[1])), "value": float(value)})


def _max_pool(im: _Importer, op: Operator, k: int) -> None:
    x = im.value(op.inputs[0], f"MAX_POOL2D %{op.outputs[0]}")
    im.add(op, IR_OF[op.op], [x], {**_window(op), "kernel": tuple(op.attrs["kernel"])})


def _avg_pool(im: _Importer, op: Operator, k: int) -> None:
    """TOSA's int8 AVG_POOL2D where every window has an odd count of valid taps is Tessel's POOL
    AVG: the sum of `x - zp` over the valid taps times a reciprocal multiplier of their count
    rounds to the nearest integer as `rounding_div` does, and with an odd count no quotient
    ends in one half, where the two differ (TOSA rounds half up, Tessel away from zero); with the
    input's zero point on the output (TFLite's average pool keeps its quantisation) the zero
    points cancel."""
    what = f"AVG_POOL2D %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    in_zp, out_zp = im.scalar(op.inputs[1], what), im.scalar(op.inputs[2], what)
    if im.b.type_of(x).dtype is not DType.I8 or in_zp != out_zp:
        raise TesselFormatError(f"TOSA {what}: an int8 average with the input's zero point on "
                                f"the output (got {in_zp} in, {out_zp} out) is Tessel's average "
                                "pool; another is not")
    attrs = {**_window(op), "kernel": tuple(op.attrs["kernel"]), "act_min": -128, "act_max": 127}
    name = im.add(op, Op.QAVG_POOL2D, [x], attrs)
    (_, h, w, _), (_, oh, ow, _) = im.b.type_of(x).shape, im.b.type_of(name).shape
    (kh, kw), (sh, sw), (pt, pl, _, _) = attrs["kernel"], attrs["stride"], attrs["padding"]
    counts = np.outer(_valid_taps(h, oh, kh, sh, pt), _valid_taps(w, ow, kw, sw, pl))
    if np.any(counts % 2 == 0):
        raise TesselFormatError(f"TOSA {what}: a window of {int(counts[counts % 2 == 0][0])} "
                                "valid taps (an even count: a quotient ending in one half "
                                "rounds up in TOSA, away from zero in Tessel's average pool)")


def _table(im: _Importer, op: Operator, k: int) -> None:
    what = f"TABLE %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    table = im.ints(op.inputs[1], what)
    if im.b.type_of(x).dtype is not DType.I8 or table.shape != (256,):
        raise TesselFormatError(f"TOSA {what}: int8 tables of 256 entries only (an int16 "
                                "TABLE's 32-bit interpolated result has no Tessel op)")
    t = im.b.constant(table.astype(np.int8), sanitize_name(op.inputs[1]))
    im.add(op, IR_OF[op.op], [x, t], {})

RULES: Mapping[TosaOp, Callable[[_Importer, Operator, int], None]] = {
    TosaOp.CONST: _noop, TosaOp.CONST_SHAPE: _noop,
    TosaOp.CONV2D: _conv, TosaOp.DEPTHWISE_CONV2D: _conv, TosaOp.MATMUL: _matmul,
    TosaOp.REDUCE_SUM: _reduce_sum, TosaOp.CAST: _cast, TosaOp.SUB: _sub_add,
    TosaOp.ADD: _sub_add, TosaOp.LOGICAL_LEFT_SHIFT: _shift_left, TosaOp.MUL: _mul,
    TosaOp.RESCALE: _rescale, TosaOp.CLAMP: _clamp, TosaOp.RESHAPE: _reshape,
    TosaOp.IDENTITY: _identity, TosaOp.TRANSPOSE: _transpose, TosaOp.CONCAT: _concat,
    TosaOp.SLICE: _slice, TosaOp.PAD: _pad, TosaOp.MAX_POOL2D: _max_pool, TosaOp.TABLE: _table,
    TosaOp.GREATER_EQUAL: _greater_equal, TosaOp.SELECT: _select, TosaOp.INTDIV: _intdiv,
    TosaOp.RESIZE: _resize, TosaOp.AVG_POOL2D: _avg_pool, TosaOp.REDUCE_MAX: import_softmax,
}


def import_tosa(source: str | Path | bytes, *, name: str | None = None) -> Graph:
    """The Tessel graph of a TOSA flatbuffer (file path or bytes): float inputs quantised with
    scale 1 into the TOSA inputs, the TOSA outputs dequantised with scale 1."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    graph_name = name or (Path(source).stem if not isinstance(source, bytes) else "tosa")
    tosa = read(data)
    for t in tosa.tensors.values():
        check_elements(t.shape, f"TOSA tensor '{t.name}'")
    return _Importer(tosa, GraphBuilder(sanitize_name(graph_name))).run()


def tosa_module(source: str | Path | bytes, *, name: str | None = None, seed: int = 0
                ) -> tuple[Any, tuple[Any, ...]]:
    """(QDQModule, example inputs) of a TOSA file, ready for `tessel.compile`: the inputs are
    float values on each input's quantisation grid (levels drawn uniformly with `seed`), so
    that the quantisation in front of the integer graph rounds nothing."""
    import torch

    from tessel.frontend.ir_module import QDQModule

    graph = import_tosa(source, name=name)
    rng = np.random.default_rng(seed)
    inputs = []
    for v in graph.inputs:
        q = next(n for n in graph.nodes if is_quantize(n) and n.inputs[0] == v.name)
        levels = rng.integers(int(q.attr("qmin")), int(q.attr("qmax")) + 1, v.type.shape)
        grid = np.float32(q.attr("scale")) * (levels - int(q.attr("zero_point")))
        inputs.append(torch.from_numpy(grid.astype(np.float32)))
    return QDQModule(graph), tuple(inputs)
