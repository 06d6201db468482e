"""Integer layer norm over the last axis: its NPU instruction chain's parameters and golden value.

The chain (per row of ``n`` elements; docs/numerics.md "Integer softmax, layer norm and LUTs"
derives every bound). ``X = x - in_zp``, ``P`` = mean_bits, ``c`` = scale of the centred values:

1. ``S  = REDUCE SUM(x, in_zp)``                       int32, ``|S| <= n A`` (A = max |X|)
2. ``mu = REQUANT src=SRAM(S) by 2^P / n``              int32, ``mu ~ 2^P mean(X)``
3. ``d  = ELTWISE SUB(x, mu)`` by ``c 2^-P``         int16 (int32 if n = 3, 4), ``d ~ c (X - mean)``
4. ``Q  = REDUCE SUMSQ(d)``                             int32, ``Q <= n (c R / 2 + eps_d)^2``
5. ``v  = REQUANT src=SRAM(Q, bias=var_bias)`` by ~1   int32, ``v ~ Q + n c^2 eps / s_in^2``
6. ``r  = UNARY RSQRT(v, frac_bits=30)``                int32, ``r = floor(2^30 / sqrt(v))``
7. ``t  = ELTWISE MUL(d, r)`` by ``32765 / 2^30``       int16, ``t ~ T (x - mean) / std``
8. ``w  = ELTWISE MUL(t, gamma_q)``                     int32, ``w ~ gamma (x - mean) / std / S_w``
9. ``y  = ELTWISE ADD(w, beta_q)`` by ``S_w / out_scale`` out dtype

Public API (stable):

* ``plan_layer_norm(in_scale, in_zp, in_dtype, gamma, beta, eps, out_scale, out_zp, out_dtype,
  n) -> LayerNormPlan`` (``gamma`` / ``beta``: float arrays of ``n`` values, or None for 1 / 0);
* ``layer_norm_int(x, plan) -> np.ndarray`` (only :mod:`tessel.ops.intops` calls);
  ``layer_norm_steps(x, plan) -> dict`` returns every intermediate (``s mu d q v r t w y``);
* ``LayerNormPlan.to_attrs() -> dict[str, int]``, ``LayerNormPlan.from_attrs(attrs, gamma_q,
  beta_q)``, ``to_steps()`` / ``from_steps(steps, gamma_q, beta_q)`` (flat ints in
  ``LayerNormPlan.attr_names()`` order). ``gamma_q`` (int16[n], symmetric per tensor) and
  ``beta_q`` (int32[n], at scale ``S_w``) are the constant operands.

Attribute names: ``n``, ``in_dtype``, ``in_zp``, ``mean_mult`` / ``mean_shift`` (step 2),
``sub_a_shift`` (step 3's input shift ``P + 1``), ``sub_mult`` / ``sub_shift`` (step 3's output
multiplier), ``d_dtype``, ``var_bias`` / ``var_mult`` / ``var_shift`` (step 5),
``rsqrt_frac_bits`` (step 6), ``norm_mult`` / ``norm_shift`` (step 7), ``gamma_mult`` /
``gamma_shift`` (step 8), ``out_mult`` / ``out_shift`` (step 9), ``out_dtype``, ``out_zp``,
``act_min``, ``act_max``. Fixed parameters (not attributes): step 2 bias 0, out_zp 0, clamp
int32; step 3 ``a_zp = in_zp``, ``b_zp = 0``, ``left_shift = 0``, ``a_mult = 2^30`` (with
``sub_a_shift``: exactly ``2^P``), ``b`` multiplier ``(2^30, 1)`` (exactly 1), out_zp 0, clamp
to ``d_dtype``; step 4 ``in_zp = 0``; step 5 out_zp 0, clamp ``[0, INT32_MAX]``; steps 7-8
zero points 0, clamp to int16 / int32; step 9 ``left_shift = 0``, both input multipliers
``(2^30, 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from tessel.errors import TesselConfigError
from tessel.isa.fields import DType, EltOp, ReduceOp, UnaryOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN, multiplier_value, quantize_multiplier
from tessel.isa.limits import MAX_EXTENT
from tessel.ops import intops
from tessel.ops.softmax import ONE_MULT, ONE_SHIFT, PlanAttrs, frozen_array

MAX_MEAN_BITS = 16
RSQRT_FRAC_BITS = 30
NORM_LIMIT = 32765  # |t| <= 32765 (1 + 2^-30) + 1 <= 32767: step 7 never clamps
W_LIMIT = 2**29  # |w|, |beta_q| <= 2^29: step 9's inputs x 2 and their sum fit int32
VAR_MULT, VAR_SHIFT = INT32_MAX, 0  # (2^31 - 1, 0): x for x <= 2^30, else x or x - 1


@dataclass(frozen=True)
class LayerNormPlan(PlanAttrs):
    """Every parameter of the integer layer-norm chain (see the module docstring)."""

    ARRAYS: ClassVar[tuple[str, ...]] = ("gamma_q", "beta_q")

    n: int
    in_dtype: DType
    in_zp: int
    mean_mult: int
    mean_shift: int
    sub_a_shift: int
    sub_mult: int
    sub_shift: int
    d_dtype: DType
    var_bias: int
    var_mult: int
    var_shift: int
    rsqrt_frac_bits: int
    norm_mult: int
    norm_shift: int
    gamma_mult: int
    gamma_shift: int
    out_mult: int
    out_shift: int
    out_dtype: DType
    out_zp: int
    act_min: int
    act_max: int
    gamma_q: np.ndarray = field(compare=False, repr=False)
    beta_q: np.ndarray = field(compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma_q", frozen_array(self.gamma_q, np.int16, (self.n,),
                                                         "gamma_q"))
        object.__setattr__(self, "beta_q", frozen_array(self.beta_q, np.int32, (self.n,),
                                                        "beta_q"))

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any], gamma_q: npt.ArrayLike,
                   beta_q: npt.ArrayLike) -> LayerNormPlan:
        return cls._build(attrs, {"gamma_q": gamma_q, "beta_q": beta_q})

    @classmethod
    def from_steps(cls, steps: Sequence[int], gamma_q: npt.ArrayLike,
                   beta_q: npt.ArrayLike) -> LayerNormPlan:
        return cls._from_steps(steps, {"gamma_q": gamma_q, "beta_q": beta_q})


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


def _mean_bits(a_max: int) -> int:
    """Largest P <= 16 with ``A 2^(P+1) + 8 <= INT32_MAX`` (steps 2-3 never saturate)."""
    for p in range(MAX_MEAN_BITS, -1, -1):
        if a_max * 2 ** (p + 1) + 8 <= INT32_MAX:
            return p
    raise TesselConfigError(f"layer norm: input magnitude {a_max} too large for int32")


def _centred_scale(n: int, r: int, p: int, eps_x: float) -> tuple[float, int]:
    """Largest multiplier ``c`` (step 3) and eps bias with ``n (c' R/2 + e)^2 + B <= INT32_MAX``.

    ``c'`` is the quantised multiplier's value, ``e = 1 + 3 c' 2^-P`` bounds each ``d``'s
    deviation from ``c' (X - mean)`` and ``B = round(n c'^2 eps_x)`` (eps in X units^2).
    """
    c = math.sqrt(INT32_MAX / (n * (r * r / 4.0 + eps_x)))
    for _ in range(200):
        cq = multiplier_value(*quantize_multiplier(c * 2.0**-p)) * 2.0**p
        e = 1.0 + 3.0 * cq * 2.0**-p
        bias = round(n * cq * cq * eps_x)
        if n * (cq * r / 2.0 + e) ** 2 + bias <= INT32_MAX:
            return c, bias
        c *= 0.999
    raise TesselConfigError("layer norm: no centred-value scale satisfies the SUMSQ bound")


def _check_inputs(in_scale: float, in_zp: int, in_dtype: DType, out_scale: float,
                  out_zp: int, out_dtype: DType, n: int, eps: float) -> None:
    for dt, what in ((in_dtype, "input"), (out_dtype, "output")):
        if dt not in (DType.I8, DType.I16):
            raise TesselConfigError(f"layer norm {what} dtype must be I8 or I16, got {dt!r}")
    for s, what in ((in_scale, "in_scale"), (out_scale, "out_scale")):
        if not (math.isfinite(s) and s > 0):
            raise TesselConfigError(f"layer norm {what} must be finite and > 0, got {s!r}")
    if not in_dtype.lo <= in_zp <= in_dtype.hi or not out_dtype.lo <= out_zp <= out_dtype.hi:
        raise TesselConfigError(f"layer norm zero points {in_zp} / {out_zp} outside their types")
    if not 1 <= n <= MAX_EXTENT:
        raise TesselConfigError(f"layer norm size {n} outside the REDUCE extent [1, {MAX_EXTENT}]")
    if not (math.isfinite(eps) and eps >= 0):
        raise TesselConfigError(f"layer norm eps must be finite and >= 0, got {eps!r}")


def _vector(v: npt.ArrayLike | None, n: int, default: float, what: str) -> np.ndarray:
    arr = np.full(n, default) if v is None else np.asarray(v, np.float64).reshape(-1)
    if arr.shape != (n,) or not np.isfinite(arr).all():
        raise TesselConfigError(f"layer norm {what}: expected {n} finite values, got "
                                f"shape {arr.shape}")
    return arr


def _affine(gamma: np.ndarray, beta: np.ndarray, norm_scale: float, out_scale: float
            ) -> tuple[np.ndarray, np.ndarray, tuple[int, int], tuple[int, int]]:
    """gamma_q, beta_q and the multipliers of steps 8 (gamma) and 9 (output)."""
    g_abs = float(np.abs(gamma).max())
    s_g = g_abs / 32767.0 if g_abs > 0 else 1.0
    gamma_q = np.clip(np.round(gamma / s_g), -32767, 32767).astype(np.int16)
    # |t gamma_q| <= 32767^2 (1 / norm_scale in real units x s_g): the w scale S_w keeps
    # |w| and |beta_q| <= 2^29
    top = max(32767.0 * 32767.0 * s_g / norm_scale, float(np.abs(beta).max()))
    s_w = top / W_LIMIT if top > 0 else 1.0
    beta_q = np.clip(np.round(beta / s_w), -W_LIMIT, W_LIMIT).astype(np.int32)
    gamma_m = quantize_multiplier(s_g / (norm_scale * s_w))
    out_m = quantize_multiplier(s_w / out_scale)
    return gamma_q, beta_q, gamma_m, out_m


def plan_layer_norm(in_scale: float, in_zp: int, in_dtype: DType, gamma: npt.ArrayLike | None,
                    beta: npt.ArrayLike | None, eps: float, out_scale: float, out_zp: int,
                    out_dtype: DType, n: int) -> LayerNormPlan:
    """Parameters of the integer layer norm over the last axis (``n`` elements) of an
    ``in_dtype`` tensor with (``in_scale``, ``in_zp``), to (``out_scale``, ``out_zp``)."""
    _check_inputs(in_scale, in_zp, in_dtype, out_scale, out_zp, out_dtype, n, eps)
    g = _vector(gamma, n, 1.0, "gamma")
    b = _vector(beta, n, 0.0, "beta")
    a_max = max(in_dtype.hi - in_zp, in_zp - in_dtype.lo)
    r = in_dtype.hi - in_dtype.lo
    if n * a_max > INT32_MAX:
        raise TesselConfigError(f"layer norm: REDUCE SUM of {n} values could saturate")
    p = _mean_bits(a_max)
    mean_mult, mean_shift = quantize_multiplier(2.0**p / n)
    c, var_bias = _centred_scale(n, r, p, eps / (in_scale * in_scale))
    sub_mult, sub_shift = quantize_multiplier(c * 2.0**-p)
    if sub_shift > 0:  # c < 2^(P-1) always holds for int8 / int16 inputs; kept as a check
        raise TesselConfigError("layer norm: centred-value multiplier would left-shift")
    cq = multiplier_value(sub_mult, sub_shift) * 2.0**p
    d_max = cq * r * (n - 1) / n + 1.0 + 3.0 * cq * 2.0**-p
    d_dtype = DType.I16 if d_max <= DType.I16.hi else DType.I32
    norm_mult, norm_shift = quantize_multiplier(NORM_LIMIT / 2.0**RSQRT_FRAC_BITS)
    # t = (x - mean) / std * T with T = 32765 / sqrt(n); 1 unit of t is 1 / T in real units
    norm_scale = NORM_LIMIT / math.sqrt(n)
    gamma_q, beta_q, (g_m, g_s), (o_m, o_s) = _affine(g, b, norm_scale, out_scale)
    return LayerNormPlan(
        n, in_dtype, in_zp, mean_mult, mean_shift, p + 1, sub_mult, sub_shift, d_dtype,
        var_bias, VAR_MULT, VAR_SHIFT, RSQRT_FRAC_BITS, norm_mult, norm_shift, g_m, g_s,
        o_m, o_s, out_dtype, out_zp, out_dtype.lo, out_dtype.hi, gamma_q, beta_q)


# --------------------------------------------------------------------------------------------
# The chain
# --------------------------------------------------------------------------------------------


def layer_norm_int(x: npt.ArrayLike, plan: LayerNormPlan) -> np.ndarray:
    """Integer layer norm of ``x`` over its last axis: the nine NPU steps, bit-exact."""
    return layer_norm_steps(x, plan)["y"]


def layer_norm_steps(x: npt.ArrayLike, plan: LayerNormPlan) -> dict[str, np.ndarray]:
    """Every intermediate of :func:`layer_norm_int`: ``s mu d q v r t w y`` (per-row values
    keep a last axis of size 1)."""
    xs = np.asarray(x)
    if xs.dtype != intops.np_dtype(plan.in_dtype) or xs.shape[-1:] != (plan.n,):
        raise TesselConfigError(f"layer_norm_int: input {xs.dtype}{list(xs.shape)} does not "
                                f"match the plan ({plan.in_dtype.name}, last axis {plan.n})")
    st: dict[str, np.ndarray] = {}
    st["s"] = intops.reduce(xs, ReduceOp.SUM, -1, plan.in_zp)[..., None]
    st["mu"] = intops.requant(st["s"], 0, plan.mean_mult, plan.mean_shift, 0, INT32_MIN,
                              INT32_MAX, DType.I32)
    st["d"] = intops.eltwise(
        EltOp.SUB, xs, st["mu"], a_zp=plan.in_zp, b_zp=0, left_shift=0, a_mult=ONE_MULT,
        a_shift=plan.sub_a_shift, b_mult=ONE_MULT, b_shift=ONE_SHIFT, out_mult=plan.sub_mult,
        out_shift=plan.sub_shift, out_zp=0, act_min=plan.d_dtype.lo, act_max=plan.d_dtype.hi,
        out_dtype=plan.d_dtype)
    st["q"] = intops.reduce(st["d"], ReduceOp.SUMSQ, -1, 0)[..., None]
    st["v"] = intops.requant(st["q"], plan.var_bias, plan.var_mult, plan.var_shift, 0, 0,
                             INT32_MAX, DType.I32)
    st["r"] = intops.unary(st["v"], UnaryOp.RSQRT, plan.rsqrt_frac_bits)
    st["t"] = intops.eltwise(EltOp.MUL, st["d"], st["r"], out_mult=plan.norm_mult,
                             out_shift=plan.norm_shift, act_min=DType.I16.lo,
                             act_max=DType.I16.hi, out_dtype=DType.I16)
    st["w"] = intops.eltwise(EltOp.MUL, st["t"], plan.gamma_q, out_mult=plan.gamma_mult,
                             out_shift=plan.gamma_shift, act_min=INT32_MIN, act_max=INT32_MAX,
                             out_dtype=DType.I32)
    st["y"] = intops.eltwise(EltOp.ADD, st["w"], plan.beta_q, a_mult=ONE_MULT,
                             a_shift=ONE_SHIFT, b_mult=ONE_MULT, b_shift=ONE_SHIFT,
                             out_mult=plan.out_mult, out_shift=plan.out_shift,
                             out_zp=plan.out_zp, act_min=plan.act_min, act_max=plan.act_max,
                             out_dtype=plan.out_dtype)
    return st
