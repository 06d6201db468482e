"""Rewrites of the integer graph that let the NPU run what its instruction fields cannot say
directly, exact by construction, applied before partitioning (`compile_graph`, and
`estimate_graph` so that estimates see the same graph).

* A `qconv2d` whose top / left padding is beyond the CONV / DWCONV 4-bit fields (a dilated
  causal conv1d pads 16-48 on the left), or with an output row that reads only padding (a
  transposed conv's output_padding row), becomes an integer `pad` with the input's zero point
  followed by the conv without padding. Padding contributes `x - in_zp = 0` to the
  accumulator either way, so the result is bit-identical (tests/unit/lower/test_legalize.py
  checks it against the golden model of the original graph).
* On a target with ``sparse.enabled``, a `qlinear` whose weights are exactly 2:4 along the
  reduction (every four consecutive input features of an output hold at most two non-zeros:
  ``tessel.prune_2_4``) becomes a 1x1 `qconv2d` over its input viewed as NHWC ``[1, M, 1, K]``
  (M the rows, K the features), between two reshapes (views: no data moves), so that it runs
  on CONV's 2:4 sparse weights (docs/isa.md) where that pays. The accumulator is the same sum
  of the same products, the per-channel requantisation (bias, multiplier, shift, DOUBLE
  rounding, clamp) the same, so the result is bit-identical.
"""

from __future__ import annotations

import math

import numpy as np

from tessel.arch.types import NpuArch
from tessel.ir import Graph, Layout, Node, Op, unique_name
from tessel.ir.attrs import ConstData
from tessel.ir.builder import canonical_attrs
from tessel.ir.graph import rename_uses
from tessel.ir.types import TensorType
from tessel.isa.limits import MAX_PAD
from tessel.isa.sparse24 import is_2_4
from tessel.ops.conv_geometry import refusal


def legalize(graph: Graph, arch: NpuArch | None = None) -> Graph:
    """`graph` with every over-padded NHWC qconv2d (past the fields, or an output row of padding
    only) split into pad + conv and, when `arch` runs 2:4 sparse weights, every 2:4 qlinear as
    a 1x1 qconv2d (else unchanged)."""
    nodes: list[Node] = []
    changed = False
    taken = set(graph.node_map) | {v.name for v in graph.inputs}
    sparse = arch is not None and arch.sparse.enabled
    renamed: dict[str, str] = {}  # a sparse linear's result -> its reshape back (the conv
    # keeps the linear's name: layer reports name the same layer on every target)
    for node in graph.nodes:
        node = rename_uses(node, renamed)
        if _overpadded(graph, node):
            nodes += _split(graph, node, taken)
        elif sparse and _sparse_linear(graph, node):
            nodes += _as_conv(graph, node, taken, renamed)
        else:
            nodes.append(node)
            continue
        changed = True
    if not changed:
        return graph
    dropped = {n.inputs[1] for n in graph.nodes if n.op is Op.QLINEAR} - {
        i for n in nodes for i in n.inputs} - set(graph.outputs)
    return graph.with_nodes(n for n in nodes if n.name not in dropped)


def _overpadded(graph: Graph, node: Node) -> bool:
    if node.op is not Op.QCONV2D or node.attr("layout") is not Layout.NHWC:
        return False
    if max(node.attr("padding")[:2]) <= MAX_PAD and not _padding_rows(graph, node):
        return False
    # only when the padding is all that stops the NPU
    unpadded = node.replace(attrs={**node.attr_map, "padding": (0, 0, 0, 0)})
    return refusal(unpadded, graph) is None


def _padding_rows(graph: Graph, node: Node) -> bool:
    """Whether some output row's taps all fall in the padding (a bottom padding past the kernel,
    as a transposed conv's output_padding gives its phases): a tile of such rows would load no
    input row, which no DMA_LOAD or CONV can say."""
    h = graph.type_of(node.inputs[0]).shape[1]
    kh = graph.type_of(node.inputs[1]).shape[1]  # OHWI
    sh, dh, pt = node.attr("stride")[0], node.attr("dilation")[0], node.attr("padding")[0]
    return any(all(not 0 <= oy * sh - pt + ky * dh < h for ky in range(kh))
               for oy in range(node.type.shape[1]))


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


def _sparse_linear(graph: Graph, node: Node) -> bool:
    """A qlinear whose constant weights [N, K] are exactly 2:4 along K (K a multiple of 4)."""
    if node.op is not Op.QLINEAR:
        return False
    w = graph.constant_value(node.inputs[1])
    if w is None or w.shape[1] % 4:
        return False
    return is_2_4(np.asarray(w).T[None])  # [taps = 1, K, N]


def _as_conv(graph: Graph, node: Node, taken: set[str], renamed: dict[str, str]) -> list[Node]:
    """reshape x to [1, M, 1, K] (NHWC), 1x1 qconv2d (the qlinear's name), reshape back to the
    qlinear's shape (under a new name recorded in `renamed`; a graph output keeps its name,
    the conv taking a new one)."""
    x = node.inputs[0]
    xt, wnode = graph.type_of(x), graph.node_map[node.inputs[1]]
    wt = wnode.type
    (n, k), m = wt.shape, math.prod(xt.shape[:-1])
    view = unique_name(f"{node.name}_rows", taken)
    taken.add(view)
    rows = Node(view, Op.RESHAPE, (x,), canonical_attrs(Op.RESHAPE, {"shape": (1, m, 1, k)}),
                TensorType((1, m, 1, k), xt.dtype, Layout.NHWC, xt.quant), node.loc)
    wname = unique_name(f"{wnode.name}_ohwi", taken)
    taken.add(wname)
    data = wnode.attr("value")
    w4 = Node(wname, Op.CONSTANT, (), (("value", ConstData(data.array.reshape(n, 1, 1, k),
                                                             data.dtype)),),
              TensorType((n, 1, 1, k), wt.dtype, Layout.ANY, wt.quant), wnode.loc)
    output = node.name in graph.outputs
    cname = unique_name(f"{node.name}_conv", taken) if output else node.name
    bname = node.name if output else unique_name(f"{node.name}_out", taken)
    taken.update((cname, bname))
    if not output:
        renamed[node.name] = bname
    attrs = {**node.attr_map, "stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
             "groups": 1, "layout": Layout.NHWC}
    ot = node.type
    conv = Node(cname, Op.QCONV2D, (view, wname, *node.inputs[2:]),
                canonical_attrs(Op.QCONV2D, attrs),
                TensorType((1, m, 1, n), ot.dtype, Layout.NHWC, ot.quant), node.loc)
    back = Node(bname, Op.RESHAPE, (cname,), canonical_attrs(Op.RESHAPE, {"shape": ot.shape}),
                ot, node.loc)
    return [rows, w4, conv, back]
