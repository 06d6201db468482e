"""Host (CPU) ops of the Graph IR: run an op the NPU cannot, through torch, on numpy values.

A `host` node carries `target`, the ATen overload's name (e.g. "aten.cumsum.default"), and
`args`, a JSON string of the call (written by the frontend, `tessel.frontend.host_ops`):

    {"args": [...], "kwargs": {...}, "output": k}

Tensor arguments are {"in": k}, the node's k-th operand; dtypes are {"dtype": "float32"}, devices
{"device": "cpu"}, layouts {"layout": "strided"}, memory formats {"memory_format": "..."};
everything else is a plain JSON scalar, list or null. "output" (optional) picks one result of a
multi-output op (e.g. the values of aten.sort).

A host *region* runs several ATen calls whose intermediate values the IR cannot type (complex
spectra between an rfft and an irfft): `target` lists the calls' ops joined by "+", and `args` is

    {"region": [{"target": "aten.op.overload", "args": [...], "kwargs": {...}}, ...]}

where a tensor argument is {"in": k} (the node's k-th operand) or {"step": j} (the result of the
region's j-th call, j smaller than the call's own index); the node's value is the last call's.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tessel.errors import TesselError
from tessel.ir.graph import Node


def resolve_target(target: str) -> Any:
    """The torch OpOverload named by `target` ("namespace.op.overload")."""
    import torch

    parts = target.split(".")
    if len(parts) != 3:
        raise TesselError(f"host op target '{target}' is not 'namespace.op.overload'")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError) as exc:
        raise TesselError(f"host op target '{target}' is not a torch op in this torch build"
                          ) from exc


def _decode(value: Any, tensors: list, steps: list | None = None) -> Any:
    import torch

    if isinstance(value, list):
        return [_decode(v, tensors, steps) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"in"}:
        k = value["in"]
        if not isinstance(k, int) or not 0 <= k < len(tensors):
            raise TesselError(f"host op argument refers to operand {k}, node has {len(tensors)}")
        return tensors[k]
    if set(value) == {"step"} and steps is not None:
        j = value["step"]
        if not isinstance(j, int) or not 0 <= j < len(steps):
            raise TesselError(f"host region argument refers to step {j}, before which "
                              f"{len(steps)} step(s) ran")
        return steps[j]
    if set(value) == {"dtype"}:
        return getattr(torch, value["dtype"])
    if set(value) == {"device"}:
        return torch.device(value["device"])
    if set(value) == {"layout"}:
        return getattr(torch, value["layout"])
    if set(value) == {"memory_format"}:
        return getattr(torch, value["memory_format"])
    raise TesselError(f"host op argument {value!r} has an unknown encoding")


def _spec(args_json: str) -> dict:
    try:
        spec = json.loads(args_json) if args_json else {}
    except json.JSONDecodeError as exc:
        raise TesselError(f"host op args are not valid JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise TesselError("host op args must be a JSON object")
    return spec


def _arguments(call: dict, tensors: list, steps: list | None) -> tuple[list, dict]:
    args = _decode(call.get("args", []), tensors, steps)
    kwargs = call.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TesselError("host op args must be a list and kwargs an object")
    return args, {k: _decode(v, tensors, steps) for k, v in kwargs.items()}


def _execute(node: Node, tensors: list) -> Any:
    """The torch result of `node`'s call, or of its region's last call."""
    spec = _spec(node.attr("args", ""))
    if "region" not in spec:
        args, kwargs = _arguments(spec, tensors, None)
        return resolve_target(node.attr("target"))(*args, **kwargs)
    calls = spec["region"]
    if not isinstance(calls, list) or not calls or not all(isinstance(c, dict) for c in calls):
        raise TesselError(f"{node}: a host region is a non-empty list of calls")
    steps: list = []
    for call in calls:
        args, kwargs = _arguments(call, tensors, steps)
        steps.append(resolve_target(str(call.get("target")))(*args, **kwargs))
    return steps[-1]


def is_region(node: Node) -> bool:
    """Whether a `host` node runs a region of calls (complex intermediates) rather than one."""
    try:
        return node.is_host and "region" in _spec(node.attr("args", ""))
    except TesselError:
        return False


def run_host_node(node: Node, inputs: list[np.ndarray]) -> np.ndarray:
    """Execute a `host` node (one ATen call or a region of them) on numpy inputs through
    torch; returns its (single) result."""
    import torch

    if not node.is_host:
        raise TesselError(f"{node} is not a host op")
    tensors = [torch.from_numpy(np.array(x, copy=True)) for x in inputs]
    output = _spec(node.attr("args", "")).get("output")
    with torch.no_grad():
        result = _execute(node, tensors)
    if isinstance(result, (tuple, list)):
        if output is None:
            raise TesselError(f"{node}: {node.attr('target')} returned {len(result)} values and "
                              "the node does not say which one it is")
        result = result[output]
    elif output not in (None, 0):
        raise TesselError(f"{node}: asks for output {output} of a single-output op")
    if not isinstance(result, torch.Tensor):
        raise TesselError(f"{node}: {node.attr('target')} did not return a tensor")
    return result.detach().numpy()


def host_node_macs(node: Node, input_types: list) -> int:
    """MACs of a `host` node as docs/figures.md counts them (torch's FlopCounterMode FLOPs / 2:
    convolutions, transposed ones too, matrix products, recurrent kernels' products), run
    on meta tensors of its operands' shapes; 0 for an op torch counts no FLOPs for or cannot
    run on meta tensors."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        tensors = [torch.empty(t.shape, dtype=getattr(torch, t.dtype.numpy.name),
                               device="meta") for t in input_types]
        with FlopCounterMode(display=False) as counter:
            _execute(node, tensors)
    except Exception:  # noqa: BLE001 - an op meta tensors cannot run: no MACs counted
        return 0
    return counter.get_total_flops() // 2
