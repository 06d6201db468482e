"""Host fallback: turn an exported ATen node the IR cannot express into an IR `host` op.

The call is encoded as JSON in the node's `args` attribute (format in `tessel.ir.host`, which
decodes and runs it); the result type comes from node.meta["val"]. A multi-output op becomes one
host node per output that the model reads (each with "output": k).

A call whose result the IR cannot type (a complex spectrum) becomes an `Opaque` value instead of
a node: the first call that turns such values back into a typed tensor (|X|, an irfft) becomes
one host *region* node holding every untyped call it depends on, in graph order.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, ir_dtype
from tessel.ir import Op, TensorType


@dataclass(frozen=True)
class Opaque:
    """An fx node's value that the IR cannot type: computed on the host inside the region of
    the first typed value that reads it."""

    node: torch.fx.Node
    reason: str


def _encode(value: Any, operands: list[str], ctx: ImportContext,
            steps: dict[torch.fx.Node, int] | None = None) -> Any:
    if isinstance(value, torch.fx.Node):
        if steps is not None and value in steps:
            return {"step": steps[value]}
        name = ctx.v(value)
        if steps is None or name not in operands:  # a region reads each value once
            operands.append(name)
            return {"in": len(operands) - 1}
        return {"in": operands.index(name)}
    if isinstance(value, (list, tuple)):
        return [_encode(v, operands, ctx, steps) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise Unsupported(f"host fallback cannot encode argument {value!r} ({type(value).__name__})")


def _tensor_type(val: Any) -> TensorType:
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"host fallback needs tensor results, got {type(val).__name__}")
    return TensorType(tuple(int(d) for d in val.shape), ir_dtype(val.dtype))


def untyped(val: Any) -> str | None:
    """Why the IR cannot type a tensor value (its dtype), or None when it can."""
    if not isinstance(val, torch.Tensor):
        return None
    try:
        ir_dtype(val.dtype)
    except Unsupported as exc:
        return str(exc)
    return None


def host_op(ctx: ImportContext, node: torch.fx.Node) -> Any:
    """IR host node(s) for `node`: a value name, a tuple for multi-output ops, or an `Opaque`
    for a single-output op whose result the IR cannot type."""
    if not isinstance(node.target, torch._ops.OpOverload):
        raise Unsupported("host fallback runs ATen ops only")
    val = node.meta.get("val")
    why = untyped(val)
    if why is not None:
        return Opaque(node, why)
    if any(isinstance(ctx.env.get(i), Opaque) for i in node.all_input_nodes):
        if isinstance(val, (tuple, list)):
            raise Unsupported("a multi-output op reading untyped (complex) values")
        return _region(ctx, node, _tensor_type(val))
    operands: list[str] = []
    call = {"args": _encode(list(node.args), operands, ctx),
            "kwargs": {k: _encode(v, operands, ctx) for k, v in node.kwargs.items()}}
    val = node.meta.get("val")
    if not isinstance(val, (tuple, list)):
        return _emit(ctx, node, operands, call, _tensor_type(val))
    if any(u.target is not operator.getitem for u in node.users):
        raise Unsupported("host fallback of a multi-output op read other than by indexing")
    used = sorted({int(u.args[1]) for u in node.users})
    outputs: list[str | None] = [None] * len(val)
    for k in used:
        outputs[k] = _emit(ctx, node, operands, call | {"output": k}, _tensor_type(val[k]))
    return tuple(outputs)


def _region(ctx: ImportContext, node: torch.fx.Node, type_: TensorType) -> str:
    """One host node computing `node` from typed values through the untyped calls it reads."""
    order = {n: k for k, n in enumerate(node.graph.nodes)}
    members, todo = {node}, [node]
    while todo:
        for i in todo.pop().all_input_nodes:
            held = ctx.env.get(i)
            if isinstance(held, Opaque) and i not in members:
                members.add(i)
                todo.append(i)
    calls, steps, operands = [], {}, []
    for member in sorted(members, key=order.__getitem__):
        calls.append({"target": str(member.target),
                      "args": _encode(list(member.args), operands, ctx, steps),
                      "kwargs": {k: _encode(v, operands, ctx, steps)
                                 for k, v in member.kwargs.items()}})
        steps[member] = len(calls) - 1
    target = "+".join(c["target"] for c in calls)
    return _emit(ctx, node, operands, {"region": calls}, type_, target)


def _emit(ctx: ImportContext, node: torch.fx.Node, operands: list[str], call: dict,
          type_: TensorType, target: str | None = None) -> str:
    attrs = {"target": target or str(node.target),
             "args": json.dumps(call, sort_keys=True, separators=(",", ":"))}
    name = ctx.builder.add(Op.HOST, operands, attrs, name=ctx.hint, loc=ctx.loc, type_=type_)
    return name
