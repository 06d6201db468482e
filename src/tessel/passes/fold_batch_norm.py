"""BatchNorm folding: an inference batch_norm that follows a conv2d or linear (used by nothing
else) with constant statistics is folded into that op's weights and bias."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op
from tessel.ir.rewriting import Rewriter, is_f32, rewrite
from tessel.ir.types import Layout
from tessel.passes.base import Pass


def bn_scale_shift(rw: Rewriter, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(s, t) with batch_norm(x) == x * s + t per channel, in float64; None if not constant."""
    params = [rw.const(i) for i in bn.inputs[1:]]
    if any(p is None for p in params):
        return None
    mean, var = (p.astype(np.float64) for p in params[:2])
    scale = 1.0 / np.sqrt(var + bn.attr("eps"))
    if len(params) > 2:
        scale = scale * params[2]
    shift = -mean * scale + (params[3].astype(np.float64) if len(params) > 3 else 0.0)
    return scale, shift


def bn_channel_axis(bn: Node, rank: int) -> int:
    return 3 if rank == 4 and bn.attr("layout") is Layout.NHWC else 1


def _foldable_producer(rw: Rewriter, bn: Node) -> Node | None:
    """The conv2d / linear feeding `bn` with constant weights, its channels on bn's axis."""
    if bn.op is not Op.BATCH_NORM:
        return None
    prod = rw.producer_op(bn.inputs[0], Op.CONV2D, Op.LINEAR)
    if prod is None or rw.uses(prod.name) != 1:
        return None
    if not (is_f32(bn.type) and all(rw.const(i) is not None for i in prod.inputs[1:])):
        return None
    rank = prod.type.rank
    axis = bn_channel_axis(bn, rank)
    if prod.op is Op.CONV2D:
        want = 3 if prod.attr("layout") is Layout.NHWC else 1
    else:
        want = rank - 1
    return prod if axis == want else None


def fold_into_weights(rw: Rewriter, bn: Node) -> str | None:
    # batch_norm(conv(x, w, b))  =>  conv(x, w*s, (b-mean)*s + beta), s = gamma/sqrt(var+eps)
    # batch_norm(linear(x, w, b))  =>  linear(x, w*s, (b-mean)*s + beta)
    prod = _foldable_producer(rw, bn)
    st = bn_scale_shift(rw, bn) if prod is not None else None
    if prod is None or st is None:
        return None
    scale, shift = st
    w = rw.const(prod.inputs[1])
    b = rw.const(prod.inputs[2]) if len(prod.inputs) > 2 else np.zeros(w.shape[0])
    # the output channel is axis 0 of OIHW, OHWI (grouped and depthwise too) and [out, in]
    w_new = (w * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b_new = (b * scale + shift).astype(w.dtype)
    w_name = rw.constant(w_new, hint=f"{bn.name}_weight", loc=bn.loc)
    b_name = rw.constant(b_new, hint=f"{bn.name}_bias", loc=bn.loc)
    return rw.add(prod.op, (prod.inputs[0], w_name, b_name), prod.attr_map, name=bn.name,
                  loc=prod.loc)


@dataclass(frozen=True)
class FoldBatchNorm(Pass):
    """A batch_norm that cannot be folded (shared producer, runtime statistics, other op) stays."""

    name: ClassVar[str] = "fold_batch_norm"

    def apply(self, graph: Graph) -> Graph:
        return rewrite(graph, [fold_into_weights], once=True)
