"""Element-wise functions of two tensors (numpy broadcasting): add, sub, mul, div, maximum,
minimum, pow; and the integer ops add, sub and mul (and division by a constant) lower to:
`qadd` / `qsub` (TFLite's rescale: a left shift, a multiplier per input and one for the
output) and `qmul`, run by the vector engine's ELTWISE (tessel.ops.eltwise_emit). Their optional
`rounding` attribute (a Rounding; absent: DOUBLE) is ELTWISE's: SINGLE rounds each of the
multiplications once, as TOSA's SINGLE_ROUND RESCALEs around an ADD do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Node
from tessel.ir.ops import Op, OpSpec, broadcast_type, require
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import DType, TensorType
from tessel.isa.fields import EltOp
from tessel.isa.fixedpoint import Rounding, quantize_product_multiplier
from tessel.ops import eltwise_emit, intops
from tessel.ops.base import LayoutRule, Npu, OpDef, Trait, lazy_torch, register
from tessel.ops.quantise import (
    OUT_ATTRS,
    OUT_FIELDS,
    ROUNDING_ATTR,
    IntVal,
    QOut,
    deq,
    emit,
    fused_act,
    int_operand,
    int_result,
    multiplier,
    require_int,
    rounding_of,
)

LEFT_SHIFT = {DType.I8: 20, DType.I16: 15}  # TFLite's quantised ADD / SUB


def _binary_kernel(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
                   ) -> Callable[[Mapping[str, Any], list[np.ndarray]], np.ndarray]:
    def k(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
        out = fn(xs[0], xs[1])
        if xs[0].dtype.kind in "iu" and fn is np.divide:  # torch: int / int -> true division
            return out.astype(np.float32)
        return np.asarray(out).astype(np.result_type(xs[0], xs[1]))
    return k


def _torch(name: str) -> Callable[[Mapping[str, Any], list[Any]], Any]:
    return lambda a, xs: getattr(lazy_torch(), name)(*xs)


# ---------------------------------------------------------------- integer ops


def _qbinary_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 2)
    a, b = ts
    shape = broadcast_type([a, b if a.dtype == b.dtype else TensorType(b.shape, a.dtype)], attrs)
    rounding = attrs.get("rounding")
    require(rounding is None or rounding in set(Rounding),
            f"rounding {rounding} is not one of {[int(r) for r in Rounding]}")
    return int_result(shape, attrs)


def _elt_params(a: Mapping[str, Any]) -> dict[str, Any]:
    return {"a_zp": a["a_zp"], "b_zp": a["b_zp"], "left_shift": a["left_shift"],
            "a_mult": a["a_multiplier"], "a_shift": a["a_shift"], "b_mult": a["b_multiplier"],
            "b_shift": a["b_shift"], "out_mult": a["out_multiplier"],
            "out_shift": a["out_shift"], "out_zp": a["out_zp"], "act_min": a["act_min"],
            "act_max": a["act_max"], "out_dtype": a["dtype"].numpy, "rounding": rounding_of(a)}


def _qadd_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE ADD (TFLite rescale: left shift, per-input and output multipliers)."""
    return intops.eltwise(EltOp.ADD, xs[0], xs[1], **_elt_params(a))


def _qsub_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE SUB."""
    return intops.eltwise(EltOp.SUB, xs[0], xs[1], **_elt_params(a))


def _qmul_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE MUL: sat32((a - a_zp) * (b - b_zp)), then the output multiplier."""
    return intops.eltwise(EltOp.MUL, xs[0], xs[1], a_zp=a["a_zp"], b_zp=a["b_zp"],
                          out_mult=a["out_multiplier"], out_shift=a["out_shift"],
                          out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"],
                          out_dtype=a["dtype"].numpy, rounding=rounding_of(a))


# ---------------------------------------------------------------- QDQ -> integer


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
    om, osh = quantize_product_multiplier(a.scale * b.scale / out.scale)
    attrs = {"a_zp": a.zp, "b_zp": b.zp, "out_multiplier": om, "out_shift": osh,
             **out.out_attrs(lo, hi)}
    return emit(rw, Op.QMUL, [a.name, b.name], attrs, out.quant, hint=f"{node.name}_q",
                loc=node.loc)


# ---------------------------------------------------------------- the definitions

_OPERANDS = ("lhs", "rhs")
_I = AttrKind.INT
_ZPS = {"a_zp": AttrSpec(_I), "b_zp": AttrSpec(_I)}
_ADD_ATTRS = {**_ZPS, "left_shift": AttrSpec(_I, 0), "a_multiplier": AttrSpec(_I),
              "a_shift": AttrSpec(_I), "b_multiplier": AttrSpec(_I), "b_shift": AttrSpec(_I),
              "out_multiplier": AttrSpec(_I), "out_shift": AttrSpec(_I), **OUT_ATTRS}
_MUL_ATTRS = {**_ZPS, "out_multiplier": AttrSpec(_I), "out_shift": AttrSpec(_I), **OUT_ATTRS}
_ADD_FREE = frozenset(k for k in _ADD_ATTRS if k != "dtype")
_MUL_FREE = frozenset(k for k in _MUL_ATTRS if k != "dtype")
_ADD_ATTRS, _MUL_ATTRS = {**_ADD_ATTRS, **ROUNDING_ATTR}, {**_MUL_ATTRS, **ROUNDING_ATTR}
assert OUT_FIELDS <= _ADD_FREE and OUT_FIELDS <= _MUL_FREE
_INT_POINTWISE = frozenset({Trait.INTEGER, Trait.POINTWISE})


def _float(op: Op, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], torch: str,
           lower: tuple = ()) -> OpDef:
    return OpDef(op, OpSpec(_OPERANDS, broadcast_type), kernel=_binary_kernel(fn),
                 torch=_torch(torch), layout=LayoutRule.BROADCAST, lower=lower)


def _integer(op: Op, attrs: Mapping[str, AttrSpec], golden: Any, free: frozenset[str]) -> OpDef:
    return OpDef(op, OpSpec(_OPERANDS, _qbinary_type, attrs), golden=golden,
                 layout=LayoutRule.BROADCAST,
                 npu=Npu(eltwise_emit, matrix=False, quant_free=free), traits=_INT_POINTWISE)


register(
    _float(Op.ADD, np.add, "add", (lower_add_sub,)),
    _float(Op.SUB, np.subtract, "sub", (lower_add_sub,)),
    _float(Op.MUL, np.multiply, "mul", (lower_mul,)),
    _float(Op.DIV, np.divide, "div", (lower_mul,)),
    _float(Op.MAXIMUM, np.maximum, "maximum"),
    _float(Op.MINIMUM, np.minimum, "minimum"),
    _float(Op.POW, np.power, "pow"),
    _integer(Op.QADD, _ADD_ATTRS, _qadd_golden, _ADD_FREE),
    _integer(Op.QSUB, _ADD_ATTRS, _qsub_golden, _ADD_FREE),
    _integer(Op.QMUL, _MUL_ATTRS, _qmul_golden, _MUL_FREE),
)
