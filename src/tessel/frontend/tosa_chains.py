"""The TOSA exporter's multi-operator chains (tessel.frontend.tosa_export): the exact average
pool, nearest upsampling, the integer softmax and the LUTs, each written so that the TOSA
reference model computes Tessel's integers."""


from __future__ import annotations

import numpy as np

from tessel.frontend.tosa_build import (
    IDENTITY_Q31,
    Builder,
    centred_at,
    loc_of,
    nhwc,
    plan_location,
    refuse,
    tosa_dtype,
    window_pads,
)
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import TosaOp
from tessel.ir import DType, Node, Op
from tessel.ops.softmax import SoftmaxPlan


def qavg_pool(b: Builder, node: Node) -> None:
    """Tessel's POOL AVG, `rounding_div(sum of the valid taps, their count)`: the sums are a
    DEPTHWISE_CONV2D of ones (padding adds 0), the division rounds half away from zero as
    INTDIV (truncating) of `sum +- count // 2` (SELECT on the sign); a RESCALE by one to int8 and
    the CLAMP."""
    nhwc(node)
    a = node.attr_map
    x, pads = window_pads(node, b, node.inputs[0], a["kernel"], (1, 1))
    t = b.get(x)
    n, h, w, c = t.shape
    kh, kw = a["kernel"]
    shape = node.type.shape
    sums = b.op(TosaOp.DEPTHWISE_CONV2D, [
        x, b.const(f"{node.name}_ones", np.ones((kh, kw, c, 1), np.int8), T.INT8),
        b.const(f"{node.name}_b", np.zeros(c, np.int32), T.INT32),
        b.zp(f"{node.name}_x", 0, t.dtype), b.zp(f"{node.name}_w", 0, T.INT8)],
        b.fresh(f"{node.name}_sum"), shape, T.INT32, loc_of(node), pad=pads,
        stride=list(a["stride"]), dilation=[1, 1], local_bound=False, acc_type=int(T.INT32))
    if t.dtype is not T.INT8:
        raise refuse(node, "an int16 average pool (DEPTHWISE_CONV2D of int16 accumulates in 48 "
                           "bits)")
    rows = _valid_taps(h, shape[1], kh, a["stride"][0], a["padding"][0])
    cols = _valid_taps(w, shape[2], kw, a["stride"][1], a["padding"][1])
    count = (rows[:, None] * cols[None, :]).reshape(1, shape[1], shape[2], 1).astype(np.int32)
    cnt = b.const(f"{node.name}_count", count, T.INT32)
    half = b.const(f"{node.name}_half", count // 2, T.INT32)
    zero = b.const(f"{node.name}_zero", np.zeros((1, 1, 1, 1), np.int32), T.INT32)
    pos = b.op(TosaOp.GREATER_EQUAL, [sums, zero], b.fresh(f"{node.name}_pos"), shape, T.BOOL,
               loc_of(node))
    up = b.op(TosaOp.ADD, [sums, half], b.fresh(f"{node.name}_up"), shape, T.INT32, loc_of(node))
    down = b.op(TosaOp.SUB, [sums, half], b.fresh(f"{node.name}_dn"), shape, T.INT32, loc_of(node))
    num = b.op(TosaOp.SELECT, [pos, up, down], b.fresh(f"{node.name}_num"), shape, T.INT32,
               loc_of(node))
    q = b.op(TosaOp.INTDIV, [num, cnt], b.fresh(f"{node.name}_q"), shape, T.INT32, loc_of(node))
    q = b.rescale(q, b.fresh(f"{node.name}_q"), shape, tosa_dtype(node),
                  multiplier=IDENTITY_Q31, shift=1, double_round=False, loc=loc_of(node))
    b.clamp(q, node.name, a["act_min"], a["act_max"], loc_of(node))


def _valid_taps(size: int, out: int, k: int, stride: int, pad: int) -> np.ndarray:
    """Per output position, how many of the k taps fall inside the input."""
    idx = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :]
    return ((idx >= 0) & (idx < size)).sum(axis=1)


def upsample(b: Builder, node: Node) -> None:
    """Nearest upsampling by integer factors: RESIZE NEAREST with scale s / 1, offset
    -(s // 2) and border s - 1 - s // 2 (every output row oy reads input row oy // s)."""
    nhwc(node)
    sy, sx = node.attr("scale")
    hy, hx = sy // 2, sx // 2
    b.op(TosaOp.RESIZE, [node.inputs[0], b.shape(f"{node.name}_scale", (sy, 1, sx, 1)),
                         b.shape(f"{node.name}_offset", (-hy, -hx)),
                         b.shape(f"{node.name}_border", (sy - 1 - hy, sx - 1 - hx))],
         node.name, node.type.shape, tosa_dtype(node), loc_of(node), mode=1)


def qsoftmax(b: Builder, node: Node) -> None:
    """`qsoftmax` (its plan from the node's attributes and exp table)."""
    a = node.attr_map
    plan = SoftmaxPlan.from_attrs(a, b.graph.constant_value(node.inputs[1]))
    softmax_chain(b, node.inputs[0], node.name, plan, a["axis"], tosa_dtype(node))


