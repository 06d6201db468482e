"""Attention decomposition (only when asked): sdpa becomes matmul / scale / mask / softmax /
matmul, the form the NPU's matrix and vector engines run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op
from tessel.ir.rewriting import Rewriter, is_f32, rewrite
from tessel.passes.base import Pass


def _additive_mask(rw: Rewriter, node: Node) -> tuple[bool, str | None]:
    """(ok, name of an additive float mask or None). A bool mask must be a constant (it
    becomes 0 / -inf); a runtime bool mask has no exact additive form, so ok is False."""
    if len(node.inputs) < 4:
        return True, None
    mask = node.inputs[3]
    mt = rw.type_of(mask)
    if mt.dtype == node.type.dtype:
        return True, mask
    arr = rw.const(mask)
    if arr is None or arr.dtype != np.bool_:
        return False, None
    add = np.where(arr, 0.0, -np.inf).astype(node.type.dtype.numpy)
    return True, rw.constant(add, hint=f"{node.name}_mask", loc=node.loc)


def decompose_sdpa(rw: Rewriter, node: Node) -> str | None:
    # sdpa(q, k, v, mask)  =>  matmul(softmax(matmul(q, transpose(k)) * scale + mask), v)
    if node.op is not Op.SDPA or not is_f32(node.type):
        return None
    ok, mask = _additive_mask(rw, node)
    if not ok:
        return None
    q, k, v = node.inputs[:3]
    rank = rw.type_of(q).rank
    perm = (*range(rank - 2), rank - 1, rank - 2)
    n, loc = node.name, node.loc
    kt = rw.add(Op.TRANSPOSE, (k,), {"perm": perm}, hint=f"{n}_kt", loc=loc)
    scores = rw.add(Op.MATMUL, (q, kt), hint=f"{n}_scores", loc=loc)
    scale = rw.constant(np.array(node.attr("scale"), np.float32), hint=f"{n}_scale", loc=loc)
    scores = rw.add(Op.MUL, (scores, scale), hint=f"{n}_scaled", loc=loc)
    if node.attr("causal"):
        lq, lk = rw.type_of(scores).shape[-2:]
        causal = np.where(np.tril(np.ones((lq, lk), bool)), 0.0, -np.inf).astype(np.float32)
        cmask = rw.constant(causal, hint=f"{n}_causal", loc=loc)
        scores = rw.add(Op.ADD, (scores, cmask), hint=f"{n}_causal_scores", loc=loc)
    if mask is not None:
        scores = rw.add(Op.ADD, (scores, mask), hint=f"{n}_masked", loc=loc)
    probs = rw.add(Op.SOFTMAX, (scores,), {"axis": -1}, hint=f"{n}_probs", loc=loc)
    return rw.add(Op.MATMUL, (probs, v), name=n, loc=loc)


@dataclass(frozen=True)
class DecomposeAttention(Pass):
    """Not in the default pipeline: whether sdpa stays whole is a backend decision."""

    name: ClassVar[str] = "decompose_attention"

    def apply(self, graph: Graph) -> Graph:
        return rewrite(graph, [decompose_sdpa], once=True)
