"""Constant folding: an op whose operands are all constants is evaluated with the float
reference kernels (so the folded value is exactly what the interpreter would compute) and
replaced by a constant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tessel.ir.graph import Graph, Node
from tessel.ir.kernels import kernel_of
from tessel.ir.rewriting import Rewriter, rewrite
from tessel.ir.verifier import attrs_with_defaults
from tessel.passes.base import Pass

# A fold may not turn small constants into one bigger than this (e.g. expand of a scalar to a
# 1000x1000x4 tensor): the graph would grow by megabytes to save a cheap runtime op.
MAX_GROWN_ELEMENTS = 1 << 20


def _fold(rw: Rewriter, node: Node, limit: int) -> str | None:
    # op(constant, ..., constant)  =>  constant(kernel(op)(values))
    kernel = kernel_of(node.op)
    if node.is_constant or node.is_host or not node.inputs or kernel is None:
        return None
    args = [rw.const(i) for i in node.inputs]
    if any(a is None for a in args):
        return None
    inputs_size = sum(a.size for a in args)
    if node.type.numel > limit and node.type.numel > inputs_size:
        return None
    try:
        out = np.asarray(kernel(attrs_with_defaults(node), args))
    except Exception:  # a kernel that cannot run on these values is left for runtime to report
        return None
    if out.shape != node.type.shape:
        return None
    return rw.constant(out.astype(node.type.dtype.numpy, copy=False), name=node.name,
                       loc=node.loc)


@dataclass(frozen=True)
class FoldConstants(Pass):
    """`max_grown_elements`: largest constant a fold may create from smaller operands."""

    name: ClassVar[str] = "fold_constants"
    max_grown_elements: int = MAX_GROWN_ELEMENTS

    def apply(self, graph: Graph) -> Graph:
        limit = self.max_grown_elements
        return rewrite(graph, [lambda rw, n: _fold(rw, n, limit)], once=True)
