"""MACs of a node as docs/figures.md counts them: conv, depthwise conv, linear and matmul only
(PyTorch FlopCounterMode's FLOPs / 2), for float and integer ops alike."""

from __future__ import annotations

import math

from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op
from tessel.ir.types import Layout

_CONV = {Op.CONV2D, Op.QCONV2D}
_GEMM = {Op.LINEAR, Op.QLINEAR, Op.MATMUL, Op.QMATMUL}


def node_macs(graph: Graph, node: Node) -> int:
    out = math.prod(node.type.shape)
    if node.op in _CONV:
        w = graph.type_of(node.inputs[1]).shape
        kh, kw, cin_g = (w[1], w[2], w[3]) if node.attr("layout") is Layout.NHWC else (
            w[2], w[3], w[1])
        return out * kh * kw * cin_g
    if node.op in _GEMM:
        return out * graph.type_of(node.inputs[0]).shape[-1]
    return 0
