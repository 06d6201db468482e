"""Matrix products: linear (x W^T + b), matmul (batched, numpy broadcasting), embedding (a table
lookup, on the host); and the integer ops they lower to, `qlinear` (per-channel requantisation) and
`qmatmul` (two runtime operands, per-tensor), run as MATMUL + REQUANT by
tessel.ops.matmul_emit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op, OpSpec, broadcast_shapes, require
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import DType, TensorType
from tessel.ops import intops, matmul_emit
from tessel.ops.base import Npu, OpDef, Trait, lazy_functional, lazy_torch, register
from tessel.ops.quantise import (
    OUT_ATTRS,
    REQUANT_ATTRS,
    QOut,
    deq,
    emit,
    fused_act,
    int_result,
    mac_bias_dtype,
    mac_operands,
    multiplier,
    requant_params,
    require_int,
    require_per_channel,
)


def _linear_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, w = ts[0], ts[1]
    require(w.rank == 2, f"weight must be 2-D [out, in], got rank {w.rank}")
    require(x.rank >= 1 and x.shape[-1] == w.shape[1],
            f"input features {x.shape[-1] if x.rank else None} != weight in {w.shape[1]}")
    if len(ts) > 2:
        require(ts[2].shape == (w.shape[0],), f"bias shape {list(ts[2].shape)} != [{w.shape[0]}]")
    return TensorType(x.shape[:-1] + (w.shape[0],), x.dtype)


def _matmul_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = ts
    require(a.rank >= 2 and b.rank >= 2, "matmul operands must have rank >= 2")
    require(a.shape[-1] == b.shape[-2], f"contraction {a.shape[-1]} != {b.shape[-2]}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _qlinear_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 2)
    out = _linear_type(ts[:2], attrs)
    require_per_channel(ts, 2, ts[1].shape[0], mac_bias_dtype(ts[0]))
    return int_result(out, attrs)


def _qmatmul_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    require_int(ts, 2)
    return int_result(_matmul_type(ts, attrs), attrs)


def _embedding_type(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    w, idx = ts
    require(w.rank == 2, f"embedding table must be 2-D, got rank {w.rank}")
    require(idx.dtype in (DType.I64, DType.I32), f"indices must be integer, got {idx.dtype.value}")
    return TensorType(idx.shape + (w.shape[1],), w.dtype)


# ---------------------------------------------------------------- kernels


def _linear(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    out = xs[0] @ xs[1].T
    return out + xs[2] if len(xs) > 2 else out


def _qlinear_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """MATMUL (x [M, K] by w^T [K, N], weight zero point 0) + REQUANT per output channel; an
    int16 x accumulates wide, with an int64 bias (docs/numerics.md)."""
    x, w = xs[0], xs[1]
    acc = intops.matmul_acc(x.reshape(-1, x.shape[-1]), w.T, a["in_zp"], 0)
    y = intops.requant(acc, xs[2], xs[3], xs[4], a["out_zp"], a["act_min"], a["act_max"],
                       a["dtype"].numpy, wide=intops.is_wide(x))
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def _qmatmul_golden(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """MATMUL per batch entry (both zero points subtracted) + REQUANT (per tensor)."""
    acc = intops.matmul_acc(xs[0], xs[1], a["a_zp"], a["b_zp"])
    return intops.requant(acc, 0, a["multiplier"], a["shift"], a["out_zp"], a["act_min"],
                          a["act_max"], a["dtype"].numpy)


def gemm_macs(graph: Graph, node: Node) -> int:
    """Output elements x the contraction."""
    return math.prod(node.type.shape) * graph.type_of(node.inputs[0]).shape[-1]


# ---------------------------------------------------------------- QDQ -> integer


# q(act(linear(dq(x), W, B)))  =>  qlinear(x, W_i8, B_i32, mult, shift) {act clamp folded}
def lower_linear(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    lin = rw.producer_op(inner, Op.LINEAR)
    if lin is None:
        return None
    found = mac_operands(rw, lin)
    if found is None:
        return None
    x, wname, w_scales, bias = found
    out = QOut.of(q)
    hint = f"{lin.name}_q"
    params = requant_params(rw, hint, x, w_scales, bias, out)
    attrs = {"in_zp": x.zp, **out.out_attrs(lo, hi)}
    return emit(rw, Op.QLINEAR, [x.name, wname, *params], attrs, out.quant, hint=hint,
                loc=lin.loc)


# q(act(matmul(dq(a), dq(b))))  =>  qmatmul(a, b) {a_zp, b_zp, multiplier = s_a s_b / s_out}
def lower_matmul(rw: Rewriter, q: Node) -> str | None:
    inner, lo, hi = fused_act(rw, q.inputs[0])
    mm = rw.producer_op(inner, Op.MATMUL)
    if mm is None:
        return None
    a, b = deq(rw, mm.inputs[0]), deq(rw, mm.inputs[1])
    if a is None or b is None or a.dtype is not DType.I8 or b.dtype is not DType.I8:
        return None  # the matrix engine is int8 x int8
    out = QOut.of(q)
    q31, shift = multiplier(a.scale * b.scale / out.scale)
    attrs = {"a_zp": a.zp, "b_zp": b.zp, "multiplier": q31, "shift": shift,
             **out.out_attrs(lo, hi)}
    return emit(rw, Op.QMATMUL, [a.name, b.name], attrs, out.quant, hint=f"{mm.name}_q",
                loc=mm.loc)


# ---------------------------------------------------------------- the definitions

_I = AttrKind.INT
_WEIGHTS = frozenset({1})  # the weight operand may be int4
_INTEGER = frozenset({Trait.INTEGER})

register(
    OpDef(Op.LINEAR, OpSpec(("input", "weight", "bias"), _linear_type, optional=1),
          kernel=_linear, torch=lambda a, xs: lazy_functional().linear(*xs),
          lower=(lower_linear,), macs=gemm_macs),
    OpDef(Op.MATMUL, OpSpec(("lhs", "rhs"), _matmul_type),
          kernel=lambda a, xs: np.matmul(xs[0], xs[1]),
          torch=lambda a, xs: lazy_torch().matmul(*xs), lower=(lower_matmul,), macs=gemm_macs),
    OpDef(Op.QLINEAR, OpSpec(("input", "weight", "bias", "multiplier", "shift"), _qlinear_type,
                             {"in_zp": AttrSpec(_I), **OUT_ATTRS}),
          golden=_qlinear_golden, npu=Npu(matmul_emit, matmul_emit.refusal, int4=_WEIGHTS,
                                                 int64=frozenset({2})),
          macs=gemm_macs, traits=_INTEGER),
    OpDef(Op.QMATMUL, OpSpec(("lhs", "rhs"), _qmatmul_type,
                             {"a_zp": AttrSpec(_I), "b_zp": AttrSpec(_I), **REQUANT_ATTRS,
                              **OUT_ATTRS}),
          golden=_qmatmul_golden, npu=Npu(matmul_emit, matmul_emit.refusal), macs=gemm_macs,
          traits=_INTEGER),
    OpDef(Op.EMBEDDING, OpSpec(("weight", "indices"), _embedding_type),
          kernel=lambda a, xs: xs[0][xs[1]],
          torch=lambda a, xs: lazy_functional().embedding(xs[1], xs[0])),
)
