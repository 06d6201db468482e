"""Lowering rules of softmax and layer norm: q(softmax(dq(x))) -> qsoftmax, q(layer_norm(dq(x),
gamma, beta)) -> qlayer_norm, with every step's parameters planned once here
(`tessel.ops.softmax.plan_softmax`, `tessel.ops.layer_norm.plan_layer_norm`) and stored on
the node as named attributes (the plans' `to_attrs()`), tables as constant operands.
"""

from __future__ import annotations

import numpy as np

from tessel.ir.graph import Node
from tessel.ir.ops import Op
from tessel.ir.types import DType
from tessel.isa.fields import DType as IsaDType
from tessel.ops import layer_norm as layernorm
from tessel.ops import softmax
from tessel.passes.rewriting import Rewriter
from tessel.quant.lower_common import IntVal, QOut, deq, emit, requantize

ISA_DTYPE = {DType.I8: IsaDType.I8, DType.I16: IsaDType.I16}


# q(softmax(dq(x), axis))  =>  qsoftmax(x, exp_table) {plan attributes} [-> requantize]
def lower_softmax(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.SOFTMAX)
    if node is None:
        return None
    x = deq(rw, node.inputs[0])
    if x is None or x.dtype not in ISA_DTYPE:
        return None
    out = QOut.of(q)
    out_dtype = DType.I16 if out.dtype is DType.I16 else DType.I8
    shape = rw.type_of(x.name).shape
    axis = node.attr("axis") % len(shape)
    plan = softmax.plan_softmax(x.scale, x.zp, ISA_DTYPE[x.dtype], ISA_DTYPE[out_dtype],
                                shape[axis])
    table = rw.constant(np.asarray(plan.exp_table, np.int16), hint=f"{node.name}_exp")
    scale, zp = softmax.output_qparams(ISA_DTYPE[out_dtype])
    fixed = IntVal("", scale, zp, out_dtype)
    attrs = {"axis": axis, "dtype": out_dtype, **plan.to_attrs()}
    y = emit(rw, Op.QSOFTMAX, [x.name, table], attrs, fixed.quant, hint=f"{node.name}_q",
             loc=node.loc)
    return requantize(rw, IntVal(y, scale, zp, out_dtype), out, hint=f"{node.name}_rq",
                      loc=node.loc)


# q(layer_norm(dq(x), gamma, beta))  =>  qlayer_norm(x, gamma_q, beta_q) {plan attributes}
def lower_layer_norm(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.LAYER_NORM)
    if node is None or len(node.attr("normalized_shape")) != 1:
        return None
    x = deq(rw, node.inputs[0])
    if x is None or x.dtype not in (DType.I8, DType.I16):
        return None
    n = node.attr("normalized_shape")[0]
    gamma = _const_or(rw, node.inputs[1] if len(node.inputs) > 1 else None, np.ones(n))
    beta = _const_or(rw, node.inputs[2] if len(node.inputs) > 2 else None, np.zeros(n))
    if gamma is None or beta is None:
        return None
    out = QOut.of(q)
    if out.dtype not in ISA_DTYPE:
        return None
    plan = layernorm.plan_layer_norm(x.scale, x.zp, ISA_DTYPE[x.dtype], gamma, beta,
                                     float(node.attr("eps")), out.scale, out.zp,
                                     ISA_DTYPE[out.dtype], n)
    g = rw.constant(np.asarray(plan.gamma_q), hint=f"{node.name}_gamma")
    b = rw.constant(np.asarray(plan.beta_q), hint=f"{node.name}_beta")
    attrs = {"normalized_shape": (n,), "dtype": out.dtype, **plan.to_attrs()}
    return emit(rw, Op.QLAYER_NORM, [x.name, g, b], attrs, out.quant, hint=f"{node.name}_q",
                loc=node.loc)


def _const_or(rw: Rewriter, name: str | None, default: np.ndarray) -> np.ndarray | None:
    if name is None:
        return default.astype(np.float64)
    arr = rw.const(name)
    return None if arr is None else np.asarray(arr, np.float64)
