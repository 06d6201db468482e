"""Tessel's integer layer norm (`qlayer_norm`, tessel.ops.layer_norm) as TOSA integer operators.

The nine steps of the chain map to REDUCE_SUM, RESCALE, SUB, MUL, ADD and CLAMP as they are; the
one step TOSA has no operator for is UNARY RSQRT, `r = min(isqrt(floor(2^60 / v)), INT32_MAX)`
(`INT32_MAX` for `v <= 0`), an exact integer inverse square root that needs 64-bit
intermediates. `rsqrt` writes it with int32 operators only, every intermediate inside int32:

* `Y = floor(2^60 / v)` as two 30-bit words: the high word is `INTDIV(2^30, v)`, the low word
  30 steps of binary long division of the remainder (a step: `2 rem >= v` tested as
  `rem >= v - rem`, so `2 rem` is never formed when it would overflow);
* `r = isqrt(Y)` by binary search over the 30 bits of `r` (`r < 2^30` once `v >= 2`): each
  candidate's square in two 30-bit words (15-bit halves, three MULs) is compared with `Y`;
* `v = 1` gives `2^30`, `v <= 0` gives `INT32_MAX` (SELECT).

`chain` writes the whole layer norm with every operator located at its plan
(`tosa_build.plan_location`), so that the importer can find the run and check it against the
chain the plan writes (`tosa_planned`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tessel.frontend.tosa_build import Builder, centred_at, plan_location, refuse, tosa_dtype
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import TosaOp
from tessel.ir import Node, Op
from tessel.isa.fields import DType as IsaDType
from tessel.isa.fixedpoint import INT32_MAX
from tessel.ops.layer_norm import RSQRT_FRAC_BITS, LayerNormPlan
from tessel.ops.softmax import ONE_SHIFT

WORD = RSQRT_FRAC_BITS  # bits of each word of Y = floor(2^(2 WORD) / v); the root's bits
HALF = WORD // 2  # bits of the halves a candidate root is squared in
UP, CARRY = HALF + 1, WORD - HALF - 1  # the cross term's shift; its bits below a word


class _Scalars:
    """int32 constants of one shape, written once each."""

    def __init__(self, b: Builder, hint: str, rank: int) -> None:
        self.b, self.hint, self.rank, self.names = b, hint, rank, {}

    def __call__(self, value: int) -> str:
        if value not in self.names:
            self.names[value] = self.b.const(f"{self.hint}_k", np.full((1,) * self.rank, value,
                                                                       np.int32), T.INT32)
        return self.names[value]


def rsqrt(b: Builder, v: str, hint: str, loc: str) -> str:
    """int32 `r` of UNARY RSQRT with 30 fraction bits of the int32 tensor `v` (module doc)."""
    shape = b.get(v).shape
    k = _Scalars(b, hint, len(shape))

    def op(kind: TosaOp, ins: Sequence[str], dtype: T = T.INT32, **attrs: object) -> str:
        return b.op(kind, list(ins), b.fresh(hint), shape, dtype, loc, **attrs)

    zero = b.const(f"{hint}_mshift", np.zeros((1,), np.int8), T.INT8)
    vs = op(TosaOp.MAXIMUM, [v, k(2)], nan_mode=1)
    y_hi = op(TosaOp.INTDIV, [k(1 << WORD), vs])
    rem = op(TosaOp.SUB, [k(1 << WORD), op(TosaOp.MUL, [y_hi, vs, zero])])
    zeros = op(TosaOp.SUB, [vs, vs])  # of the row's shape
    y_lo = zeros
    for bit in range(WORD - 1, -1, -1):
        take = op(TosaOp.GREATER_EQUAL, [rem, op(TosaOp.SUB, [vs, rem])], T.BOOL)
        rem = op(TosaOp.ADD, [rem, op(TosaOp.SELECT, [take, op(TosaOp.SUB, [rem, vs]), rem])])
        y_lo = op(TosaOp.ADD, [y_lo, op(TosaOp.SELECT, [take, k(1 << bit), k(0)])])
    r = zeros
    for bit in range(WORD - 1, -1, -1):
        t = op(TosaOp.ADD, [r, k(1 << bit)])
        th = op(TosaOp.ARITHMETIC_RIGHT_SHIFT, [t, k(HALF)], round=False)
        tl = op(TosaOp.BITWISE_AND, [t, k((1 << HALF) - 1)])
        hh, hl, ll = (op(TosaOp.MUL, [p, q, zero]) for p, q in ((th, th), (th, tl), (tl, tl)))
        # t^2 = hh 2^30 + hl 2^16 + ll (2 th tl 2^15); with UP = 16, CARRY = 14:
        # hl 2^16 = (hl >> 14) 2^30 + (hl & (2^14 - 1)) 2^16
        low = op(TosaOp.ADD, [op(TosaOp.LOGICAL_LEFT_SHIFT, [
            op(TosaOp.BITWISE_AND, [hl, k((1 << CARRY) - 1)]), k(UP)]), ll])
        high = op(TosaOp.ADD, [op(TosaOp.ADD, [hh, op(TosaOp.ARITHMETIC_RIGHT_SHIFT,
                                                       [hl, k(CARRY)], round=False)]),
                               op(TosaOp.ARITHMETIC_RIGHT_SHIFT, [low, k(WORD)], round=False)])
        low = op(TosaOp.BITWISE_AND, [low, k((1 << WORD) - 1)])
        fits = op(TosaOp.SELECT, [op(TosaOp.EQUAL, [high, y_hi], T.BOOL),
                                  op(TosaOp.GREATER_EQUAL, [y_lo, low], T.BOOL),
                                  op(TosaOp.GREATER, [y_hi, high], T.BOOL)], T.BOOL)
        r = op(TosaOp.SELECT, [fits, t, r])
    one = op(TosaOp.SELECT, [op(TosaOp.EQUAL, [v, k(1)], T.BOOL), k(1 << RSQRT_FRAC_BITS),
                             k(INT32_MAX)])
    return op(TosaOp.SELECT, [op(TosaOp.GREATER, [v, k(1)], T.BOOL), r, one])


def layer_norm(b: Builder, node: Node) -> None:
    """`qlayer_norm` (its plan from the node's attributes and constant operands)."""
    g = b.graph
    plan = LayerNormPlan.from_attrs(node.attr_map, g.constant_value(node.inputs[1]),
                                    g.constant_value(node.inputs[2]))
    if plan.d_dtype is not IsaDType.I16:
        raise refuse(node, f"centred values of type {plan.d_dtype.name} (a row of {plan.n}: "
                           "their squares need not fit int32)")
    if plan.rsqrt_frac_bits != RSQRT_FRAC_BITS:
        raise refuse(node, f"an inverse square root with {plan.rsqrt_frac_bits} fraction bits")
    chain(b, node.inputs[0], node.name, plan, tosa_dtype(node))


def chain(b: Builder, x: str, name: str, plan: LayerNormPlan, out_t: T) -> dict[str, str]:
    """The nine steps of tessel.ops.layer_norm.layer_norm_steps, each as TOSA computes it
    exactly (the plan's bounds keep every int32 sum and product inside int32), into tensor
    `name`; returns the names of the gamma and beta constants."""
    loc = plan_location(name, Op.QLAYER_NORM.value, plan.to_steps())
    shape = list(b.get(x).shape)
    row = [*shape[:-1], 1]
    k = _Scalars(b, name, len(shape))
    zero = b.const(f"{name}_mshift", np.zeros((1,), np.int8), T.INT8)

    def op(kind: TosaOp, ins: Sequence[str], shp: Sequence[int], dtype: T = T.INT32,
           **attrs: object) -> str:
        return b.op(kind, list(ins), b.fresh(name), shp, dtype, loc, **attrs)

    def rescale(v: str, shp: Sequence[int], dtype: T, mult: int, shift: int) -> str:
        return b.rescale(v, b.fresh(name), shp, dtype, multiplier=mult, shift=shift, loc=loc)

    s = op(TosaOp.REDUCE_SUM, [centred_at(b, x, plan.in_zp, 0, name, loc)], row,
           axis=len(shape) - 1)
    mu = rescale(s, row, T.INT32, plan.mean_mult, plan.mean_shift)
    a = centred_at(b, x, plan.in_zp, plan.sub_a_shift - ONE_SHIFT, name, loc)
    d = rescale(op(TosaOp.SUB, [a, mu], shape), shape, T.INT16, plan.sub_mult, plan.sub_shift)
    d32 = centred_at(b, d, 0, 0, name, loc)
    q = op(TosaOp.REDUCE_SUM, [op(TosaOp.MUL, [d32, d32, zero], shape)], row,
           axis=len(shape) - 1)
    if plan.var_bias:  # sat32(q + bias): q bounded first so that the sum cannot overflow
        bias = plan.var_bias
        bound = (TosaOp.MINIMUM, INT32_MAX - bias) if bias > 0 else (TosaOp.MAXIMUM, -2**31 - bias)
        q = op(TosaOp.ADD, [op(bound[0], [q, k(bound[1])], row, nan_mode=1), k(bias)], row)
    v = rescale(q, row, T.INT32, plan.var_mult, plan.var_shift)
    v = op(TosaOp.MAXIMUM, [v, k(0)], row, nan_mode=1)  # CLAMP takes no int32
    r = rsqrt(b, v, f"{name}_rsqrt", loc)
    t = rescale(op(TosaOp.MUL, [d32, r, zero], shape), shape, T.INT16, plan.norm_mult,
                plan.norm_shift)
    lead = (1,) * (len(shape) - 1)
    gamma = b.const(f"{name}_gamma", np.asarray(plan.gamma_q, np.int32).reshape(
        (*lead, plan.n)), T.INT32)
    w = rescale(op(TosaOp.MUL, [centred_at(b, t, 0, 0, name, loc), gamma, zero], shape), shape,
                T.INT32, plan.gamma_mult, plan.gamma_shift)
    beta = b.const(f"{name}_beta", np.asarray(plan.beta_q, np.int32).reshape((*lead, plan.n)),
                   T.INT32)
    total = op(TosaOp.ADD, [w, beta], shape)
    y = b.rescale(total, b.fresh(name), shape, out_t, multiplier=plan.out_mult,
                  shift=plan.out_shift, out_zp=plan.out_zp, loc=loc)
    b.clamp(y, name, plan.act_min, plan.act_max, loc)
    return {"gamma": gamma, "beta": beta}

