"""The plain-Python-integer reference of Tessel's rounding rules (one Python int at a time),
written as literally as possible after gemmlowp's and TFLite's C code: the oracle the tests hold
tessel.isa.fixedpoint's vectorised functions (and the simulator) against."""

from __future__ import annotations

from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN


def _c_div(n: int, d: int) -> int:
    """C's integer division (truncates towards zero), ``d > 0``."""
    q = abs(n) // d
    return q if n >= 0 else -q


def srdhm_ref(a: int, b: int) -> int:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on Python ints (int32 a, b)."""
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return _c_div(ab + nudge, 1 << 31)


def rdbpot_ref(x: int, exponent: int) -> int:
    """gemmlowp ``RoundingDivideByPOT`` on Python ints, written with its mask and threshold."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def mbqm_ref(x: int, q31: int, shift: int) -> int:
    """TFLite ``MultiplyByQuantizedMultiplier`` on Python ints (left shift saturated to int32)."""
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    shifted = min(max(x * (1 << left), INT32_MIN), INT32_MAX)
    return rdbpot_ref(srdhm_ref(shifted, q31), right)


def requantize_ref(acc: int, bias: int, q31: int, shift: int, zp: int, qmin: int, qmax: int) -> int:
    """One element of :func:`requantize` on Python ints."""
    total = min(max(acc + bias, INT32_MIN), INT32_MAX)
    return min(max(mbqm_ref(total, q31, shift) + zp, qmin), qmax)


def rounding_div_ref(x: int, n: int) -> int:
    """TFLite average-pool rounding on Python ints: ``(x + (x > 0 ? n/2 : -n/2)) / n`` in C."""
    return _c_div(x + (n // 2 if x > 0 else -(n // 2)), n)
