"""Constant folding: an op whose operands are all constants is evaluated with the float
reference kernels (so the folded value is exactly what the interpreter would compute) and
replaced by a constant. With `host=True`, a `host` op of constants (index arithmetic, a rotary
embedding's cos / sin of constant positions) is run through torch the same way and folded too;
quantize / dequantize boundaries are then kept (an int8 weight stays int8 in the binary)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tessel.ir.graph import Graph, Node
from tessel.ir.host import run_host_node
from tessel.ir.kernels import kernel_of
from tessel.ir.rewriting import Rewriter, rewrite
from tessel.ir.verifier import attrs_with_defaults
from tessel.ops import Trait, definition
from tessel.passes.base import Pass

# A fold may not turn small constants into one bigger than this (e.g. expand of a scalar to a
# 1000x1000x4 tensor): the graph would grow by megabytes to save a cheap runtime op.
MAX_GROWN_ELEMENTS = 1 << 20


def _fold(rw: Rewriter, node: Node, limit: int, host: bool = False) -> str | None:
    # op(constant, ..., constant)  =>  constant(kernel(op)(values))
    if host and definition(node.op).has(Trait.BOUNDARY):
        return None
    kernel = _host_kernel(node) if host and node.is_host else kernel_of(node.op)
    if node.is_constant or (node.is_host and not host) or not node.inputs or kernel is None:
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


def _host_kernel(node: Node):
    return lambda _attrs, args: run_host_node(node, args)


@dataclass(frozen=True)
class FoldConstants(Pass):
    """`max_grown_elements`: largest constant a fold may create from smaller operands;
    `host`: fold host ops of constants too (see the module docstring)."""

    name: ClassVar[str] = "fold_constants"
    max_grown_elements: int = MAX_GROWN_ELEMENTS
    host: bool = False

    def apply(self, graph: Graph) -> Graph:
        limit, host = self.max_grown_elements, self.host
        return rewrite(graph, [lambda rw, n: _fold(rw, n, limit, host)], once=True)
