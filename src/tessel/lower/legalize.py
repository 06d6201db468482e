"""Rewrites of the integer graph that let the NPU run what its instruction fields cannot say
directly, exact by construction, applied before partitioning (`compile_graph`, and
`estimate_graph` so that estimates see the same graph).

* A `qconv2d` whose top / left padding is beyond the CONV / DWCONV 4-bit fields (a dilated
  causal conv1d pads 16-48 on the left) becomes an integer `pad` with the input's zero point
  followed by the conv without padding. Padding contributes `x - in_zp = 0` to the
  accumulator either way, so the result is bit-identical (tests/unit/lower/test_legalize.py
  checks it against the golden model of the original graph).
"""

from __future__ import annotations

from tessel.ir import Graph, Layout, Node, Op, unique_name
from tessel.ir.types import TensorType
from tessel.isa.limits import MAX_PAD
from tessel.ops.conv_geometry import refusal


def legalize(graph: Graph) -> Graph:
    """`graph` with every over-padded NHWC qconv2d split into pad + conv (else unchanged)."""
    nodes: list[Node] = []
    changed = False
    taken = set(graph.node_map) | {v.name for v in graph.inputs}
    for node in graph.nodes:
        if not _overpadded(graph, node):
            nodes.append(node)
            continue
        pad, conv = _split(graph, node, taken)
        nodes += [pad, conv]
        changed = True
    return graph.with_nodes(nodes) if changed else graph


def _overpadded(graph: Graph, node: Node) -> bool:
    if node.op is not Op.QCONV2D or node.attr("layout") is not Layout.NHWC:
        return False
    if max(node.attr("padding")[:2]) <= MAX_PAD:
        return False
    # only when the padding is all that stops the NPU
    unpadded = node.replace(attrs={**node.attr_map, "padding": (0, 0, 0, 0)})
    return refusal(unpadded, graph) is None


def _split(graph: Graph, node: Node, taken: set[str]) -> tuple[Node, Node]:
    x = node.inputs[0]
    xt = graph.type_of(x)
    pt, pl, pb, pr = node.attr("padding")
    n, h, w, c = xt.shape
    name = unique_name(f"{node.name}_pad", taken)
    pad_type = TensorType((n, h + pt + pb, w + pl + pr, c), xt.dtype, xt.layout, xt.quant)
    pad = Node(name, Op.PAD, (x,), (("pads", (0, 0, pt, pb, pl, pr, 0, 0)),
                                    ("value", float(node.attr("in_zp")))), pad_type, node.loc)
    conv = node.replace(inputs=(name, *node.inputs[1:]),
                        attrs={**node.attr_map, "padding": (0, 0, 0, 0)})
    return pad, conv
