"""Look-up tables for the NPU's LUT instruction, and the float functions they tabulate.

A LUT op maps an int8 or int16 activation through a table built once at lowering time:

* ``make_lut_i8(fn, in_scale, in_zp, out_scale, out_zp, qmin, qmax) -> np.int8[256]``: entry
  ``k`` is the output for input ``q = k - 128``:
  ``clamp(round(fn(in_scale * (q - in_zp)) / out_scale) + out_zp, qmin, qmax)``. Exact per input
  (the LUT I8_256 instruction reads ``table[x + 128]``), so the only error is the final rounding.
* ``make_lut_i16(fn, in_scale, in_zp, out_scale, out_zp) -> np.int16[513]``: entry ``k`` sits at
  input value ``v_k = (k - 256) * 128`` (``v_512 = 32768`` is one past int16's top, used only as
  the right end of the last segment); LUT I16_513 interpolates linearly between entries
  (:func:`tessel.ops.intops.lut_i16`). Entries balance the interpolation error (TFLite
  ``gen_lut``'s idea, computed in float without its intermediate roundings): entry ``k`` is
  ``round(f(v_k) - (o_{k-1} + o_k) / 4)`` where ``o_i`` is the straight line's overshoot of
  ``f`` at the midpoint of segment ``i`` (end entries: ``o / 2`` of their one segment), so each
  segment's error swings around zero instead of peaking at its middle; here
  ``f(v) = fn(in_scale * (v - in_zp)) / out_scale + out_zp``. Entries are saturated to int16 and
  neighbouring entries are kept within 32767 of each other (a steeper step is clipped), so the
  instruction's ``wrap16`` of the slope and of the result never wraps: every interpolated output
  lies between its two entries. Clamp bounds of an int16 LUT output are those of int16; an op
  needing tighter bounds gets them from the function itself.

Rounding of float values to table entries is half away from zero (:func:`round_half_away`).

The float functions (numpy, float64): :func:`sigmoid`, :func:`tanh`, :func:`hardswish`,
:func:`hardsigmoid`, :func:`gelu_erf`, :func:`gelu_tanh`, :func:`silu`, :func:`exp`, :func:`neg`,
:func:`rsqrt` (RMS norm), and
``FUNCTIONS`` mapping :class:`LutFn` to them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from tessel.errors import TesselConfigError
from tessel.isa.fields import LutMode

FloatFn = Callable[[np.ndarray], np.ndarray]

I16_ENTRIES = LutMode.I16_513.entries
I16_STEP = LutMode.I16_513.step  # input values between neighbouring int16 table entries
I16_CENTRE = LutMode.I16_513.centre  # the entry of input 0


# --------------------------------------------------------------------------------------------
# Float functions (what the tables approximate; PyTorch's definitions)
# --------------------------------------------------------------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``, computed without overflow."""
    x = np.asarray(x, np.float64)
    ex = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + ex), ex / (1.0 + ex))


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(np.asarray(x, np.float64))


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    """``relu6(x + 3) / 6`` (torch.nn.functional.hardsigmoid)."""
    return np.clip(np.asarray(x, np.float64) + 3.0, 0.0, 6.0) / 6.0


def hardswish(x: np.ndarray) -> np.ndarray:
    """``x * relu6(x + 3) / 6`` (torch.nn.functional.hardswish)."""
    x = np.asarray(x, np.float64)
    return x * hardsigmoid(x)


