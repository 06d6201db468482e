"""The TOSA importer's multi-operator patterns (tessel.frontend.tosa_import): the symbols that
stand for int32 intermediates (`_Centred`, `_Scaled`, `_Pending`, `_Average`) and the float
quantise / dequantise at a converter's edges (`_Boundary`), and the rules that build them and
close them into one integer IR op at the RESCALE to int8 / int16: requantisation, quantised
add / sub / mul, mean, exact average pool, and the float boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.errors import TesselFormatError
from tessel.frontend.tosa_export import IR_OF
from tessel.frontend.tosa_schema import NUMPY, Operator, RoundingMode, TosaOp
from tessel.frontend.tosa_schema import DType as T
from tessel.ir import DType, Layout, Op
from tessel.ir.builder import sanitize_name
from tessel.isa.fixedpoint import MAX_WIDE_SHIFT, MIN_SHIFT, Rounding

if TYPE_CHECKING:
    from tessel.frontend.tosa_import import _Importer

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
    """A RESCALE int32 -> int32 of a centred value: MBQM(c, mult, shift), or its one rounding
    (``rounding`` SINGLE); ``None``: the two modes give the same integers (no right shift beyond
    31 bits)."""

    c: _Centred
    mult: int
    shift: int
    rounding: Rounding | None = None


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
    rounding: Rounding | None = None  # the rounding its input rescales need (None: either)


@dataclass(frozen=True)
class _Boundary:
    """A float graph input on its way to quantisation (`MUL` by 1 / scale -> `CAST` to int32
    -> `ADD` zero point -> `CAST` to int8), or an integer value on its way out (`CAST` to
    float -> `SUB` zero point -> `MUL` by scale): the quantize / dequantize a converter spells
    with float operators (no `MUL` for a scale of 1, no `ADD` / `SUB` for a zero point of 0)."""

    src: str
    stage: str
    inv_scale: float = 0.0
    zp: int = 0


@dataclass(frozen=True)
class _Average:
    """A step of an exact average pool: the window sums (a depthwise convolution of ones), their
    sign, `sum +- half`, the SELECT of those, the INTDIV by the valid tap counts."""

    sums: _Pending
    stage: str
    half: np.ndarray | None = None
    count: np.ndarray | None = None


Symbol = str | _Centred | _Scaled | _Pending | _Boundary | _Average


def _dtype(t: T, name: str) -> DType:
    if t not in _DTYPES:
        raise TesselFormatError(f"TOSA tensor %{name} is {t.name} (Tessel imports int8, int16 "
                                "and int32 tensors: the integer profile)")
    return _DTYPES[t]


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
    if isinstance(src, _Boundary) and src.stage == "float" and out_t in _DTYPES:
        # scale 1: the converter writes no MUL by 1 / scale, the CAST rounds the input itself
        src = replace(src, stage="scaled", inv_scale=1.0)
    if isinstance(src, _Boundary) and src.stage == "scaled" and out_t is T.INT32:
        im.define(op, replace(src, stage="rounded"))
        return
    if isinstance(src, _Boundary) and src.stage == "scaled" and out_t in (T.INT8, T.INT16):
        # zero point 0: the converter casts the scaled input straight to int8
        src = replace(src, stage="shifted")
    if isinstance(src, _Boundary) and src.stage == "shifted" and out_t in _DTYPES:
        im.define(op, quantize(im, src.src, sanitize_name(op.outputs[0]), _DTYPES[out_t],
                               1.0 / src.inv_scale, src.zp))
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
    if _window_sums(a) and b is None:
        half = im.ints(op.inputs[1], what)
        im.define(op, _Average(a, "up" if op.op is TosaOp.ADD else "down", half))
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
        modes = {a.rounding, b.rounding} - {None}
        if len(modes) > 1:
            raise TesselFormatError(f"TOSA {what}: one input RESCALE rounds once, the other "
                                    "twice (Tessel's ELTWISE rounds its three rescales alike)")
        kind = Op.QADD if op.op is TosaOp.ADD else Op.QSUB
        attrs = {"a_zp": a.c.zp, "b_zp": b.c.zp, "left_shift": a.c.ls,
                 "a_multiplier": a.mult, "a_shift": a.shift, "b_multiplier": b.mult,
                 "b_shift": b.shift}
        shape = tuple(im.g.tensors[op.outputs[0]].shape)
        im.define(op, _Pending(kind, (a.c.src, b.c.src), attrs, shape, shape,
                               rounding=next(iter(modes), None)))
        return
    raise TesselFormatError(f"TOSA {what}: int32 {op.op.name} is imported as the sum of two "
                            "rescaled inputs (a quantised add) only")


def _window_sums(p: Symbol | None) -> bool:
    """A depthwise convolution of ones without zero points or bias: window sums."""
    if not (isinstance(p, _Pending) and p.op is Op.QCONV2D and p.parts
            and p.attrs["groups"] > 1 and p.attrs["in_zp"] == 0):
        return False
    w, bias = p.parts
    return bool(np.all(w == 1) and not np.any(bias) and p.attrs["dilation"] == (1, 1))


def _greater_equal(im: _Importer, op: Operator, k: int) -> None:
    what = f"GREATER_EQUAL %{op.outputs[0]}"
    a = im.values.get(op.inputs[0])
    if not _window_sums(a) or np.any(im.ints(op.inputs[1], what)):
        raise TesselFormatError(f"TOSA {what}: imported as the sign test of an average pool's "
                                "window sums only")
    im.define(op, _Average(a, "sign"))


def _select(im: _Importer, op: Operator, k: int) -> None:
    what = f"SELECT %{op.outputs[0]}"
    sign, up, down = (im.values.get(n) for n in op.inputs)
    if not (isinstance(sign, _Average) and isinstance(up, _Average)
            and isinstance(down, _Average) and (sign.stage, up.stage, down.stage)
            == ("sign", "up", "down") and sign.sums == up.sums == down.sums
            and np.array_equal(up.half, down.half)):
        raise TesselFormatError(f"TOSA {what}: imported as an average pool's rounding (SELECT "
                                "on the sign of sum + half, sum - half) only")
    im.define(op, _Average(up.sums, "num", up.half))


def _intdiv(im: _Importer, op: Operator, k: int) -> None:
    what = f"INTDIV %{op.outputs[0]}"
    num = im.values.get(op.inputs[0])
    if not isinstance(num, _Average) or num.stage != "num":
        raise TesselFormatError(f"TOSA {what}: imported as an average pool's division only")
    im.define(op, _Average(num.sums, "avg", num.half, im.ints(op.inputs[1], what)))


def _average_pool(im: _Importer, op: Operator, avg: _Average, mult: np.ndarray,
                  shift: np.ndarray, out: Mapping[str, Any], what: str) -> None:
    """qavg_pool2d from the window sums, if the counts are the valid taps of the windows, the
    halves their halves and the RESCALE exactly one."""
    if mult.size != 1 or int(mult[0]) != _IDENTITY_Q31 or int(shift[0]) != 1 or out["out_zp"]:
        raise TesselFormatError(f"TOSA {what}: an average's RESCALE must be exactly one")
    p = avg.sums
    x = p.inputs[0]
    w = p.parts[0]
    attrs = {"kernel": (w.shape[1], w.shape[2]), "stride": p.attrs["stride"],
             "padding": p.attrs["padding"], "layout": Layout.NHWC,
             "act_min": out["act_min"], "act_max": out["act_max"]}
    name = im.add(op, Op.QAVG_POOL2D, [x], attrs)
    _, oh, ow, _ = im.b.type_of(name).shape
    _, h, wd, _ = im.b.type_of(x).shape
    rows = _valid_taps(h, oh, w.shape[1], attrs["stride"][0], attrs["padding"][0])
    cols = _valid_taps(wd, ow, w.shape[2], attrs["stride"][1], attrs["padding"][1])
    counts = rows[:, None] * cols[None, :]
    count = np.broadcast_to(avg.count, (1, oh, ow, 1)).reshape(oh, ow)
    half = np.broadcast_to(avg.half, (1, oh, ow, 1)).reshape(oh, ow)
    if not (np.array_equal(count, counts) and np.array_equal(half, counts // 2)):
        raise TesselFormatError(f"TOSA {what}: the divisors are not the windows' valid taps "
                                "(Tessel's average pool divides by those)")


def _valid_taps(size: int, out: int, k: int, stride: int, pad: int) -> np.ndarray:
    idx = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :]
    return ((idx >= 0) & (idx < size)).sum(axis=1)


def _resize(im: _Importer, op: Operator, k: int) -> None:
    """RESIZE NEAREST by integer factors as the exporter writes it (scale s / 1, offset
    -(s // 2), border s - 1 - s // 2): nearest upsampling."""
    what = f"RESIZE %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    sy, dy, sx, dx = im.shape_of(op.inputs[1])
    offset, border = im.shape_of(op.inputs[2]), im.shape_of(op.inputs[3])
    if (op.attrs.get("mode") != 1 or (dy, dx) != (1, 1)
            or tuple(offset) != (-(sy // 2), -(sx // 2))
            or tuple(border) != (sy - 1 - sy // 2, sx - 1 - sx // 2)):
        raise TesselFormatError(f"TOSA {what}: nearest upsampling by integer factors only")
    im.add(op, IR_OF[op.op], [x], {"scale": (sy, sx), "layout": Layout.NHWC})


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
    if isinstance(src, _Boundary) and src.stage in ("cast", "centred"):  # "cast": zero point 0
        im.define(op, dequantize(im, src.src, sanitize_name(op.outputs[0]),
                                 _float_const(im, op.inputs[1], what), src.zp))
        return
    if len(op.inputs) > 2 and im.scalar(op.inputs[2], what) != 0:
        raise TesselFormatError(f"TOSA {what}: a shifted product (Tessel's mul has shift 0)")
    a, b = im.centred(op.inputs[0], what), im.centred(op.inputs[1], what)
    if a.ls or b.ls:
        raise TesselFormatError(f"TOSA {what}: shifted factors")
    shape = tuple(im.g.tensors[op.outputs[0]].shape)
    im.define(op, _Pending(Op.QMUL, (a.src, b.src), {"a_zp": a.zp, "b_zp": b.zp}, shape, shape))


def _rescale_params(im: _Importer, op: Operator,
                    what: str) -> tuple[np.ndarray, np.ndarray, Rounding]:
    a = op.attrs
    if a.get("input_unsigned") or a.get("output_unsigned"):
        raise TesselFormatError(f"TOSA {what}: unsigned rescale (Tessel's tensors are signed)")
    if not a.get("scale32", True):
        return _wide_rescale_params(im, op, what)
    mult = im.ints(op.inputs[1], what).astype(np.int64).reshape(-1)
    shift = 31 - im.ints(op.inputs[2], what).astype(np.int64).reshape(-1)
    mode = a.get("rounding_mode", 0)
    if mode not in (RoundingMode.DOUBLE_ROUND, RoundingMode.SINGLE_ROUND):
        raise TesselFormatError(f"TOSA {what}: rounding mode {mode} (Tessel rounds "
                                "DOUBLE_ROUND or SINGLE_ROUND)")
    if np.any(shift < -31) or np.any(shift > 30) or np.any(mult < 0):
        raise TesselFormatError(f"TOSA {what}: shift outside [1, 62] or a negative multiplier")
    rounding = Rounding.SINGLE if mode == RoundingMode.SINGLE_ROUND else Rounding.DOUBLE
    return mult, shift, rounding


def _wide_rescale_params(im: _Importer, op: Operator,
                         what: str) -> tuple[np.ndarray, np.ndarray, Rounding]:
    """A RESCALE with 16-bit multipliers (``scale32 = false``) of an INT48 accumulator: Tessel's
    wide requantisation (docs/numerics.md) with the Q31 multiplier ``m16 << 16`` (which reduces
    to ``m16``) and shift ``15 - s``."""
    if im.g.tensors[op.inputs[0]].dtype is not T.INT48:
        raise TesselFormatError(f"TOSA {what}: 16-bit multipliers (scale32 = false) of a "
                                "tensor other than an INT48 accumulator")
    if op.attrs.get("rounding_mode", 0) != RoundingMode.SINGLE_ROUND:
        raise TesselFormatError(f"TOSA {what}: an INT48 rescale rounds SINGLE_ROUND in Tessel")
    m16 = im.ints(op.inputs[1], what).astype(np.int64).reshape(-1)
    s = im.ints(op.inputs[2], what).astype(np.int64).reshape(-1)
    if np.any(m16 < 0) or np.any(m16 > 0x7FFF) or np.any(s < 15 - MAX_WIDE_SHIFT) or np.any(
            s > 15 - MIN_SHIFT):
        raise TesselFormatError(f"TOSA {what}: a 16-bit multiplier outside [0, 32767] or a "
                                f"shift outside [{15 - MAX_WIDE_SHIFT}, {15 - MIN_SHIFT}]")
    return m16 << 16, 15 - s, Rounding.SINGLE


def _double_rounded(rounding: Rounding, shift: np.ndarray, what: str, into: str) -> None:
    """Refuses a SINGLE_ROUND rescale with right shifts beyond 31 bits where the Tessel op
    requantises with double rounding only (SINGLE_ROUND with shorter shifts is the same
    arithmetic)."""
    if rounding == Rounding.SINGLE and np.any(shift < 0):
        raise TesselFormatError(f"TOSA {what}: SINGLE_ROUND with right shifts beyond 31 bits "
                                f"rounds once; Tessel's {into} rounds twice (ops with a "
                                "one-rounding mode: convolutions, add, sub, mul)")


def _rescale(im: _Importer, op: Operator, k: int) -> None:
    what = f"RESCALE %{op.outputs[0]}"
    mult, shift, rounding = _rescale_params(im, op, what)
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
        else:  # the rounding matters with right shifts only
            im.define(op, _Scaled(c, int(mult[0]), int(shift[0]),
                                  rounding if int(shift[0]) < 0 else None))
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
        _double_rounded(rounding, shift, what, "requantize")
        im.add(target, Op.REQUANTIZE, [c.src], {"in_zp": c.zp, "multiplier": int(mult[0]),
                                                "shift": int(shift[0]), **out})
        return
    if isinstance(src, _Average) and src.stage == "avg":
        _double_rounded(rounding, shift, what, "average pool")
        _average_pool(im, target, src, mult, shift, out, what)
        return
    if not isinstance(src, _Pending) or in_zp:
        raise TesselFormatError(f"TOSA {what}: its input is not an accumulator Tessel imports")
    if src.op in _ROUNDING_OPS:
        _same_rounding(src, rounding, what)
        out = {**out, "rounding": int(rounding)} if rounding == Rounding.SINGLE else out
    else:
        _double_rounded(rounding, shift, what, src.op.value)
    _close(im, target, src, mult, shift, out, what)


_ROUNDING_OPS = frozenset({Op.QCONV2D, Op.QADD, Op.QSUB, Op.QMUL})  # a `rounding` attribute


def _same_rounding(p: _Pending, rounding: Rounding, what: str) -> None:
    """Refuses an element-wise op whose input rescales round otherwise than its output's."""
    if p.rounding is not None and p.rounding != rounding:
        raise TesselFormatError(f"TOSA {what}: rounds {rounding.name.lower()}, the "
                                f"{p.op.value}'s input RESCALEs {p.rounding.name.lower()} "
                                "(Tessel's ELTWISE rounds its three rescales alike)")


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


def _window(op: Operator) -> dict[str, Any]:
    t, bot, left, right = op.attrs["pad"]
    return {"padding": (t, left, bot, right), "stride": tuple(op.attrs["stride"]),
            "layout": Layout.NHWC}


def _conv(im: _Importer, op: Operator, k: int) -> None:
    what = f"{op.op.name} %{op.outputs[0]}"
    x = im.value(op.inputs[0], what)
    wide = im.b.type_of(x).dtype is DType.I16  # int16 x int8 into INT48 (docs/numerics.md)
    if not wide and im.b.type_of(x).dtype is not DType.I8:
        raise TesselFormatError(f"TOSA {what}: {im.b.type_of(x).dtype.value} activations "
                                "(Tessel's convolutions take int8 or int16)")
    if wide != (im.g.tensors[op.outputs[0]].dtype is T.INT48):
        raise TesselFormatError(f"TOSA {what}: an int8 input accumulates into INT32, an int16 "
                                "one into INT48")
    w = im.const(op.inputs[1], what)
    bias = im.ints(op.inputs[2], what).astype(np.int64 if wide else np.int32)
    in_zp, w_zp = im.scalar(op.inputs[3], what), im.scalar(op.inputs[4], what)
    if wide and in_zp:
        raise TesselFormatError(f"TOSA {what}: an int16 input with zero point {in_zp} (Tessel's "
                                "int16 activations are symmetric)")
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
        bias = np.full(cout, bias.reshape(-1)[0], bias.dtype)
    attrs = {**_window(op), "dilation": tuple(op.attrs["dilation"]), "groups": groups,
             "in_zp": in_zp}
    wname = im.b.constant(w, sanitize_name(op.inputs[1]))
    bname = im.b.constant(bias.reshape(cout), sanitize_name(op.inputs[2]))
    n, h, wd, _ = im.b.type_of(x).shape
    shape = tuple(im.g.tensors[op.outputs[0]].shape)
    im.define(op, _Pending(Op.QCONV2D, (x, wname, bname), attrs, shape, shape, cout,
                           parts=(w, bias)))


def _matmul(im: _Importer, op: Operator, k: int) -> None:
    what = f"MATMUL %{op.outputs[0]}"
    a, bb = im.value(op.inputs[0], what), im.value(op.inputs[1], what)
    attrs = {"a_zp": im.scalar(op.inputs[2], what), "b_zp": im.scalar(op.inputs[3], what)}
    shape = tuple(im.g.tensors[op.outputs[0]].shape)
    im.define(op, _Pending(Op.QMATMUL, (a, bb), attrs, shape, shape))


def quantize(im: _Importer, x: str, out: str, dtype: DType, scale: float = 1.0, zp: int = 0
             ) -> str:
    """The `quantize` in front of the integer graph (scale 1: a TOSA input's integers)."""
    lo, hi = dtype.bounds
    return im.b.add(Op.QUANTIZE, [x], {"scale": scale, "zero_point": zp, "qmin": lo,
                                       "qmax": hi, "dtype": dtype}, name=out)


def dequantize(im: _Importer, x: str, out: str, scale: float = 1.0, zp: int = 0) -> str:
    """The `dequantize` after it (scale 1: a TOSA output's integers)."""
    return im.b.add(Op.DEQUANTIZE, [x], {"scale": scale, "zero_point": zp}, name=out)


def is_quantize(node: Any) -> bool:
    return node.op is Op.QUANTIZE
