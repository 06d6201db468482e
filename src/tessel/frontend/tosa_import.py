"""An integer TOSA 1.0 graph (`model.tosa`) as Tessel's integer IR, without re-quantising.

TOSA spells a quantised layer as several operators with int32 values between them (CONV2D ->
RESCALE -> CLAMP; CAST -> SUB -> RESCALE -> ADD -> RESCALE for a quantised add). The importer
walks the operators in order and keeps each int32 intermediate symbolic (`_Centred`: ``(x -
zp) << shift``; `_Scaled`: a RESCALE of one; `_Pending`: an accumulator whose requantisation
has not come yet), so that the RESCALE to int8 / int16 (and a CLAMP right after it) closes one
Tessel integer op: qconv2d, qmatmul, qadd / qsub, qmul, qmean or requantize. Data movement,
MAX_POOL2D and int8 TABLE map one to one. A RESCALE is Tessel's requantisation
(MultiplyByQuantizedMultiplier) when it rounds DOUBLE_ROUND, or SINGLE_ROUND with no right
shift beyond 31 bits; anything else is refused with the operator and the reason
(TesselFormatError), as is any int32 value that reaches a graph output.

The Tessel graph takes float inputs that `quantize` (scale 1, zero point 0) turns into the TOSA
inputs, and `dequantize`s (scale 1) its outputs: `tosa_module` wraps it as a QDQModule, so
`tessel compile model.tosa` lowers nothing and compiles it as it is.
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
from tessel.frontend.tosa_schema import NUMPY, Operator, RoundingMode, TosaGraph, TosaOp, read
from tessel.frontend.tosa_schema import DType as T
from tessel.ir import DType, Graph, GraphBuilder, Layout, Op, TensorType
from tessel.ir.builder import sanitize_name

_DTYPES = {T.INT8: DType.I8, T.INT16: DType.I16, T.INT32: DType.I32}
_IDENTITY_Q31, _IDENTITY_SHIFT = 1 << 30, 1  # MBQM(x, 2^30, 1) == x


@dataclass(frozen=True)
class _Centred:
    """int32 ``(src - zp) << ls`` of a Tessel value."""

    src: str
    zp: int = 0
    ls: int = 0


@dataclass(frozen=True)
class _Scaled:
    """A RESCALE int32 -> int32 of a centred value: MBQM(c, mult, shift)."""

    c: _Centred
    mult: int
    shift: int


@dataclass(frozen=True)
class _Pending:
    """An int32 accumulator waiting for its requantisation: the Tessel op, its operands and
    attributes (without the output fields), and the shape the TOSA graph gave it."""

    op: Op
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    shape: tuple[int, ...]
    natural: tuple[int, ...]  # the Tessel op's own result shape
    per_channel: int = 0  # the channels the multipliers may vary over (0: per tensor)
    parts: tuple[Any, ...] = ()


@dataclass(frozen=True)
class _Boundary:
    """A float graph input on its way to quantisation (`MUL` by 1 / scale -> `CAST` to int32
    -> `ADD` zero point -> `CAST` to int8), or an integer value on its way out (`CAST` to
    float -> `SUB` zero point -> `MUL` by scale): the quantize / dequantize a converter spells
    with float operators."""

    src: str
    stage: str
    inv_scale: float = 0.0
    zp: int = 0


Symbol = str | _Centred | _Scaled | _Pending | _Boundary


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
            if rule is None:
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
            dtype = _dtype(t.dtype, name)
            lo, hi = dtype.bounds
            self.values[name] = self.b.add(Op.QUANTIZE, [x], {
                "scale": 1.0, "zero_point": 0, "qmin": lo, "qmax": hi, "dtype": dtype},
                name=f"{name}_q")

    def outputs(self) -> Graph:
        outs = []
        for name in self.g.outputs:
            v = self.value(name, "graph output")
            outs.append(v if self.b.type_of(v).dtype is DType.F32 else self.b.add(
                Op.DEQUANTIZE, [v], {"scale": 1.0, "zero_point": 0}, name=f"{name}_out"))
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


def _dtype(t: T, name: str) -> DType:
    if t not in _DTYPES:
        raise TesselFormatError(f"TOSA tensor %{name} is {t.name} (Tessel imports int8, int16 "
                                "and int32 tensors: the integer profile)")
    return _DTYPES[t]


# ---------------------------------------------------------------- rules


def _noop(im: _Importer, op: Operator, k: int) -> None:
    """CONST / CONST_SHAPE: read where used."""


def _window(op: Operator) -> dict[str, Any]:
    t, bot, left, right = op.attrs["pad"]
    return {"padding": (t, left, bot, right), "stride": tuple(op.attrs["stride"]),
            "layout": Layout.NHWC}


def _conv(im: _Importer, op: Operator, k: int) -> None:
    what = f"{op.op.name} %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    if im.b.type_of(x).dtype is not DType.I8:
        raise TesselFormatError(f"TOSA {what}: int16 activations (Tessel's convolutions take "
                                "int8)")
    w = im.const(op.inputs[1], what)
    bias = im.ints(op.inputs[2], what).astype(np.int32)
    in_zp, w_zp = im.scalar(op.inputs[3], what), im.scalar(op.inputs[4], what)
    if w_zp != 0 or w.dtype != np.int8:
        raise TesselFormatError(f"TOSA {what}: int8 weights with zero point 0 only")
    if op.op is TosaOp.DEPTHWISE_CONV2D:
        if w.shape[3] != 1:
            raise TesselFormatError(f"TOSA {what}: depth multiplier {w.shape[3]} (Tessel's "
                                    "depthwise convolution has multiplier 1)")
        w, groups = w.transpose(2, 0, 1, 3), w.shape[2]
    else:
        groups = 1
    cout = w.shape[0]
    if bias.size == 1:
        bias = np.full(cout, bias.reshape(-1)[0], np.int32)
    attrs = {**_window(op), "dilation": tuple(op.attrs["dilation"]), "groups": groups,
             "in_zp": in_zp}
    wname = im.b.constant(w, sanitize_name(op.inputs[1]))
    bname = im.b.constant(bias.reshape(cout), sanitize_name(op.inputs[2]))
    n, h, wd, _ = im.b.type_of(x).shape
    shape = tuple(im.g.tensors[op.outputs[0]].shape)
    im.define(op, _Pending(Op.QCONV2D, (x, wname, bname), attrs, shape, shape, cout))


def _matmul(im: _Importer, op: Operator, k: int) -> None:
    what = f"MATMUL %{op.outputs[0]}"
    a, bb = im.value(op.inputs[0], what), im.value(op.inputs[1], what)
    attrs = {"a_zp": im.scalar(op.inputs[2], what), "b_zp": im.scalar(op.inputs[3], what)}
    shape = tuple(im.g.tensors[op.outputs[0]].shape)
    im.define(op, _Pending(Op.QMATMUL, (a, bb), attrs, shape, shape))


def _reduce_sum(im: _Importer, op: Operator, k: int) -> None:
    what = f"REDUCE_SUM %{op.outputs[0]}"
    src = im.values.get(op.inputs[0])
    axis = op.attrs["axis"]
    if isinstance(src, _Pending) and src.op is Op.QMEAN and src.shape == src.natural:
        axes = (*src.attrs["axes"], axis)
        shape = list(src.shape)
        shape[axis] = 1
        im.define(op, replace(src, attrs={**src.attrs, "axes": axes}, shape=tuple(shape),
                              natural=tuple(shape)))
        return
    c = im.centred(op.inputs[0], what)
    if c.ls:
        raise TesselFormatError(f"TOSA {what}: a shifted sum (Tessel's mean sums x - zp)")
    shape = list(im.b.type_of(c.src).shape)
    shape[axis] = 1
    im.define(op, _Pending(Op.QMEAN, (c.src,), {"axes": (axis,), "keepdim": True,
                                                "in_zp": c.zp}, tuple(shape), tuple(shape)))


def _cast(im: _Importer, op: Operator, k: int) -> None:
    src, out_t = im.values.get(op.inputs[0]), im.g.tensors[op.outputs[0]].dtype
    if isinstance(src, _Boundary) and src.stage == "scaled" and out_t is T.INT32:
        im.define(op, replace(src, stage="rounded"))
        return
    if isinstance(src, _Boundary) and src.stage == "shifted" and out_t in _DTYPES:
        dtype = _DTYPES[out_t]
        lo, hi = dtype.bounds
        im.add(op, Op.QUANTIZE, [src.src], {"scale": 1.0 / src.inv_scale, "zero_point": src.zp,
                                            "qmin": lo, "qmax": hi, "dtype": dtype})
        return
    x = im.value(op.inputs[0], f"CAST %{op.outputs[0]}")
    if out_t is T.FP32:
        im.define(op, _Boundary(x, "cast"))
        return
    if out_t is not T.INT32:
        raise TesselFormatError(f"TOSA CAST %{op.outputs[0]}: only the widening to int32 of a "
                                "quantised add, mul or mean is imported")
    im.define(op, _Centred(x))


def _float_const(im: _Importer, name: str, what: str) -> float:
    v = im.const(name, what)
    if v.size != 1:
        raise TesselFormatError(f"TOSA {what}: %{name} must hold one value, got {v.size}")
    return float(v.reshape(-1)[0])


def _as_scaled(c: _Centred, ls: int, what: str) -> _Scaled:
    """`c` (an exact left shift by c.ls) as a rescale of the value shifted by `ls`:
    MBQM((x - zp) << ls, 2^30, c.ls + 1 - ls) == (x - zp) << c.ls."""
    shift = c.ls + 1 - ls
    if not -31 <= shift <= 30:
        raise TesselFormatError(f"TOSA {what}: operands shifted left by {c.ls} and {ls}")
    return _Scaled(replace(c, ls=ls), _IDENTITY_Q31, shift)


def _sub_add(im: _Importer, op: Operator, k: int) -> None:
    what = f"{op.op.name} %{op.outputs[0]}"
    a, b = (im.values.get(n) for n in op.inputs)
    if isinstance(a, _Boundary) and b is None:
        if a.stage == "rounded" and op.op is TosaOp.ADD:
            im.define(op, replace(a, stage="shifted", zp=im.scalar(op.inputs[1], what)))
            return
        if a.stage == "cast" and op.op is TosaOp.SUB:
            im.define(op, replace(a, stage="centred", zp=round(_float_const(im, op.inputs[1],
                                                                             what))))
            return
    if isinstance(a, _Scaled) and isinstance(b, _Centred):
        b = _as_scaled(b, a.c.ls, what)
    if isinstance(a, _Centred) and isinstance(b, _Scaled):
        a = _as_scaled(a, b.c.ls, what)
    if isinstance(a, _Centred) and b is None and op.op is TosaOp.SUB and a.ls == 0 and not a.zp:
        im.define(op, replace(a, zp=im.scalar(op.inputs[1], what)))
        return
    if isinstance(a, _Scaled) and isinstance(b, _Scaled):
        if a.c.ls != b.c.ls:
            raise TesselFormatError(f"TOSA {what}: operands shifted left by different amounts")
        kind = Op.QADD if op.op is TosaOp.ADD else Op.QSUB
        attrs = {"a_zp": a.c.zp, "b_zp": b.c.zp, "left_shift": a.c.ls,
                 "a_multiplier": a.mult, "a_shift": a.shift, "b_multiplier": b.mult,
                 "b_shift": b.shift}
        shape = tuple(im.g.tensors[op.outputs[0]].shape)
        im.define(op, _Pending(kind, (a.c.src, b.c.src), attrs, shape, shape))
        return
    raise TesselFormatError(f"TOSA {what}: int32 {op.op.name} is imported as the sum of two "
                            "rescaled inputs (a quantised add) only")


def _shift_left(im: _Importer, op: Operator, k: int) -> None:
    what = f"LOGICAL_LEFT_SHIFT %{op.outputs[0]}"
    c = im.centred(op.inputs[0], what)
    im.define(op, replace(c, ls=c.ls + im.scalar(op.inputs[1], what)))


def _mul(im: _Importer, op: Operator, k: int) -> None:
    what = f"MUL %{op.outputs[0]}"
    src = im.values.get(op.inputs[0])
    if isinstance(src, _Boundary) and src.stage == "float":
        im.define(op, replace(src, stage="scaled", inv_scale=_float_const(im, op.inputs[1], what)))
        return
    if isinstance(src, _Boundary) and src.stage == "centred":
        im.add(op, Op.DEQUANTIZE, [src.src], {"scale": _float_const(im, op.inputs[1], what),
                                              "zero_point": src.zp})
        return
    if len(op.inputs) > 2 and im.scalar(op.inputs[2], what) != 0:
        raise TesselFormatError(f"TOSA {what}: a shifted product (Tessel's mul has shift 0)")
    a, b = im.centred(op.inputs[0], what), im.centred(op.inputs[1], what)
    if a.ls or b.ls:
        raise TesselFormatError(f"TOSA {what}: shifted factors")
    shape = tuple(im.g.tensors[op.outputs[0]].shape)
    im.define(op, _Pending(Op.QMUL, (a.src, b.src), {"a_zp": a.zp, "b_zp": b.zp}, shape, shape))


def _rescale_params(im: _Importer, op: Operator, what: str) -> tuple[np.ndarray, np.ndarray]:
    a = op.attrs
    mult = im.ints(op.inputs[1], what).astype(np.int64).reshape(-1)
    shift = 31 - im.ints(op.inputs[2], what).astype(np.int64).reshape(-1)
    if a.get("input_unsigned") or a.get("output_unsigned"):
        raise TesselFormatError(f"TOSA {what}: unsigned rescale (Tessel's tensors are signed)")
    if not a.get("scale32", True):
        raise TesselFormatError(f"TOSA {what}: 16-bit multipliers (scale32 = false)")
    mode = a.get("rounding_mode", 0)
    if mode != RoundingMode.DOUBLE_ROUND and not (
            mode == RoundingMode.SINGLE_ROUND and np.all(shift >= 0)):
        raise TesselFormatError(f"TOSA {what}: rounding mode {mode} with right shifts beyond "
                                "31 bits rounds once; Tessel's requantisation rounds twice "
                                "(DOUBLE_ROUND)")
    if np.any(shift < -31) or np.any(shift > 30) or np.any(mult < 0):
        raise TesselFormatError(f"TOSA {what}: shift outside [1, 62] or a negative multiplier")
    return mult, shift


def _rescale(im: _Importer, op: Operator, k: int) -> None:
    what = f"RESCALE %{op.outputs[0]}"
    mult, shift = _rescale_params(im, op, what)
    in_zp, out_zp = im.scalar(op.inputs[3], what), im.scalar(op.inputs[4], what)
    out_t = im.g.tensors[op.outputs[0]].dtype
    src = im.values.get(op.inputs[0])
    if src is None and op.inputs[0] in im.g.tensors:
        src = im.value(op.inputs[0], what)
    if out_t is T.INT32:
        if out_zp or mult.size != 1:
            raise TesselFormatError(f"TOSA {what}: an int32 rescale is imported per tensor "
                                    "without zero point (a quantised add's input)")
        c = _Centred(src, in_zp) if isinstance(src, str) else im.centred(op.inputs[0], what)
        if int(mult[0]) == _IDENTITY_Q31 and int(shift[0]) >= 1 and not c.ls:
            im.define(op, replace(c, ls=int(shift[0]) - 1))  # exactly (x - zp) << (shift - 1)
        else:
            im.define(op, _Scaled(c, int(mult[0]), int(shift[0])))
        return
    dtype = _dtype(out_t, op.outputs[0])
    lo, hi = dtype.bounds
    out_name, clamp = op.outputs[0], im.only_user(op.outputs[0], TosaOp.CLAMP, TosaOp.IDENTITY)
    if clamp is not None:
        if clamp.op is TosaOp.CLAMP:
            npd = NUMPY[out_t]
            lo = int(np.frombuffer(clamp.attrs["min_val"], npd)[0])
            hi = int(np.frombuffer(clamp.attrs["max_val"], npd)[0])
        im.skip.add(im.g.operators.index(clamp))
        out_name = clamp.outputs[0]
    out = {"out_zp": out_zp, "act_min": lo, "act_max": hi, "dtype": dtype}
    target = replace(op, outputs=(out_name,))
    if isinstance(src, str | _Centred):
        c = _Centred(src, in_zp) if isinstance(src, str) else src
        if c.ls or (isinstance(src, _Centred) and in_zp):
            raise TesselFormatError(f"TOSA {what}: a shifted input")
        _per_tensor(mult, shift, what)
        im.add(target, Op.REQUANTIZE, [c.src], {"in_zp": c.zp, "multiplier": int(mult[0]),
                                                "shift": int(shift[0]), **out})
        return
    if not isinstance(src, _Pending) or in_zp:
        raise TesselFormatError(f"TOSA {what}: its input is not an accumulator Tessel imports")
    _close(im, target, src, mult, shift, out, what)


def _per_tensor(mult: np.ndarray, shift: np.ndarray, what: str) -> None:
    if mult.size != 1 or shift.size != 1:
        raise TesselFormatError(f"TOSA {what}: per-channel multipliers where Tessel's op takes "
                                "one")


def _close(im: _Importer, op: Operator, p: _Pending, mult: np.ndarray, shift: np.ndarray,
           out: Mapping[str, Any], what: str) -> None:
    """The Tessel op of an accumulator and its requantisation (reshaped back to the TOSA
    shape when the graph reshaped the accumulator)."""
    natural_op = replace(op, outputs=(op.outputs[0] if p.shape == p.natural
                                      else f"{op.outputs[0]}_acc",))
    if p.op is Op.QCONV2D:
        cout = p.per_channel
        m = np.broadcast_to(mult, (cout,)).astype(np.int32)
        s = np.broadcast_to(shift, (cout,)).astype(np.int32)
        ins = (*p.inputs, im.b.constant(m, f"{op.outputs[0]}_mult"),
               im.b.constant(s, f"{op.outputs[0]}_shift"))
        name = im.add(natural_op, Op.QCONV2D, ins, {**p.attrs, **out})
    else:
        _per_tensor(mult, shift, what)
        req = {"multiplier": int(mult[0]), "shift": int(shift[0])}
        if p.op in (Op.QADD, Op.QSUB, Op.QMUL):
            req = {"out_multiplier": req["multiplier"], "out_shift": req["shift"]}
        name = im.add(natural_op, p.op, p.inputs, {**p.attrs, **req, **out})
    if p.shape != p.natural:
        im.define(op, im.b.add(IR_OF[TosaOp.RESHAPE], [name], {"shape": p.shape},
                               name=sanitize_name(op.outputs[0])))


def _clamp(im: _Importer, op: Operator, k: int) -> None:
    """A CLAMP on its own: requantize by one (MBQM(x, 2^30, 1) == x) with the clamp."""
    what = f"CLAMP %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    dtype = im.b.type_of(x).dtype
    npd = NUMPY[im.g.tensors[op.outputs[0]].dtype]
    lo = int(np.frombuffer(op.attrs["min_val"], npd)[0])
    hi = int(np.frombuffer(op.attrs["max_val"], npd)[0])
    im.add(op, Op.REQUANTIZE, [x], {"in_zp": 0, "multiplier": _IDENTITY_Q31,
                                    "shift": _IDENTITY_SHIFT, "out_zp": 0, "act_min": lo,
                                    "act_max": hi, "dtype": dtype})


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


def _table(im: _Importer, op: Operator, k: int) -> None:
    what = f"TABLE %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    table = im.ints(op.inputs[1], what)
    if im.b.type_of(x).dtype is not DType.I8 or table.shape != (256,):
        raise TesselFormatError(f"TOSA {what}: int8 tables of 256 entries only (an int16 "
                                "TABLE's 32-bit interpolated result has no Tessel op)")
    t = im.b.constant(table.astype(np.int16), sanitize_name(op.inputs[1]))
    im.add(op, IR_OF[op.op], [x, t], {})


RULES: Mapping[TosaOp, Callable[[_Importer, Operator, int], None]] = {
    TosaOp.CONST: _noop, TosaOp.CONST_SHAPE: _noop,
    TosaOp.CONV2D: _conv, TosaOp.DEPTHWISE_CONV2D: _conv, TosaOp.MATMUL: _matmul,
    TosaOp.REDUCE_SUM: _reduce_sum, TosaOp.CAST: _cast, TosaOp.SUB: _sub_add,
    TosaOp.ADD: _sub_add, TosaOp.LOGICAL_LEFT_SHIFT: _shift_left, TosaOp.MUL: _mul,
    TosaOp.RESCALE: _rescale, TosaOp.CLAMP: _clamp, TosaOp.RESHAPE: _reshape,
    TosaOp.IDENTITY: _identity, TosaOp.TRANSPOSE: _transpose, TosaOp.CONCAT: _concat,
    TosaOp.SLICE: _slice, TosaOp.PAD: _pad, TosaOp.MAX_POOL2D: _max_pool, TosaOp.TABLE: _table,
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
        q = next(n for n in graph.nodes if n.op is Op.QUANTIZE and n.inputs[0] == v.name)
        levels = rng.integers(int(q.attr("qmin")), int(q.attr("qmax")) + 1, v.type.shape)
        grid = np.float32(q.attr("scale")) * (levels - int(q.attr("zero_point")))
        inputs.append(torch.from_numpy(grid.astype(np.float32)))
    return QDQModule(graph), tuple(inputs)
