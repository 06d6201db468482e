"""Immutable Graph IR: SSA nodes with one result each, graph inputs, outputs.

A `Node` is both an op and the value it defines (its `name`). Nodes are never mutated: passes
build new graphs (`Graph.with_nodes`, `Node.replace`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tessel.ir.ops import Op
from tessel.ir.types import TensorType


@dataclass(frozen=True)
class SourceLoc:
    """Where a node came from: the PyTorch module path and the user's source line."""

    module: str = ""
    file: str = ""
    line: int = 0

    def __bool__(self) -> bool:
        return bool(self.module or self.file)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "<unknown>"
        return f"{where} (module {self.module})" if self.module else where


UNKNOWN_LOC = SourceLoc()


@dataclass(frozen=True)
class Value:
    """A graph input: a name and a type."""

    name: str
    type: TensorType


@dataclass(frozen=True)
class Node:
    """`%name = op(inputs) {attrs} : type`. attrs is a sorted tuple of (key, value) pairs."""

    name: str
    op: Op
    inputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]
    type: TensorType
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)

    @cached_property
    def attr_map(self) -> Mapping[str, Any]:
        return dict(self.attrs)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attr_map.get(key, default)

    @property
    def is_constant(self) -> bool:
        """A constant: no operands, its value an attribute."""
        return self.op is Op.CONSTANT

    @property
    def is_host(self) -> bool:
        """An ATen op the IR cannot express, run through torch on the host."""
        return self.op is Op.HOST

    def replace(self, **changes: Any) -> Node:
        if "attrs" in changes and isinstance(changes["attrs"], Mapping):
            changes["attrs"] = freeze_attrs(changes["attrs"])
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        return f"%{self.name} = {self.op.value}"

    def described(self) -> str:
        """The node for a user's message: the layer's module path first (the name reports use),
        then the IR node and the source line: ``layer1.0.conv1 (%conv2d_5_q = qconv2d at
        resnet.py:43)``; without a module path, ``%conv2d_5_q = qconv2d at resnet.py:43``."""
        where = f"{self.loc.file}:{self.loc.line}" if self.loc.file else "<unknown>"
        if self.loc.module:
            return f"{self.loc.module} (%{self.name} = {self.op.value} at {where})"
        return f"%{self.name} = {self.op.value} at {where}"


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... : the first not in `taken` (which it joins)."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def freeze_attrs(attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Canonical attribute tuple: sorted by key, lists turned into tuples."""
    out = []
    for key in sorted(attrs):
        value = attrs[key]
        if isinstance(value, list):
            value = tuple(value)
        out.append((key, value))
    return tuple(out)


@dataclass(frozen=True)
class Graph:
    """A whole model: named inputs, nodes in a valid topological order, output value names."""

    name: str
    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]

    @cached_property
    def node_map(self) -> Mapping[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def input_map(self) -> Mapping[str, Value]:
        return {v.name: v for v in self.inputs}

    def type_of(self, name: str) -> TensorType:
        node = self.node_map.get(name)
        if node is not None:
            return node.type
        return self.input_map[name].type

    def producer(self, name: str) -> Node | None:
        return self.node_map.get(name)

    @cached_property
    def users(self) -> Mapping[str, tuple[Node, ...]]:
        """For each value name, the nodes that read it (in order, once per node)."""
        acc: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                acc.setdefault(i, []).append(n)
        return {k: tuple(v) for k, v in acc.items()}

    def num_uses(self, name: str) -> int:
        return len(self.users.get(name, ())) + self.outputs.count(name)

    def with_nodes(self, nodes: Iterable[Node], outputs: Iterable[str] | None = None) -> Graph:
        return Graph(self.name, self.inputs, tuple(nodes),
                     tuple(outputs) if outputs is not None else self.outputs)

    def with_output_names(self, names: Iterable[str]) -> Graph:
        """The graph with its outputs renamed to ``names`` (one each, in order): each output's
        node and every read of it take the new name. A name already taken by another value
        gets a suffix (``_1``, ...); an output that is a graph input, or a value that is
        several outputs, keeps its name."""
        names = list(names)
        if len(names) != len(self.outputs):
            raise ValueError(f"{len(names)} names for {len(self.outputs)} outputs")
        taken = {n.name for n in self.nodes} | {v.name for v in self.inputs}
        renames: dict[str, str] = {}
        for old, new in zip(self.outputs, names, strict=True):
            if old in self.node_map and self.outputs.count(old) == 1 and old != new:
                taken.discard(old)
                renames[old] = unique_name(new, taken)
        if not renames:
            return self

        def rn(name: str) -> str:
            return renames.get(name, name)

        nodes = tuple(n.replace(name=rn(n.name), inputs=tuple(rn(i) for i in n.inputs))
                      if n.name in renames or any(i in renames for i in n.inputs) else n
                      for n in self.nodes)
        return Graph(self.name, self.inputs, nodes, tuple(rn(o) for o in self.outputs))

    def constant_value(self, name: str) -> Any:
        """The ndarray of a constant node, or None if `name` is not a constant."""
        node = self.node_map.get(name)
        if node is None or node.op is not Op.CONSTANT:
            return None
        return node.attr("value").array

    def ops(self) -> Iterator[Op]:
        return (n.op for n in self.nodes)

    def summary(self) -> str:
        """One line per op kind with counts, and parameter bytes."""
        counts: dict[str, int] = {}
        params = 0
        for n in self.nodes:
            counts[n.op.value] = counts.get(n.op.value, 0) + 1
            if n.op is Op.CONSTANT:
                params += n.type.nbytes
        ins = ", ".join(f"{v.name}: {v.type}" for v in self.inputs)
        outs = ", ".join(f"{o}: {self.type_of(o)}" for o in self.outputs)
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        return (f"graph @{self.name}: {len(self.nodes)} nodes, {params / 1e6:.2f} MB constants\n"
                f"  inputs:  {ins}\n  outputs: {outs}\n  ops:     {ops}")


def rename_uses(node: Node, mapping: Mapping[str, str]) -> Node:
    """The node with each input renamed through mapping (names not in it are kept)."""
    if not any(i in mapping for i in node.inputs):
        return node
    return node.replace(inputs=tuple(mapping.get(i, i) for i in node.inputs))
