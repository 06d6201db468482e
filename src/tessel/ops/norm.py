"""Softmax, layer norm and scaled dot-product attention (decomposed into matmuls and a softmax
by a float pass); and the integer chains softmax and layer norm lower to, `qsoftmax` and
`qlayer_norm` (docs/numerics.md: every step's parameters planned once by
tessel.ops.softmax / tessel.ops.layer_norm and stored on the node as named attributes, tables
as constant operands), run on the vector engine by tessel.ops.norm_emit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Graph, Node
from tessel.ir.ops import InferError, Op, OpSpec, axis_index, broadcast_shapes, require, same_type
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import DType, TensorType
from tessel.isa.fields import DType as IsaDType
from tessel.ops import layer_norm, lut, norm_emit, softmax
from tessel.ops.base import LayoutRule, Npu, OpDef, Trait, lazy_functional, register
from tessel.ops.quantise import IntVal, QOut, deq, emit, int_result, requantize, require_int

ISA_DTYPE = {DType.I8: IsaDType.I8, DType.I16: IsaDType.I16}


# ---------------------------------------------------------------- shape rules


def _layer_norm_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    ns = tuple(attrs["normalized_shape"])
    require(x.shape[x.rank - len(ns):] == ns, f"normalized_shape {list(ns)} != trailing dims")
    for t in ts[1:]:
        require(t.shape == ns, f"affine parameter shape {list(t.shape)} != {list(ns)}")
    return TensorType(x.shape, x.dtype, x.layout)


def _softmax_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    axis_index(attrs["axis"], ts[0].rank)
    return same_type(ts, attrs)


def _sdpa_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    q, k, v = ts[:3]
    require(q.rank >= 2 and k.rank == q.rank and v.rank == q.rank, "q, k, v must share rank >= 2")
    require(q.shape[-1] == k.shape[-1], f"q/k head dims differ: {q.shape[-1]} vs {k.shape[-1]}")
    require(k.shape[-2] == v.shape[-2], f"k/v lengths differ: {k.shape[-2]} vs {v.shape[-2]}")
    if len(ts) > 3:
        scores = q.shape[:-1] + (k.shape[-2],)
        require(broadcast_shapes(ts[3].shape, scores) == scores, "mask does not broadcast to scores")
    return TensorType(q.shape[:-1] + (v.shape[-1],), q.dtype)


def _qsoftmax_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    if ts[1].shape != (lut.I16_ENTRIES,) or ts[1].dtype is not DType.I16:
        raise InferError(f"qsoftmax exp table must be i16[{lut.I16_ENTRIES}], got "
                         f"{ts[1].text()}")
    axis_len = ts[0].shape[attrs["axis"] % max(ts[0].rank, 1)] if ts[0].rank else 1
    if attrs["axis_len"] != axis_len:
        raise InferError(f"qsoftmax axis_len {attrs['axis_len']} != axis extent {axis_len}")
    return int_result(_softmax_type(ts[:1], attrs), attrs)


def _qlayer_norm_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 1)
    n = attrs["n"]
    if tuple(attrs["normalized_shape"]) != (n,) or ts[0].shape[-1:] != (n,):
        raise InferError(f"qlayer_norm normalizes the last axis of {n} elements; got "
                         f"normalized_shape {list(attrs['normalized_shape'])}, input "
                         f"{list(ts[0].shape)}")
    if ts[1].shape != (n,) or ts[1].dtype is not DType.I16:
        raise InferError(f"qlayer_norm gamma must be i16[{n}], got {ts[1].text()}")
    if ts[2].shape != (n,) or ts[2].dtype is not DType.I32:
        raise InferError(f"qlayer_norm beta must be i32[{n}], got {ts[2].text()}")
    return int_result(ts[0], attrs)


# ---------------------------------------------------------------- kernels


def _layer_norm(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    axes = tuple(range(x.ndim - len(a["normalized_shape"]), x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + a["eps"])
    if len(xs) > 1:
        y = y * xs[1]
    if len(xs) > 2:
        y = y + xs[2]
    return y.astype(x.dtype)


def _softmax(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return (e / e.sum(axis=a["axis"], keepdims=True)).astype(x.dtype)


def _sdpa(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    q, k, v = xs[:3]
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(a["scale"])
    if a["causal"]:
        lq, lk = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((lq, lk), bool)), scores, -np.inf)
    if len(xs) > 3:
        mask = xs[3]
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    return np.matmul(_softmax({"axis": -1}, [scores.astype(q.dtype)]), v)


def _layer_norm_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    return lazy_functional().layer_norm(xs[0], list(a["normalized_shape"]),
                                        *(xs[1:3] + [None, None])[:2], a["eps"])


def _qsoftmax_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """The softmax chain of docs/numerics.md (REDUCE MAX, ELTWISE SUB, LUT, REDUCE SUM,
    UNARY RECIP, ELTWISE MUL), `tessel.ops.softmax.softmax_int`."""
    plan = softmax.SoftmaxPlan.from_attrs(a, xs[1])
    return softmax.softmax_int(xs[0], plan, a["axis"])


def _qlayer_norm_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """The layer-norm chain of docs/numerics.md, `tessel.ops.layer_norm.layer_norm_int`."""
    plan = layer_norm.LayerNormPlan.from_attrs(a, xs[1], xs[2])
    return layer_norm.layer_norm_int(xs[0], plan)


def sdpa_macs(graph: Graph, node: Node) -> int:
    """The two matmuls: scores (q k^T) and their weighted sum of v."""
    q, k, v = (graph.type_of(i).shape for i in node.inputs[:3])
    batch = math.prod(node.type.shape[:-2])
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


# ---------------------------------------------------------------- QDQ -> integer


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
    plan = layer_norm.plan_layer_norm(x.scale, x.zp, ISA_DTYPE[x.dtype], gamma, beta,
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


def refusal(node: Node, graph: Graph | None = None) -> str | None:
    """The reduced axis is one REDUCE extent."""
    if graph is None:
        return None
    shape = graph.type_of(node.inputs[0]).shape
    axis = node.attr("axis") % max(len(shape), 1) if node.op is Op.QSOFTMAX else len(shape) - 1
    extent = shape[axis] if shape else 1
    limit = norm_emit.MAX_DIM
    return f"reduced extent {extent} > {limit} (a REDUCE extent)" if extent > limit else None


# ---------------------------------------------------------------- the definitions

_I = AttrKind.INT
_NPU = Npu(norm_emit, refusal, matrix=False, values_matter=True)
_INTEGER = frozenset({Trait.INTEGER})

register(
    OpDef(Op.SOFTMAX, OpSpec(("x",), _softmax_type, {"axis": AttrSpec(_I, -1)}),
          kernel=_softmax, torch=lambda a, xs: lazy_functional().softmax(xs[0], a["axis"]),
          layout=LayoutRule.AXES, lower=(lower_softmax,)),
    OpDef(Op.LAYER_NORM, OpSpec(("input", "weight", "bias"), _layer_norm_type,
                                {"normalized_shape": AttrSpec(AttrKind.INTS),
                                 "eps": AttrSpec(AttrKind.FLOAT, 1e-5)}, optional=2),
          kernel=_layer_norm, torch=_layer_norm_torch, lower=(lower_layer_norm,)),
    OpDef(Op.SDPA, OpSpec(("query", "key", "value", "mask"), _sdpa_type,
                          {"scale": AttrSpec(AttrKind.FLOAT),
                           "causal": AttrSpec(AttrKind.BOOL, False)}, optional=1),
          kernel=_sdpa, macs=sdpa_macs),
    OpDef(Op.QSOFTMAX, OpSpec(("x", "exp_table"), _qsoftmax_type,
                              {"axis": AttrSpec(_I, -1), "dtype": AttrSpec(AttrKind.DTYPE),
                               **{k: AttrSpec(_I) for k in softmax.SoftmaxPlan.attr_names()}}),
          golden=_qsoftmax_golden, npu=_NPU, traits=_INTEGER),
    OpDef(Op.QLAYER_NORM, OpSpec(("input", "weight", "bias"), _qlayer_norm_type,
                                 {"normalized_shape": AttrSpec(AttrKind.INTS),
                                  "dtype": AttrSpec(AttrKind.DTYPE),
                                  **{k: AttrSpec(_I) for k in layer_norm.LayerNormPlan.attr_names()}}),
          golden=_qlayer_norm_golden, npu=_NPU, traits=_INTEGER),
)

