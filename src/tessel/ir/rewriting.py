"""Shared machinery of the passes: a rule-driven rewriter, liveness, constant helpers.

A rule is `rule(rw, node) -> str | None`: it looks at one node (operands already renamed to
their replacements) and either declines (None) or emits replacement nodes through `rw` and
returns the name of the value that now stands for `node`. `rewrite` applies rules in sweeps
until nothing fires, then drops nodes that the rewrite made dead (nodes that were already
dead stay: removing those is `dce`'s job).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tessel.errors import TesselVerifyError
from tessel.ir.attrs import ConstData
from tessel.ir.builder import canonical_attrs
from tessel.ir.graph import UNKNOWN_LOC, Graph, Node, SourceLoc, unique_name
from tessel.ir.ops import InferError, Op, spec
from tessel.ir.types import DType, TensorType

MAX_SWEEPS = 32


class Rewriter:
    """The state of one sweep: emitted nodes, value renames, taken names. Internal to a pass."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = []
        self.emitted: dict[str, Node] = {}
        self.types: dict[str, TensorType] = {v.name: v.type for v in graph.inputs}
        self.renames: dict[str, str] = {}
        self.taken: set[str] = {v.name for v in graph.inputs} | {n.name for n in graph.nodes}

    # ------------------------------------------------------------ queries
    def resolve(self, name: str) -> str:
        while name in self.renames:
            name = self.renames[name]
        return name

    def producer(self, name: str) -> Node | None:
        return self.emitted.get(name)

    def producer_op(self, name: str, *ops: Op) -> Node | None:
        node = self.emitted.get(name)
        return node if node is not None and node.op in ops else None

    def const(self, name: str) -> np.ndarray | None:
        node = self.emitted.get(name)
        if node is None or not node.is_constant:
            return None
        return node.attr("value").array

    def type_of(self, name: str) -> TensorType:
        return self.types[name]

    def uses(self, name: str) -> int:
        """Uses of `name` in the graph this sweep started from (big if it is a new value)."""
        if name not in self.graph.node_map and name not in self.graph.input_map:
            return 1 << 30
        return self.graph.num_uses(name)

    # ------------------------------------------------------------ emitting
    def fresh(self, hint: str) -> str:
        return unique_name(hint, self.taken)

    def emit(self, node: Node) -> str:
        if node.name in self.emitted:
            raise TesselVerifyError(f"internal pass error: %{node.name} emitted twice")
        self.nodes.append(node)
        self.emitted[node.name] = node
        self.types[node.name] = node.type
        self.taken.add(node.name)
        return node.name

    def add(self, op: Op, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None, *,
            name: str | None = None, hint: str | None = None, loc: SourceLoc = UNKNOWN_LOC,
            type_: TensorType | None = None) -> str:
        """Emit `op(inputs)`; `name` is used verbatim (the node being replaced), else a fresh
        name from `hint`. The type is inferred from the op spec unless given."""
        frozen = canonical_attrs(op, attrs or {})
        if type_ is None:
            type_ = infer_type(op, [self.types[i] for i in inputs], frozen)
        node = Node(name or self.fresh(hint or op.value), op, tuple(inputs), frozen, type_, loc)
        return self.emit(node)

    def constant(self, array: np.ndarray, *, name: str | None = None, hint: str = "cst",
                 loc: SourceLoc = UNKNOWN_LOC, type_: TensorType | None = None) -> str:
        """A constant holding `array`; `type_`: its type when it carries QuantParams."""
        data = ConstData(np.asarray(array), None if type_ is None else type_.dtype)
        return self.add(Op.CONSTANT, (), {"value": data}, name=name, hint=hint, loc=loc,
                        type_=type_)


def infer_type(op: Op, types: Sequence[TensorType], attrs: Iterable[tuple[str, Any]]) -> TensorType:
    full = {k: a.default for k, a in spec(op).attrs.items()}
    full.update(dict(attrs))
    try:
        return spec(op).infer(list(types), full)
    except InferError as exc:
        raise TesselVerifyError(f"internal pass error: cannot build {op.value}: {exc}") from exc


Rule = Callable[[Rewriter, Node], "str | None"]


def rewrite(graph: Graph, rules: Sequence[Rule], *, once: bool = False) -> Graph:
    """Apply `rules` to every node, sweep after sweep, until none fires (or once)."""
    for _ in range(MAX_SWEEPS):
        new, changed = _sweep(graph, rules)
        graph = new
        if not changed or once:
            return graph
    return graph


def _sweep(graph: Graph, rules: Sequence[Rule]) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    changed = False
    for old in graph.nodes:
        node = old.replace(inputs=tuple(rw.resolve(i) for i in old.inputs))
        result = None
        for rule in rules:
            result = rule(rw, node)
            if result is not None:
                break
        if result is None:
            rw.emit(node)
            continue
        changed = True
        if result != node.name:
            rw.renames[node.name] = result
    outputs = tuple(rw.resolve(o) for o in graph.outputs)
    if not changed:
        return graph, False
    new = Graph(graph.name, graph.inputs, tuple(rw.nodes), outputs)
    return drop_newly_dead(graph, new), True


def live_names(graph: Graph) -> set[str]:
    """Names of every value the outputs depend on."""
    live = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.name in live:
            live.update(node.inputs)
    return live


def drop_newly_dead(before: Graph, after: Graph) -> Graph:
    """`after` without nodes that are dead in it but were live in `before` (or are new)."""
    was_live = live_names(before)
    now_live = live_names(after)
    keep = [n for n in after.nodes
            if n.name in now_live or (n.name in before.node_map and n.name not in was_live)]
    if len(keep) == len(after.nodes):
        return after
    return after.with_nodes(keep)


# ---------------------------------------------------------------- small matchers


def scalar_of(rw: Rewriter, name: str) -> float | None:
    """The value of a one-element float constant, else None. (Callers check that the result's
    shape is the other operand's, i.e. that the constant did not add dims.)"""
    arr = rw.const(name)
    if arr is None or arr.size != 1 or arr.dtype.kind != "f":
        return None
    return float(arr.reshape(()))


def is_f32(t: TensorType) -> bool:
    return t.dtype is DType.F32 and t.quant is None


def binary_operands(node: Node) -> tuple[tuple[str, str], tuple[str, str]]:
    """Both orders of a commutative binary op's operands."""
    a, b = node.inputs
    return (a, b), (b, a)
