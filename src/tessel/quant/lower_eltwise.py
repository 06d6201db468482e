"""Lowering rules of the vector engine's element-wise ops: add / sub / mul (and division by a
constant), LUT activations, standalone relu / clamp, and quantize(dequantize(x)).

Each rule is called on a `quantize` node and returns the name of the integer value replacing
it, or None when the float op in front of it does not match.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tessel.ir.graph import Node
from tessel.ir.ops import Op
from tessel.ir.types import DType
from tessel.ops import lut
from tessel.passes.rewriting import Rewriter
from tessel.quant.lower_common import (
    IntVal,
    QOut,
    deq,
    emit,
    fused_act,
    int_operand,
    multiplier,
    requantize,
)

LEFT_SHIFT = {DType.I8: 20, DType.I16: 15}  # TFLite's quantised ADD / SUB


def _add_params(a: IntVal, b: IntVal, out: QOut) -> dict[str, int]:
    """TFLite's ADD parameters (twice_max_input_scale method) for ELTWISE ADD / SUB."""
    wide = DType.I16 in (a.dtype, b.dtype, out.dtype)
    left_shift = LEFT_SHIFT[DType.I16 if wide else DType.I8]
    twice_max = 2.0 * max(a.scale, b.scale)
    am, ash = multiplier(a.scale / twice_max)
    bm, bsh = multiplier(b.scale / twice_max)
    om, osh = multiplier(twice_max / ((1 << left_shift) * out.scale))
    return {"a_zp": a.zp, "b_zp": b.zp, "left_shift": left_shift, "a_multiplier": am,
            "a_shift": ash, "b_multiplier": bm, "b_shift": bsh, "out_multiplier": om,
            "out_shift": osh}


def _operands(rw: Rewriter, node: Node) -> tuple[IntVal, IntVal] | None:
    """Both operands as integer values (a float constant is quantised); one must be runtime."""
    a, b = deq(rw, node.inputs[0]), deq(rw, node.inputs[1])
    if a is None and b is None:
        return None
    a = a or int_operand(rw, node.inputs[0])
    b = b or int_operand(rw, node.inputs[1])
    return (a, b) if a is not None and b is not None else None


# q(act(add | sub(dq(a), dq(b) | const)))  =>  qadd | qsub(a, b) {TFLite rescale, left_shift}
def lower_add_sub(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    node = rw.producer_op(inner, Op.ADD, Op.SUB)
    if node is None:
        return None
    ops = _operands(rw, node)
    if ops is None:
        return None
    out = QOut.of(q)
    attrs = {**_add_params(*ops, out), **out.out_attrs(lo, hi)}
    op = Op.QADD if node.op is Op.ADD else Op.QSUB
    return emit(rw, op, [ops[0].name, ops[1].name], attrs, out.quant, hint=f"{node.name}_q",
                loc=node.loc)


def _reciprocal_constant(rw: Rewriter, node: Node) -> str | None:
    """For div(x, c) with constant c: the name of a new constant 1 / c."""
    c = rw.const(node.inputs[1])
    if c is None or not np.all(np.asarray(c) != 0):
        return None
    inv = (1.0 / np.asarray(c, np.float64)).astype(np.float32)
    return rw.constant(inv, hint=f"{node.name}_recip")


# q(act(mul(dq(a), dq(b) | const))) or q(act(div(dq(a), const)))  =>  qmul(a, b)
def lower_mul(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    node = rw.producer_op(inner, Op.MUL, Op.DIV)
    if node is None:
        return None
    if node.op is Op.DIV:
        recip = _reciprocal_constant(rw, node)
        if recip is None:
            return None
        node = node.replace(inputs=(node.inputs[0], recip))
    ops = _operands(rw, node)
    if ops is None:
        return None
    a, b = ops
    out = QOut.of(q)
    om, osh = multiplier(a.scale * b.scale / out.scale)
    attrs = {"a_zp": a.zp, "b_zp": b.zp, "out_multiplier": om, "out_shift": osh,
             **out.out_attrs(lo, hi)}
    return emit(rw, Op.QMUL, [a.name, b.name], attrs, out.quant, hint=f"{node.name}_q",
                loc=node.loc)


def lut_function(node: Node) -> Callable[[np.ndarray], np.ndarray] | None:
    """The float function of a one-input pointwise op that a LUT can hold (float64 numpy)."""
    if node.op is Op.GELU:
        return lut.gelu_tanh if node.attr("approximate") == "tanh" else lut.gelu_erf
    return {Op.SIGMOID: lut.sigmoid, Op.TANH: lut.tanh, Op.HARDSWISH: lut.hardswish,
            Op.HARDSIGMOID: lut.hardsigmoid, Op.SILU: lut.silu, Op.EXP: lut.exp}.get(node.op)


# q(f(dq(x))) for f = sigmoid, tanh, hardswish, hardsigmoid, silu, exp, gelu  =>  lut(x, table)
def lower_lut(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer(q.inputs[0])
    fn = lut_function(node) if node is not None else None
    if fn is None:
        return None
    x, out = deq(rw, node.inputs[0]), QOut.of(q)
    if x is None or x.dtype is not out.dtype or x.dtype not in (DType.I8, DType.I16):
        return None  # a LUT maps int8 -> int8 or int16 -> int16
    if x.dtype is DType.I8:
        table = lut.make_lut_i8(fn, x.scale, x.zp, out.scale, out.zp, out.qmin, out.qmax)
    else:
        table = lut.make_lut_i16(fn, x.scale, x.zp, out.scale, out.zp)
    t = rw.constant(table, hint=f"{node.name}_table")
    return emit(rw, Op.LUT, [x.name, t], {}, out.quant, hint=f"{node.name}_q", loc=node.loc)


# q(relu | clamp(dq(x)))  =>  requantize(x) {multiplier 1.0 or s_x / s_out, clamp}
def lower_relu_clamp(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    if inner == q.inputs[0]:
        return None
    x = deq(rw, inner)
    if x is None:
        return None
    node = rw.producer(q.inputs[0])
    return requantize(rw, x, QOut.of(q), hint=f"{node.name}_q", loc=node.loc, lo=lo, hi=hi)


# q(dq(x))  =>  x, or requantize(x) when the parameters differ
def lower_requantize(rw: Rewriter, q: Node) -> str | None:
    x = deq(rw, q.inputs[0])
    if x is None:
        return None
    return requantize(rw, x, QOut.of(q), hint=f"{q.name}_rq", loc=q.loc)
