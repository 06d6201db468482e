"""GraphBuilder: append ops with inferred types, unique names and canonical attributes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.errors import TesselVerifyError
from tessel.ir.attrs import ConstData
from tessel.ir.graph import UNKNOWN_LOC, Graph, Node, SourceLoc, Value, freeze_attrs, unique_name
from tessel.ir.ops import InferError, Op, spec
from tessel.ir.types import TensorType

_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*$")


def sanitize_name(name: str) -> str:
    """A valid IR value name from any string ('features.0/conv' -> 'features.0_conv')."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", name) or "v"
    return name if _NAME_OK.match(name) else "v" + name if name[0].isdigit() else "v_" + name


def canonical_attrs(op: Op, attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Attributes with the spec's defaults filled in and ints/floats normalised."""
    full: dict[str, Any] = {}
    for key, attr_spec in spec(op).attrs.items():
        if key in attrs:
            full[key] = _normalise(attrs[key])
        elif attr_spec.default is not None:
            full[key] = attr_spec.default
    for key in attrs:  # unknown keys are kept so the verifier can name them
        full.setdefault(key, _normalise(attrs[key]))
    return freeze_attrs(full)


def _normalise(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return ConstData(value)
    return value


class GraphBuilder:
    """Build a Graph node by node. `add` infers the result type from the op spec."""

    def __init__(self, name: str):
        self.name = name
        self._inputs: list[Value] = []
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}
        self._taken: set[str] = set()

    def fresh(self, hint: str) -> str:
        return unique_name(sanitize_name(hint), self._taken)

    def input(self, name: str, type_: TensorType) -> str:
        name = self.fresh(name)
        self._inputs.append(Value(name, type_))
        self._types[name] = type_
        return name

    def type_of(self, name: str) -> TensorType:
        return self._types[name]

    def constant(self, array: np.ndarray, name: str = "const", loc: SourceLoc = UNKNOWN_LOC,
                 type_: TensorType | None = None) -> str:
        """A constant holding `array`; `type_`: its type when it carries QuantParams."""
        data = ConstData(np.asarray(array), None if type_ is None else type_.dtype)
        return self.add(Op.CONSTANT, (), {"value": data}, name=name, loc=loc, type_=type_)

    def add(self, op: Op, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None, *,
            name: str | None = None, loc: SourceLoc = UNKNOWN_LOC,
            type_: TensorType | None = None) -> str:
        """Append `op(inputs) {attrs}`; returns the new value's name."""
        frozen = canonical_attrs(op, attrs or {})
        if type_ is None:
            try:
                type_ = spec(op).infer([self._types[i] for i in inputs], dict(frozen))
            except InferError as exc:
                where = f" at {loc}" if loc else ""
                raise TesselVerifyError(f"cannot build {op.value}{where}: {exc}") from exc
        node = Node(self.fresh(name or op.value), op, tuple(inputs), frozen, type_, loc)
        self._nodes.append(node)
        self._types[node.name] = type_
        return node.name

    def append(self, node: Node) -> str:
        """Append an existing node under its own name (must be unused)."""
        if node.name in self._taken:
            raise TesselVerifyError(f"value %{node.name} is defined twice")
        self._taken.add(node.name)
        self._nodes.append(node)
        self._types[node.name] = node.type
        return node.name

    def build(self, outputs: Sequence[str]) -> Graph:
        return Graph(self.name, tuple(self._inputs), tuple(self._nodes), tuple(outputs))
