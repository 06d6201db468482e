"""NCHW -> NHWC layout conversion for the NPU.

Every conv2d / pooling / upsample / 4-D batch_norm with layout=nchw becomes layout=nhwc (conv
weights OIHW -> OHWI, folded). Each value is tracked with the perm it is stored under, so
activations between such ops stay NHWC: elementwise ops follow their operands (per-channel
constants are transposed), reductions / softmax / slice / pad / concat remap their axes,
reshapes that keep dim groups contiguous run on the stored data, transposes in the graph are
absorbed into the perm. A transpose is materialised only where an op needs the logical order
(graph outputs, linear, matmul, other reshapes, ...), once per value; one that only moves
size-1 dims becomes a reshape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tessel.ir.graph import Graph, Node, SourceLoc
from tessel.ir.ops import Op
from tessel.ir.rewriting import Rewriter, drop_newly_dead
from tessel.ir.types import Layout, TensorType
from tessel.ops import definition
from tessel.ops.base import LayoutRule
from tessel.passes._perm import (
    NHWC,
    Perm,
    identity,
    is_identity,
    order_preserved,
    permute,
    permuted_type,
    relative,
    reshape_under_perm,
)
from tessel.passes.base import Pass

_WINDOW = (LayoutRule.WINDOW, LayoutRule.WINDOW_WEIGHTS)


def _rule(node: Node) -> LayoutRule:
    return definition(node.op).layout


class _Layout:
    """One run of the pass: value -> (stored name, perm), lazily emitted constants."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.rw = Rewriter(graph)
        self.stored: dict[str, tuple[str, Perm]] = {
            v.name: (v.name, identity(v.type.rank)) for v in graph.inputs}
        self.logical = {v.name: v.type for v in graph.inputs}
        self.lazy: dict[str, np.ndarray] = {}
        self.lazy_loc: dict[str, SourceLoc] = {}
        self.cache: dict[tuple[str, Perm], str] = {}

    # ------------------------------------------------------------ values
    def perm(self, v: str) -> Perm:
        return self.stored[v][1]

    def get(self, v: str, want: Perm) -> str:
        """A name holding value `v` stored under `want` (materialised once, constants folded)."""
        name, have = self.stored[v]
        if have == want and name not in self.lazy:
            return name
        rel = relative(have, want)
        if (name, rel) in self.cache:
            return self.cache[(name, rel)]
        new_name = self._name(v, want)
        if name in self.lazy:
            # constant stored under p  =>  constant transposed at compile time
            arr = np.array(self.lazy[name].transpose(rel), order="C")  # rank 0 stays rank 0
            # the element type as declared (an int4 weight stays int4)
            type_ = TensorType(arr.shape, self.logical[v].dtype)
            out = self.rw.constant(arr, name=new_name, loc=self.lazy_loc[name], type_=type_)
        elif order_preserved(self.rw.type_of(name).shape, rel):
            # transpose that only moves size-1 dims  =>  reshape
            shape = permute(self.rw.type_of(name).shape, rel)
            out = self.rw.add(Op.RESHAPE, (name,), {"shape": shape}, name=new_name,
                              type_=permuted_type(self.logical[v], want))
        else:
            out = self.rw.add(Op.TRANSPOSE, (name,), {"perm": rel}, name=new_name,
                              type_=permuted_type(self.logical[v], want))
        self.cache[(name, rel)] = out
        return out

    def _name(self, v: str, want: Perm) -> str:
        if ((is_identity(want) or v in self.lazy) and v not in self.rw.emitted
                and v not in self.graph.input_map):
            return v
        tag = "nhwc" if want == NHWC else "nchw" if want == identity(4) else "t"
        return self.rw.fresh(f"{v}_{tag}")

    def define(self, node: Node, inputs: tuple[str, ...], perm: Perm,
               attrs: Mapping[str, Any] | None = None, infer: bool = False) -> None:
        """Emit `node` on stored operands; its result is stored under `perm`."""
        name = node.name
        if not is_identity(perm) and name in self.graph.outputs:
            name = self.rw.fresh(f"{node.name}_{'nhwc' if perm == NHWC else 't'}")
        type_ = None if infer else permuted_type(node.type, perm)
        self.rw.add(node.op, inputs, node.attr_map if attrs is None else attrs, name=name,
                    loc=node.loc, type_=type_)
        self.alias(node, name, perm)

    def alias(self, node: Node, name: str, perm: Perm) -> None:
        self.stored[node.name] = (name, perm)
        self.logical[node.name] = node.type

    # ------------------------------------------------------------ ops
    def visit(self, node: Node) -> None:
        rule = _rule(node)
        if rule is LayoutRule.CONSTANT:
            self.lazy[node.name] = node.attr("value").array
            self.lazy_loc[node.name] = node.loc
            self.alias(node, node.name, identity(node.type.rank))
        elif _converts(node):
            self.window_op(node)
        elif rule is LayoutRule.FOLLOW:
            p = self.perm(node.inputs[0])
            self.define(node, (self.get(node.inputs[0], p),), p)
        elif rule is LayoutRule.BROADCAST:
            self.broadcasting_op(node)
        elif rule is LayoutRule.FOLLOW_FIRST:
            # lut(x stored under p, table)  =>  same (the table is not an activation)
            p = self.perm(node.inputs[0])
            tables = tuple(self.get(i, identity(self.logical[i].rank)) for i in node.inputs[1:])
            self.define(node, (self.get(node.inputs[0], p), *tables), p)
        elif rule is LayoutRule.AXES:
            self.axis_op(node)
        elif rule is LayoutRule.TRANSPOSE:
            self.transpose(node)
        elif rule is LayoutRule.RESHAPE:
            self.reshape(node)
        else:
            self.generic(node)

    def generic(self, node: Node) -> None:
        # op that needs the logical dim order  =>  operands transposed back to it
        ins = tuple(self.get(i, identity(self.logical[i].rank)) for i in node.inputs)
        self.define(node, ins, identity(node.type.rank))

    def window_op(self, node: Node) -> None:
        # conv2d / pool / upsample / batch_norm {layout=nchw}  =>  same op {layout=nhwc}, w OHWI
        # (also qconv2d / qavg_pool2d / integer max_pool2d, whose types keep their QuantParams)
        x = self.get(node.inputs[0], NHWC)
        rest = []
        conv = _rule(node) is LayoutRule.WINDOW_WEIGHTS
        for k, i in enumerate(node.inputs[1:], start=1):
            rank = self.logical[i].rank
            rest.append(self.get(i, NHWC if (conv and k == 1) else identity(rank)))
        attrs = {**node.attr_map, "layout": Layout.NHWC}
        self.define(node, (x, *rest), NHWC, attrs, infer=node.type.quant is None)

    def _target(self, node: Node) -> Perm:
        """The perm an n-ary op runs under: that of its first stored-permuted operand whose
        rank is the result's, if every other operand can follow it."""
        rank = node.type.rank
        target = identity(rank)
        for i in node.inputs:
            if self.logical[i].rank == rank and not is_identity(self.perm(i)):
                target = self.perm(i)
                break
        for i in node.inputs:
            t = self.logical[i]
            if t.rank < rank and self.stored[i][0] not in self.lazy and t.numel != 1:
                return identity(rank)
        return target

    def broadcasting_op(self, node: Node) -> None:
        # add(x_nhwc, c[C,1,1])  =>  add(x_nhwc, c[1,1,1,C]);  concat(axis=1)  =>  concat(axis=3)
        p = self._target(node)
        rank = node.type.rank
        ins = []
        for i in node.inputs:
            t = self.logical[i]
            if t.rank == rank:
                ins.append(self.get(i, p))
            elif is_identity(p) or t.numel == 1:
                ins.append(self.get(i, identity(t.rank)))
            else:
                ins.append(self._broadcast_constant(i, rank, p))
        attrs = None
        if "axis" in node.attr_map:  # concat
            attrs = {**node.attr_map, "axis": p.index(node.attr("axis") % rank)}
        self.define(node, tuple(ins), p, attrs)

    def _broadcast_constant(self, v: str, rank: int, p: Perm) -> str:
        """Constant `v` of lower rank, as the rank-`rank` constant it broadcasts as, under p."""
        name = self.stored[v][0]
        key = (name, (-1, *p))
        if key not in self.cache:
            t = self.logical[v]
            arr = self.lazy[name].reshape((1,) * (rank - t.rank) + t.shape).transpose(p)
            new_name = v if v not in self.rw.emitted else self.rw.fresh(f"{v}_nhwc")
            self.cache[key] = self.rw.constant(np.ascontiguousarray(arr), name=new_name,
                                               loc=self.lazy_loc[name])
        return self.cache[key]

    def axis_op(self, node: Node) -> None:
        # mean/sum/reduce_max/softmax/slice/pad on stored-permuted x  =>  axes remapped
        x = node.inputs[0]
        name, p = self.stored[x]
        if name in self.lazy or is_identity(p):
            self.generic(node)
            return
        attrs = dict(node.attr_map)
        rank = len(p)
        if "axes" in attrs:  # a reduction
            axes = {a % rank for a in node.attr("axes")}
            attrs["axes"] = tuple(sorted(p.index(a) for a in axes))
            out = p if node.attr("keepdim") else _reduced_perm(p, axes)
        elif "pads" in attrs:
            pads = node.attr("pads")
            attrs["pads"] = tuple(v for d in p for v in (pads[2 * d], pads[2 * d + 1]))
            out = p
        else:
            attrs["axis"] = p.index(node.attr("axis") % rank)
            out = p
        self.define(node, (name,), out, attrs)

    def transpose(self, node: Node) -> None:
        # transpose(x stored under p, q)  =>  no op: the result is x stored under q^-1 . p
        name, p = self.stored[node.inputs[0]]
        q = node.attr("perm")
        self.alias(node, name, tuple(q.index(d) for d in p))

    def reshape(self, node: Node) -> None:
        # reshape(x stored under p) with contiguous dim groups  =>  reshape of the stored data
        x = node.inputs[0]
        name, p = self.stored[x]
        in_shape, out_shape = self.logical[x].shape, node.type.shape
        out = identity(len(out_shape)) if order_preserved(in_shape, p) else (
            reshape_under_perm(in_shape, out_shape, p))
        if name in self.lazy or out is None:
            self.generic(node)
            return
        self.define(node, (name,), out, {"shape": permute(out_shape, out)})

    def run(self) -> Graph:
        for node in self.graph.nodes:
            self.visit(node)
        outputs = tuple(self.get(o, identity(self.logical[o].rank)) for o in self.graph.outputs)
        return Graph(self.graph.name, self.graph.inputs, tuple(self.rw.nodes), outputs)


def _converts(node: Node) -> bool:
    """True for the ops this pass switches to NHWC."""
    return _rule(node) in _WINDOW and node.attr("layout") is Layout.NCHW and node.type.rank == 4


def _reduced_perm(p: Perm, axes: set[int]) -> Perm:
    """Perm of the result of reducing (keepdim=False) logical `axes` of a value stored under p."""
    kept = [d for d in p if d not in axes]
    logical = sorted(kept)
    return tuple(logical.index(d) for d in kept)


@dataclass(frozen=True)
class ToNHWC(Pass):
    """Computes exactly the same function; only dim order and layout attributes change."""

    name: ClassVar[str] = "to_nhwc"

    def apply(self, graph: Graph) -> Graph:
        if not any(_converts(n) for n in graph.nodes):
            return graph
        return drop_newly_dead(graph, _Layout(graph).run())


def to_nhwc(graph: Graph) -> Graph:
    """The layout stage: `ToNHWC` on `graph`, verified."""
    from tessel.ir.verifier import verify

    return verify(ToNHWC().apply(graph))
