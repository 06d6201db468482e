"""Host fallback: turn an exported ATen node the IR cannot express into an IR `host` op.

The call is encoded as JSON in the node's `args` attribute (format in `tessel.ir.host`, which
decodes and runs it); the result type comes from node.meta["val"]. A multi-output op becomes one
host node per output that the model reads (each with "output": k).
"""

from __future__ import annotations

import json
import operator
from typing import Any

import torch
import torch.fx

from tessel.frontend.context import ImportContext, Unsupported, ir_dtype
from tessel.ir import Op, TensorType


def _encode(value: Any, operands: list[str], ctx: ImportContext) -> Any:
    if isinstance(value, torch.fx.Node):
        operands.append(ctx.v(value))
        return {"in": len(operands) - 1}
    if isinstance(value, (list, tuple)):
        return [_encode(v, operands, ctx) for v in value]
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


def host_op(ctx: ImportContext, node: torch.fx.Node) -> Any:
    """IR host node(s) for `node`: a value name, or a tuple for multi-output ops."""
    if not isinstance(node.target, torch._ops.OpOverload):
        raise Unsupported("host fallback runs ATen ops only")
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


def _emit(ctx: ImportContext, node: torch.fx.Node, operands: list[str], call: dict,
          type_: TensorType) -> str:
    attrs = {"target": str(node.target),
             "args": json.dumps(call, sort_keys=True, separators=(",", ":"))}
    name = ctx.builder.add(Op.HOST, operands, attrs, name=ctx.hint, loc=ctx.loc, type_=type_)
    return name
