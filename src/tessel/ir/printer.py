"""Deterministic IR text (MLIR-flavoured). Floats print exactly; large constants go to a
trailing `resources` section as base64 of their little-endian bytes.

    graph @tiny(%x: tensor<1x4xf32>) {
      %w = constant() {value = dense_resource<w>} : tensor<8x4xf32>
      %y = linear(%x, %w) : tensor<1x8xf32> loc("fc" at "model.py":12)
      return %y
    }
    resources {
      w = "AAAA..."
    }
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, ConstData
from tessel.ir.graph import Graph, Node, SourceLoc
from tessel.ir.ops import spec
from tessel.ir.types import float_text

INLINE_LIMIT = 16  # constants with at most this many elements print inline


def print_graph(graph: Graph, *, elide_constants: bool = False) -> str:
    """The text of `graph`. With elide_constants, large constants print as a digest only
    (readable dumps; such text does not parse back)."""
    lines = [_header(graph)]
    resources: list[tuple[str, ConstData]] = []
    for node in graph.nodes:
        lines.append("  " + _node(node, resources, elide_constants))
    lines.append("  return " + ", ".join(f"%{o}" for o in graph.outputs))
    lines.append("}")
    if resources:
        lines.append("resources {")
        for key, data in resources:
            raw = np.ascontiguousarray(data.array).astype(data.array.dtype.newbyteorder("<"))
            lines.append(f"  {key} = \"{base64.b64encode(raw.tobytes()).decode('ascii')}\"")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _header(graph: Graph) -> str:
    args = ", ".join(f"%{v.name}: {v.type.text()}" for v in graph.inputs)
    return f"graph @{graph.name}({args}) {{"


def _node(node: Node, resources: list[tuple[str, ConstData]], elide: bool) -> str:
    operands = ", ".join(f"%{i}" for i in node.inputs)
    text = f"%{node.name} = {node.op.value}({operands})"
    kinds = {k: a.kind for k, a in spec(node.op).attrs.items()}
    items = []
    for key, value in node.attrs:
        if value is None:
            continue
        kind = kinds.get(key)
        if kind is AttrKind.TENSOR:
            items.append(f"{key} = {_tensor(node.name, value, resources, elide)}")
        else:
            items.append(f"{key} = {attr_text(value)}")
    if items:
        text += " {" + ", ".join(items) + "}"
    text += f" : {node.type.text()}"
    if node.loc:
        text += " " + loc_text(node.loc)
    return text


def loc_text(loc: SourceLoc) -> str:
    return f"loc({json.dumps(loc.module)} at {json.dumps(loc.file)}:{loc.line})"


def _tensor(name: str, data: ConstData, resources: list, elide: bool) -> str:
    arr = data.array
    if arr.size <= INLINE_LIMIT:
        return "dense<[" + ", ".join(_scalar(x) for x in arr.reshape(-1).tolist()) + "]>"
    if elide:
        return f"dense_elided<\"{data.digest.hex()[:16]}\">"
    resources.append((name, data))
    return f"dense_resource<{name}>"


def _scalar(x: Any) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    return float_text(x)


def attr_text(value: Any) -> str:
    """Text of a non-tensor attribute value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(attr_text(v) for v in value) + "]"
    if hasattr(value, "value") and isinstance(value.value, str):  # DType / Layout enums
        return value.value
    raise TypeError(f"cannot print attribute value {value!r}")