_ERF = np.frompyfunc(math.erf, 1, 1)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """Exact GELU ``x * (1 + erf(x / sqrt 2)) / 2`` (torch's default ``approximate='none'``)."""
    x = np.asarray(x, np.float64)
    return x * 0.5 * (1.0 + _ERF(x / math.sqrt(2.0)).astype(np.float64))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU with the tanh approximation (torch's ``approximate='tanh'``)."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)``."""
    x = np.asarray(x, np.float64)
    return x * sigmoid(x)


def exp(x: np.ndarray) -> np.ndarray:
    """``exp(x)``; overflow gives inf (the table entry then saturates)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64))


def neg(x: np.ndarray) -> np.ndarray:
    """``-x``."""
    return -np.asarray(x, np.float64)


def rsqrt(x: np.ndarray) -> np.ndarray:
    """``1 / sqrt(x)`` for ``x >= 0``; 0 gives inf (the table entry then saturates)."""
    with np.errstate(divide="ignore"):
        return 1.0 / np.sqrt(np.maximum(np.asarray(x, np.float64), 0.0))


class LutFn(enum.Enum):
    """Pointwise functions the lowering turns into LUT ops."""

    SIGMOID = "sigmoid"
    TANH = "tanh"
    HARDSWISH = "hardswish"
    HARDSIGMOID = "hardsigmoid"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    EXP = "exp"
    NEG = "neg"
    RSQRT = "rsqrt"


FUNCTIONS: dict[LutFn, FloatFn] = {
    LutFn.SIGMOID: sigmoid, LutFn.TANH: tanh, LutFn.HARDSWISH: hardswish,
    LutFn.HARDSIGMOID: hardsigmoid, LutFn.GELU: gelu_erf, LutFn.GELU_TANH: gelu_tanh,
    LutFn.SILU: silu, LutFn.EXP: exp, LutFn.NEG: neg, LutFn.RSQRT: rsqrt,
}


# --------------------------------------------------------------------------------------------
# Table generation
# --------------------------------------------------------------------------------------------


def round_half_away(x: npt.ArrayLike) -> np.ndarray:
    """Round float values to the nearest integer, halves away from zero (float64 result)."""
    x = np.asarray(x, np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _check_scales(in_scale: float, out_scale: float, what: str) -> None:
    for name, s in (("in_scale", in_scale), ("out_scale", out_scale)):
        if not (math.isfinite(s) and s > 0.0):
            raise TesselConfigError(f"{what}: {name} must be finite and > 0, got {s!r}")


def _real_out(fn: FloatFn, q: np.ndarray, in_scale: float, in_zp: int, out_scale: float,
              out_zp: int) -> np.ndarray:
    """``fn(dequant(q)) / out_scale + out_zp`` as float64, non-finite values saturated."""
    y = np.asarray(fn(in_scale * (q.astype(np.float64) - in_zp)), np.float64)
    if np.isnan(y).any():
        raise TesselConfigError("LUT function returned NaN inside the input range")
    with np.errstate(over="ignore", invalid="ignore"):
        v = y / out_scale + out_zp
    return np.clip(np.nan_to_num(v, posinf=2.0**40, neginf=-(2.0**40)), -(2.0**40), 2.0**40)


def make_lut_i8(fn: FloatFn, in_scale: float, in_zp: int, out_scale: float, out_zp: int,
                qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """The int8[256] table of ``fn`` between two int8 quantisations (entry k: input k - 128)."""
    _check_scales(in_scale, out_scale, "make_lut_i8")
    if not -128 <= qmin <= qmax <= 127:
        raise TesselConfigError(f"make_lut_i8: clamp [{qmin}, {qmax}] outside int8")
    q = np.arange(-128, 128)
    v = round_half_away(_real_out(fn, q, in_scale, in_zp, out_scale, out_zp))
    return np.clip(v, qmin, qmax).astype(np.int8)


def make_lut_i16(fn: FloatFn, in_scale: float, in_zp: int, out_scale: float,
                 out_zp: int) -> np.ndarray:
    """The int16[513] interpolated table of ``fn`` (midpoint-balanced; see the module doc)."""
    _check_scales(in_scale, out_scale, "make_lut_i16")
    k = np.arange(I16_ENTRIES)
    v = (k - I16_CENTRE) * I16_STEP

    def f(at: np.ndarray) -> np.ndarray:  # the target: fn in output units, saturated to int16
        return np.clip(_real_out(fn, at, in_scale, in_zp, out_scale, out_zp), -32768, 32767)

    samples = f(v.astype(np.float64))
    # overshoot of the straight line over each segment at its midpoint (> 0 where f is convex)
    over = (samples[:-1] + samples[1:]) / 2.0 - f(v[:-1] + I16_STEP / 2.0)
    lower = np.zeros(I16_ENTRIES)
    lower[:-1] += over / 4.0
    lower[1:] += over / 4.0
    lower[0] += over[0] / 4.0  # the end entries have one segment: half of its overshoot
    lower[-1] += over[-1] / 4.0
    entries = round_half_away(samples - lower)
    entries = np.clip(entries, -32768, 32767).astype(np.int64)
    for i in range(1, I16_ENTRIES):  # keep every slope inside int16 (no wrap16 in the LUT)
        entries[i] = min(max(entries[i], entries[i - 1] - 32767), entries[i - 1] + 32767)
    return entries.astype(np.int16)
