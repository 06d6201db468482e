"""LiteRT's int8 arithmetic where it differs from Tessel's own rules, for imported `.tflite`
models: an imported graph computes what LiteRT's reference kernels compute, while Tessel's own
quantised models keep Tessel's rules.

* MEAN: LiteRT quantises `s_in / s_out` and folds `1 / n` into that multiplier by an integer
  division (`mean_multiplier`); Tessel's own `qmean` quantises `s_in / (n s_out)`. The two
  differ in the last bit of some outputs; an imported MEAN carries `litert = true` and its
  `qmean` (on the NPU) takes LiteRT's multiplier.
* HARD_SWISH: LiteRT runs fixed-point steps on int16 intermediates (`hardswish_table_i8`). An
  int8 -> int8 function is one 256-entry table, so the importer tabulates those steps for the
  tensor's parameters and the op runs as Tessel's LUT (on the NPU), exactly.
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fixedpoint import quantize_multiplier

_I16_MIN, _I16_MAX = -(1 << 15), (1 << 15) - 1


def mean_multiplier(in_scale: float, out_scale: float, n: int) -> tuple[int, int]:
    """LiteRT's (q31, shift) of an int8 mean over `n` elements: `s_in / s_out` quantised, then
    shifted left by up to floor(log2 n) bits (at most 32, and the shift stays >= -31) and
    divided by `n`, truncating."""
    q31, shift = quantize_multiplier(float(in_scale) / float(out_scale))
    extra = min(n.bit_length() - 1, 32, 31 + shift)
    return (q31 << extra) // n, shift - extra


# ---------------------------------------------------------------- HARD_SWISH


def _downscale_q31_to_q15(q31: int) -> int:
    """LiteRT's DownScaleInt32ToInt16Multiplier."""
    if q31 >= (1 << 31) - 1 - (1 << 15):
        return _I16_MAX
    return (q31 + (1 << 15)) >> 16


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int16."""
    ab = a * b
    q = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    out = np.sign(q) * (np.abs(q) // (1 << 15))  # C division truncates
    return np.where((a == b) & (a == _I16_MIN), _I16_MAX, out)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SaturatingDoublingHighMul on int16 (truncating, not rounding)."""
    ab = a * b
    out = np.sign(ab) * (np.abs(ab) // (1 << 15))
    return np.where((a == b) & (a == _I16_MIN), _I16_MAX, out)


def _rdbpot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT."""
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def _saturating_left_shift(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), _I16_MIN, _I16_MAX)


def _q15_multiplier(real: np.float32) -> tuple[int, int]:
    q31, shift = quantize_multiplier(float(real))
    return _downscale_q31_to_q15(q31), shift


def hardswish_table_i8(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """int8[256]: entry `k` is LiteRT's int8 HARD_SWISH of input level `k - 128`."""
    hires_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    out_mult, out_exp = _q15_multiplier(hires_scale / np.float32(out_scale))
    relu_mult, relu_exp = _q15_multiplier(hires_scale / np.float32(3.0 / 32768.0))
    hires = (np.arange(-128, 128, dtype=np.int64) - in_zp) * 128
    pre_out = _srdhm16(hires, out_mult)
    reluish = hires
    if relu_exp > 0:
        reluish = _saturating_left_shift(reluish, relu_exp - 1)
    reluish = _srdhm16(reluish, relu_mult)
    if relu_exp > 0:
        reluish = _saturating_left_shift(reluish, 1)
    if relu_exp < 0:
        reluish = _rdbpot(reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1
    out = _rdbpot(_sdhm16(reluish, pre_out), -out_exp) + out_zp
    return np.clip(out, -128, 127).astype(np.int8)
