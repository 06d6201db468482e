"""The IR verifier: SSA, arity, attributes, and types re-inferred against the declared ones.

Every message names the op, the value and what is wrong, e.g.
`%conv1 = conv2d: operand 1 (weight) %w: weight must be 4-D, got rank 3`.
"""

from __future__ import annotations

from tessel.errors import TesselVerifyError
from tessel.ir.attrs import check_attr
from tessel.ir.graph import Graph, Node
from tessel.ir.ops import InferError, spec
from tessel.ir.types import TensorType


def verify(graph: Graph) -> Graph:
    """Check every invariant of `graph`; raise TesselVerifyError listing each problem. Returns it."""
    problems: list[str] = []
    defined: dict[str, TensorType] = {}
    for value in graph.inputs:
        if value.name in defined:
            problems.append(f"graph input %{value.name} is declared twice")
        defined[value.name] = value.type
    for node in graph.nodes:
        problems.extend(_check_node(node, defined))
        if node.name in defined:
            problems.append(f"{node}: value %{node.name} is defined more than once")
        defined[node.name] = node.type
    if not graph.outputs:
        problems.append(f"graph @{graph.name} has no outputs")
    for out in graph.outputs:
        if out not in defined:
            problems.append(f"graph output %{out} is not defined")
    if problems:
        head = f"graph @{graph.name} is invalid ({len(problems)} problem(s)):\n  "
        raise TesselVerifyError(head + "\n  ".join(problems))
    return graph


def _check_node(node: Node, defined: dict[str, TensorType]) -> list[str]:
    s = spec(node.op)
    problems = []
    if not s.arity_ok(len(node.inputs)):
        want = len(s.operands) - s.optional
        arity = f"at least {want}" if s.variadic else (
            f"{want}" if not s.optional else f"{want} to {len(s.operands)}")
        problems.append(f"{node}: takes {arity} operand(s), got {len(node.inputs)}")
    missing = [i for i in node.inputs if i not in defined]
    for name in missing:
        problems.append(f"{node}: operand %{name} is used before it is defined (or never)")
    problems.extend(_check_attrs(node))
    if problems:
        return problems
    if node.is_host:
        return []
    try:
        inferred = s.infer([defined[i] for i in node.inputs], _with_defaults(node))
    except InferError as exc:
        return [f"{node}: {exc}"]
    except (KeyError, TypeError, ValueError, IndexError, ArithmeticError, MemoryError) as exc:
        return [f"{node}: malformed operands or attributes ({type(exc).__name__}: {exc})"]
    if inferred.shape != node.type.shape or inferred.dtype != node.type.dtype:
        problems.append(f"{node}: declared type {node.type} but operands give "
                        f"{inferred.with_shape(inferred.shape)}")
    return problems


def _check_attrs(node: Node) -> list[str]:
    s = spec(node.op)
    problems = []
    for key, value in node.attrs:
        attr_spec = s.attrs.get(key)
        if attr_spec is None:
            known = ", ".join(sorted(s.attrs)) or "none"
            problems.append(f"{node}: unknown attribute '{key}' (known: {known})")
            continue
        if value is None and attr_spec.optional:
            continue
        err = check_attr(attr_spec.kind, value)
        if err:
            problems.append(f"{node}: attribute '{key}': {err}")
    for key, attr_spec in s.attrs.items():
        if attr_spec.default is None and not attr_spec.optional and key not in node.attr_map:
            problems.append(f"{node}: missing required attribute '{key}'")
    return problems


def _with_defaults(node: Node) -> dict:
    attrs = {k: a.default for k, a in spec(node.op).attrs.items()}
    attrs.update(node.attr_map)
    return attrs


def attrs_with_defaults(node: Node) -> dict:
    """The node's attributes with every omitted one set to its spec default."""
    return _with_defaults(node)
