"""The fast path's float64 form of an ELTWISE MUL by a stride-0 factor, a branch of
``fastvec``'s ``step_bounded`` (``tessel.sim.fastpath`` explains the closures): a dense int8 /
int16 operand ``x`` (zero point 0) times a factor ``f_j`` per distinct value of the other
operand (softmax's reciprocal per row). The int64 form takes about eleven numpy passes,
several of them int64 multiplies and shifts that numpy does not vectorise; this one takes six
float64 passes (eight with the clamp), the rounding right shift's correction included.

Exactness. ``r = f_j x`` with no sat32 (``|r| 2^L <= INT32_MAX``, ``L = max(out_shift, 0)``,
so the saturating left shift changes nothing either), ``e = max(-out_shift, 0)``, ``T = 31 +
e``, ``q`` the output multiplier, ``2^g`` (``g <= 31``) the largest power of two dividing ``q
2^L``, ``X = r q 2^L + 2^30`` the SRDHM argument. The reference output is
(``fastvec.OutStage``, docs/numerics.md) ``y = zp + floor(p + B - delta [X < 0])`` with ``p =
floor(X / 2^g) 2^(g-T)`` (the constants added to ``X`` are multiples of ``2^g``, so flooring
``X`` to ``2^g`` first changes no floor of a quotient by ``2^T``), ``B = 1/2`` and ``delta =
2^-e`` for ``e > 0``, ``B = delta = 0`` for ``e = 0``.

* ``p`` lies on the grid ``gamma = 2^(g-T)``: ``p / gamma = f_j x q_g + (2^30 >> g)`` with
  ``q_g = q 2^L / 2^g`` an integer, so the float64 product ``x (f_j q_g gamma)`` and the sums
  below are exact while ``2 (max |r| q_g + 2^30) + 2^(T-g+2) < 2^53``; ``max |r|`` is this
  run's largest ``|f_j|`` times the type's largest ``|x|`` (checked per run: factors that
  miss it run the int64 form; a layer norm's reciprocal square roots mostly do, and bounding
  ``x`` by this run's extremes instead measured no faster than the int64 form).
* For ``X >= 0``, ``p + B >= 0``: its floor is its truncation. For ``X < 0``, ``floor(p + B -
  delta) = ceil(p + B - delta - 1 + gamma)`` (``p + B - delta`` is on the grid) and that
  argument is ``<= 0``: its ceiling is its truncation. Both are ``trunc(p + m + copysign(a,
  s))``, ``a`` and ``m`` half the difference and the mean of the two offsets, ``s`` of the
  sign of ``X`` (``+0`` non-negative).
* With ``t = 2^30 // (q 2^L)``, factors ``f_j > t`` make ``X < 0`` exactly when ``x < 0``
  (``x <= -1``: ``r q 2^L <= -f_j q 2^L < -2^30``; ``x >= 0``: ``X > 0``), so ``s = x``.

The float to integer conversion truncates; the clamp to ``[act_min - zp, act_max - zp]``
(integers) commutes with it and is left out where the reference outputs at the bounds of ``r``
lie inside the act range. Built only where a factor of an int8 / int16 type can meet the bound
over its whole range (else the per-run check would mostly fail).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import EltOp
from tessel.isa.fixedpoint import INT32_MAX, mbqm_ref

F64 = np.dtype(np.float64)
F64_EXACT = 1 << 53
CLAMP_MEMO_MAX = 4096  # factor extremes whose clamp decision is kept, per closure


def _tz(v: int) -> int:
    """The number of trailing zero bits of ``v > 0``."""
    return (v & -v).bit_length() - 1


class ScaleOut:
    """The output stage's constants of the float form (the module docstring)."""

    def __init__(self, f: dict[str, Any], x_range: tuple[int, int]) -> None:
        q, s = f["out_mult"], f["out_shift"]
        self.f, self.x_range = f, x_range
        L, e = max(s, 0), max(-s, 0)
        T = 31 + e
        qs = q << L
        self.g = g = min(_tz(qs), 31)
        self.q_g = qs >> g
        self.t = (1 << 30) // qs  # X < 0 exactly when x < 0, for factors above t
        gamma = 2.0 ** (g - T)
        b_pos = 0.5 if e else 0.0
        b_neg = b_pos - (2.0 ** -e if e else 0.0) - 1.0 + gamma
        self.a, self.m = (b_pos - b_neg) / 2, (b_pos + b_neg) / 2  # exact: multiples of gamma/2
        self.unit = float(self.q_g) * gamma  # G_j 2^-T = f_j q_g gamma
        self.const = float((1 << 30) >> g) * gamma + self.m
        x_max = max(-x_range[0], x_range[1])
        r_max = (INT32_MAX >> L)  # no saturation of r 2^L
        room = (F64_EXACT - (1 << (T - g + 2))) // 2 - (1 << 30)
        self.r_max = min(r_max, room // self.q_g)  # the largest |r|
        self.f_max = self.r_max // x_max  # the largest factor for every x of the type

    def needs_clamp(self, lo: int, hi: int) -> bool:
        """True unless the reference outputs for factors in ``[lo, hi]`` (times every ``x``)
        lie inside the act range (the output is non-decreasing in ``r``)."""
        f, (x0, x1) = self.f, self.x_range
        ends = [lo * x0, lo * x1, hi * x0, hi * x1]
        y_lo = mbqm_ref(min(ends), f["out_mult"], f["out_shift"]) + f["out_zp"]
        y_hi = mbqm_ref(max(ends), f["out_mult"], f["out_shift"]) + f["out_zp"]
        return y_lo < f["act_min"] or y_hi > f["act_max"]


def build_scale(f: dict[str, Any], eop: EltOp, ops: list, linear: list, k: int
                ) -> FloatScale | None:
    """The float form for ``fastvec``'s ``step_bounded`` (operand ``k`` the stride-0 factor,
    the other dense), or None. ``ops``: both ``fastvec.Operand``s; ``linear``: per operand its
    shift if its contribution is ``(x - zp) << shift`` (int8 / int16), else None."""
    kx = 1 - k
    if (eop != EltOp.MUL or f["out_mult"] <= 0 or linear[kx] != 0
            or f["a_zp" if kx == 0 else "b_zp"] != 0):
        return None
    info = np.iinfo(ops[kx].dt)
    stage = ScaleOut(f, (int(info.min), int(info.max)))
    f_type = np.iinfo(ops[k].dt).max
    if stage.f_max <= stage.t or (f_type < 2**31 - 1 and stage.f_max < f_type):
        return None  # (a narrow factor type: a per-run check that would mostly fail)
    return FloatScale(f, stage)


class FloatScale:
    """``__call__(x, f_j, lo, hi, out)``: the float form on the dense operand's view ``x``
    and the factors ``f_j`` (extremes ``lo``, ``hi``) into the output view, True; or False,
    writing nothing, when the factors miss its conditions (the caller's int64 form)."""

    def __init__(self, f: dict[str, Any], stage: ScaleOut) -> None:
        self.stage = stage
        self.zp = f["out_zp"]
        self.lo_c, self.hi_c = f["act_min"] - self.zp, f["act_max"] - self.zp
        self.f_min, self.f_max = stage.t + 1, stage.f_max
        self.clamps: dict[tuple[int, int], bool] = {}

    def __call__(self, vx: np.ndarray, fj: np.ndarray, lo: int, hi: int, vout: np.ndarray
                 ) -> bool:
        if lo < self.f_min or hi > self.f_max:
            return False
        clamp = self.clamps.get((lo, hi))
        if clamp is None:
            clamp = self.stage.needs_clamp(lo, hi)
            if len(self.clamps) < CLAMP_MEMO_MAX:
                self.clamps[lo, hi] = clamp
        stage = self.stage
        v = vx.astype(F64)
        v *= fj * stage.unit  # exact: f_j q_g gamma, then times x (the module docstring)
        v += stage.const
        v += np.copysign(stage.a, vx, dtype=F64)
        if clamp:
            np.maximum(v, self.lo_c, out=v)
            np.minimum(v, self.hi_c, out=v)
        if self.zp:
            y = v.astype(np.int64)  # truncates
            y += self.zp
            np.copyto(vout, y, casting="unsafe")
        else:
            np.copyto(vout, v, casting="unsafe")  # truncates
        return True
