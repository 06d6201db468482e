"""Fuse a chain of element-wise integer ops on one int8 tensor into one LUT.

After lowering, an activation that PyTorch spells out becomes several NPU steps: SiLU written
``y * sigmoid(y)`` is ``lut`` + ``requantize`` + ``qmul``, hard-swish written
``x * relu6(x + 3) / 6`` is ``qadd`` + ``qmul`` + ``qmul``. Every such chain is a function of one
int8 value per element, so it *is* a 256-entry table: this pass evaluates the chain with the
golden kernels on all 256 int8 inputs and replaces it with one ``lut`` of that table.

The result is bit-exact with the chain by construction (the table holds the chain's own
integer results, nothing is re-derived from float), so the golden model, the simulator and
the accuracy figures are unchanged; only the step count falls.

A chain is a set S of nodes, each QADD / QSUB / QMUL / REQUANTIZE / LUT, whose operands are
nodes of S, scalar constants or one tensor ``x`` (int8, the same shape as every node of S); every
node of S but the last has all its uses inside S and is not a graph output; the last node's
result is int8. A chain of one node is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tessel.ir import unique_name
from tessel.ir.attrs import ConstData
from tessel.ir.graph import Graph, Node
from tessel.ir.ops import Op
from tessel.ir.types import DType, TensorType
from tessel.ops import Trait, definition
from tessel.passes.base import Pass


def _pointwise(node: Node) -> bool:
    return definition(node.op).has(Trait.POINTWISE)


@dataclass(frozen=True)
class FusePointwiseLut(Pass):
    """Element-wise int8 chains -> one LUT (exact: the table is the chain on all 256 inputs)."""

    name: ClassVar[str] = "fuse_pointwise_lut"

    def apply(self, graph: Graph) -> Graph:
        users: dict[str, list[str]] = {}
        for n in graph.nodes:
            for i in n.inputs:
                users.setdefault(i, []).append(n.name)
        outputs = set(graph.outputs)
        replaced: dict[str, list[Node]] = {}  # root name -> its replacement (table, lut)
        fused: set[str] = set()
        for root in reversed(graph.nodes):
            if root.name in fused or not _pointwise(root) or root.type.dtype is not DType.I8:
                continue
            chain = _chain(graph, root, users, outputs)
            if chain is None:
                continue
            members, x = chain
            fused.update(members)
            replaced[root.name] = _table_lut(graph, root, members, x)
        if not replaced:
            return graph
        nodes: list[Node] = []
        for n in graph.nodes:
            if n.name in replaced:
                nodes.extend(replaced[n.name])
            elif n.name not in fused:
                nodes.append(n)
        return graph.with_nodes(nodes)


def _constant_operand(graph: Graph, user: Node, index: int) -> bool:
    """A scalar constant operand, or the table of a LUT (position-independent values)."""
    node = graph.node_map.get(user.inputs[index])
    if node is None or not node.is_constant:
        return False
    return node.type.numel == 1 or (user.op is Op.LUT and index == 1)


def _chain(graph: Graph, root: Node, users: dict[str, list[str]], outputs: set[str]
           ) -> tuple[set[str], str] | None:
    """(names of the chain ending at `root`, its one tensor input) or None if not fusable."""
    # the closure grows monotonically (a producer joins once all its users are members), so a
    # worklist of the newest members' inputs reaches it in time linear in the chain's length
    members = {root.name}
    work = [root.name]
    while work:
        for i in graph.node_map[work.pop()].inputs:
            p = graph.node_map.get(i)
            if (i in members or p is None or not _pointwise(p) or i in outputs
                    or not set(users.get(i, ())) <= members):
                continue
            if p.op is Op.LUT and graph.type_of(p.inputs[0]).dtype is not DType.I8:
                continue  # an int16 LUT interpolates: keep it out (x must be int8 anyway)
            members.add(i)
            work.append(i)
    if len(members) < 2:
        return None
    external = {i for m in members for k, i in enumerate(graph.node_map[m].inputs)
                if i not in members and not _constant_operand(graph, graph.node_map[m], k)}
    if len(external) != 1:
        return None
    (x,) = external
    xt = graph.type_of(x)
    if xt.dtype is not DType.I8 or any(graph.node_map[m].type.shape != xt.shape for m in members):
        return None
    return members, x


def _table_lut(graph: Graph, root: Node, members: set[str], x: str) -> list[Node]:
    """The constant table and the LUT node (named like `root`) standing for the chain."""
    from tessel.quant.golden import GOLDEN_KERNELS

    env: dict[str, np.ndarray] = {x: np.arange(-128, 128, dtype=np.int8)}
    for node in graph.nodes:  # topological order
        if node.name not in members:
            continue
        args = []
        for k, i in enumerate(node.inputs):
            if i in env:
                args.append(env[i])
                continue
            value = np.asarray(graph.node_map[i].attr("value").array)  # a constant operand
            args.append(value if node.op is Op.LUT and k == 1 else value.reshape(1))
        env[node.name] = np.asarray(GOLDEN_KERNELS[node.op](node.attr_map, args)).reshape(256)
    table = env[root.name].astype(np.int8)
    taken = set(graph.node_map) | {v.name for v in graph.inputs}
    tname = unique_name(f"{root.name}_table", taken)
    const = Node(tname, Op.CONSTANT, (), (("value", ConstData(table)),),
                 TensorType((256,), DType.I8), root.loc)
    return [const, Node(root.name, Op.LUT, (x, tname), (), root.type, root.loc)]