def softmax_chain(b: Builder, x: str, name: str, plan: SoftmaxPlan, axis: int, out_t: T
                  ) -> dict[str, str]:
    """Tessel's softmax chain (docs/numerics.md): REDUCE_MAX; `x - max` rescaled to int16; the
    int16 exp TABLE (its 32-bit interpolation rounded back by a SINGLE_ROUND RESCALE, as the LUT
    does); REDUCE_SUM; the reciprocal `round(2^30 / s)` as INTDIV of `2^30 + s >> 1`;
    MUL (the product stays below 2^31: every term is at most the sum) and the output RESCALE.
    Every operator is located at the plan (`plan_location`: axis, then the plan's steps);
    returns the name of the exp table's constant."""
    shape = list(b.get(x).shape)
    axis = axis % len(shape)
    row = list(shape)
    row[axis] = 1
    loc = plan_location(name, Op.QSOFTMAX.value, (axis, *plan.to_steps()))
    m = b.op(TosaOp.REDUCE_MAX, [x], b.fresh(f"{name}_max"), row, b.get(x).dtype, loc,
             axis=axis, nan_mode=1)
    diff = b.op(TosaOp.SUB, [centred_at(b, x, 0, 0, name, loc), centred_at(b, m, 0, 0, name, loc)],
                b.fresh(f"{name}_d"), shape, T.INT32, loc)
    d = b.rescale(diff, b.fresh(f"{name}_d"), shape, T.INT16, multiplier=plan.sub_mult,
                  shift=plan.sub_shift, out_zp=plan.sub_zp, loc=loc)
    table = b.const(f"{name}_exp", np.asarray(plan.exp_table, np.int16), T.INT16)
    interp = b.op(TosaOp.TABLE, [d, table], b.fresh(f"{name}_e"), shape, T.INT32, loc)
    e = b.rescale(interp, b.fresh(f"{name}_e"), shape, T.INT16, multiplier=IDENTITY_Q31,
                  shift=-6, double_round=False, loc=loc)  # floor((v + 64) / 128)
    e32 = centred_at(b, e, 0, 0, name, loc)
    s = b.op(TosaOp.REDUCE_SUM, [e32], b.fresh(f"{name}_s"), row, T.INT32, loc, axis=axis)
    ones = (1,) * len(shape)

    def c(hint: str, value: int) -> str:
        return b.const(f"{name}_{hint}", np.full(ones, value, np.int32), T.INT32)

    half = b.op(TosaOp.ARITHMETIC_RIGHT_SHIFT, [s, c("one", 1)], b.fresh(f"{name}_h"), row,
                T.INT32, loc, round=False)
    num = b.op(TosaOp.ADD, [half, c("unit", 1 << plan.recip_frac_bits)],
               b.fresh(f"{name}_n"), row, T.INT32, loc)
    den = b.op(TosaOp.MAXIMUM, [s, c("min", 1)], b.fresh(f"{name}_den"), row, T.INT32, loc,
               nan_mode=1)
    q = b.op(TosaOp.INTDIV, [num, den], b.fresh(f"{name}_q"), row, T.INT32, loc)
    pos = b.op(TosaOp.GREATER, [s, c("zero", 0)], b.fresh(f"{name}_pos"), row, T.BOOL, loc)
    r = b.op(TosaOp.SELECT, [pos, q, c("max", 2**31 - 1)], b.fresh(f"{name}_r"), row,
             T.INT32, loc)
    shift0 = b.const(f"{name}_mshift", np.zeros((1,), np.int8), T.INT8)
    prod = b.op(TosaOp.MUL, [e32, r, shift0], b.fresh(f"{name}_p"), shape, T.INT32, loc)
    y = b.rescale(prod, b.fresh(name), shape, out_t, multiplier=plan.mul_mult,
                  shift=plan.mul_shift, out_zp=plan.out_zp, loc=loc)
    b.clamp(y, name, plan.act_min, plan.act_max, loc)
    return {"exp_table": table}


def lut(b: Builder, node: Node) -> None:
    """int8: TABLE of the table's entries (Tessel's int8 LUT holds int8). int16: TABLE's 32-bit
    interpolation `(base << 7) + slope * frac`, rounded back as Tessel's LUT rounds it
    (`floor((v + 64) / 128)`, a SINGLE_ROUND RESCALE); TOSA requires each slope to fit int16
    where Tessel wraps it, so a table with a wider step is refused."""
    table = b.graph.constant_value(node.inputs[1])
    if table is None:
        raise refuse(node, "the table must be a constant")
    t = np.asarray(table, np.int64)
    if node.type.dtype is DType.I8:
        b.op(TosaOp.TABLE, [node.inputs[0], b.const(f"{node.name}_table", t.astype(np.int8),
                                                    T.INT8)],
             node.name, node.type.shape, T.INT8, loc_of(node))
        return
    if np.any(np.abs(np.diff(t)) > 32767):
        raise refuse(node, "an int16 table step wider than int16 (TOSA's TABLE requires the "
                           "slope to fit; Tessel's LUT wraps it)")
    shape = node.type.shape
    interp = b.op(TosaOp.TABLE, [node.inputs[0], b.const(f"{node.name}_table",
                                                         t.astype(np.int16), T.INT16)],
                  b.fresh(f"{node.name}_i"), shape, T.INT32, loc_of(node))
    b.rescale(interp, node.name, shape, T.INT16, multiplier=IDENTITY_Q31, shift=-6,
              double_round=False, loc=loc_of(node))
