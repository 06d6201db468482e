"""A float Graph IR as a PyTorch module, so graphs imported from other formats (ONNX) go
through Tessel's usual pt2e quantisation; and a module holding an already-quantised QDQ
graph (QDQ ONNX, int8 TFLite), which `tessel.quantize` lowers as it is, keeping its scales.

    module = IRModule(graph)      # forward runs the graph with torch ops (exportable)
    qdq = QDQModule(qdq_graph)    # forward runs the QDQ graph in float (numpy interpreter)

IRModule runs each non-constant node through a small child module named after the node's
source (an ONNX node name), so torch.export records it in `nn_module_stack` and the re-imported
IR keeps those names as locations. Float constants become frozen parameters (pt2e quantises
parameters read by conv / linear as weights); other constants become buffers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tessel.errors import TesselConfigError
from tessel.ir import Graph, Layout, Node, Op, unique_name

TorchKernel = Callable[[Mapping[str, Any], list[torch.Tensor]], torch.Tensor]
_T: dict[Op, TorchKernel] = {}


def _k(*ops: Op) -> Callable[[TorchKernel], TorchKernel]:
    def register(fn: TorchKernel) -> TorchKernel:
        for op in ops:
            _T[op] = fn
        return fn
    return register


def _pad_hw(x: torch.Tensor, p: tuple[int, ...], value: float = 0.0
            ) -> tuple[torch.Tensor, tuple[int, int]]:
    """(x, torch padding): symmetric padding stays an argument, asymmetric is applied here."""
    top, left, bottom, right = p
    if top == bottom and left == right:
        return x, (top, left)
    return F.pad(x, (left, right, top, bottom), value=value), (0, 0)


@_k(Op.CONV2D)
def _conv2d(a: Mapping[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
    x, padding = _pad_hw(xs[0], a["padding"])
    bias = xs[2] if len(xs) > 2 else None
    return F.conv2d(x, xs[1], bias, list(a["stride"]), list(padding), list(a["dilation"]),
                    a["groups"])


@_k(Op.MAX_POOL2D, Op.AVG_POOL2D)
def _pool(a: Mapping[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
    pads = a["padding"]
    if "dilation" in a:
        x, padding = _pad_hw(xs[0], pads, -math.inf)
        return F.max_pool2d(x, list(a["kernel"]), list(a["stride"]), list(padding),
                            list(a["dilation"]), a["ceil_mode"])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise TesselConfigError("avg_pool2d with asymmetric padding cannot run as a torch module")
    return F.avg_pool2d(xs[0], list(a["kernel"]), list(a["stride"]), [pads[0], pads[1]],
                        a["ceil_mode"], a["count_include_pad"])


def _clamp(a: Mapping[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
    lo, hi = a["min"], a["max"]
    if math.isfinite(lo) and math.isfinite(hi):
        return F.hardtanh(xs[0], lo, hi)
    return torch.clamp(xs[0], lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None)


def _slice(a: Mapping[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
    index = [slice(None)] * xs[0].dim()
    index[a["axis"]] = slice(a["start"], a["end"], a["step"])
    return xs[0][tuple(index)]


def _pad(a: Mapping[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
    p = a["pads"]
    flat = [v for i in reversed(range(xs[0].dim())) for v in (p[2 * i], p[2 * i + 1])]
    return F.pad(xs[0], flat, value=a["value"])


def _quantize(a: Mapping[str, Any], xs: list[torch.Tensor]) -> torch.Tensor:
    q = torch.round(xs[0] * float(np.float32(1.0 / a["scale"]))) + a["zero_point"]
    return torch.clamp(q, a["qmin"], a["qmax"]).to(_TORCH_DTYPES[a["dtype"].value])


_TORCH_DTYPES = {"f32": torch.float32, "i64": torch.int64, "i32": torch.int32,
                 "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}

_T.update({
    Op.LINEAR: lambda a, xs: F.linear(*xs),
    Op.MATMUL: lambda a, xs: torch.matmul(*xs),
    Op.ADD: lambda a, xs: torch.add(*xs), Op.SUB: lambda a, xs: torch.sub(*xs),
    Op.MUL: lambda a, xs: torch.mul(*xs), Op.DIV: lambda a, xs: torch.div(*xs),
    Op.POW: lambda a, xs: torch.pow(*xs), Op.MAXIMUM: lambda a, xs: torch.maximum(*xs),
    Op.MINIMUM: lambda a, xs: torch.minimum(*xs),
    Op.RELU: lambda a, xs: F.relu(xs[0]), Op.CLAMP: _clamp,
    Op.SIGMOID: lambda a, xs: torch.sigmoid(xs[0]), Op.TANH: lambda a, xs: torch.tanh(xs[0]),
    Op.HARDSWISH: lambda a, xs: F.hardswish(xs[0]),
    Op.HARDSIGMOID: lambda a, xs: F.hardsigmoid(xs[0]), Op.SILU: lambda a, xs: F.silu(xs[0]),
    Op.GELU: lambda a, xs: F.gelu(xs[0], approximate=a["approximate"]),
    Op.EXP: lambda a, xs: torch.exp(xs[0]), Op.LOG: lambda a, xs: torch.log(xs[0]),
    Op.NEG: lambda a, xs: torch.neg(xs[0]), Op.ABS: lambda a, xs: torch.abs(xs[0]),
    Op.SQRT: lambda a, xs: torch.sqrt(xs[0]), Op.RSQRT: lambda a, xs: torch.rsqrt(xs[0]),
    Op.RECIPROCAL: lambda a, xs: torch.reciprocal(xs[0]),
    Op.BATCH_NORM: lambda a, xs: F.batch_norm(xs[0], xs[1], xs[2], *(xs[3:5] + [None, None])[:2],
                                              False, 0.0, a["eps"]),
    Op.LAYER_NORM: lambda a, xs: F.layer_norm(xs[0], list(a["normalized_shape"]),
                                              *(xs[1:3] + [None, None])[:2], a["eps"]),
    Op.SOFTMAX: lambda a, xs: F.softmax(xs[0], a["axis"]),
    Op.MEAN: lambda a, xs: torch.mean(xs[0], list(a["axes"]), a["keepdim"]),
    Op.SUM: lambda a, xs: torch.sum(xs[0], list(a["axes"]), a["keepdim"]),
    Op.REDUCE_MAX: lambda a, xs: torch.amax(xs[0], list(a["axes"]), a["keepdim"]),
    Op.EMBEDDING: lambda a, xs: F.embedding(xs[1], xs[0]),
    Op.UPSAMPLE_NEAREST: lambda a, xs: F.interpolate(xs[0], scale_factor=tuple(
        float(s) for s in a["scale"]), mode="nearest"),
    Op.RESHAPE: lambda a, xs: torch.reshape(xs[0], list(a["shape"])),
    Op.TRANSPOSE: lambda a, xs: torch.permute(xs[0], list(a["perm"])),
    Op.CONCAT: lambda a, xs: torch.cat(xs, a["axis"]), Op.SLICE: _slice, Op.PAD: _pad,
    Op.EXPAND: lambda a, xs: xs[0].expand(list(a["shape"])),
    Op.CAST: lambda a, xs: xs[0].to(_TORCH_DTYPES[a["dtype"].value]),
    Op.QUANTIZE: _quantize,
    Op.DEQUANTIZE: lambda a, xs: (xs[0].to(torch.int32) - a["zero_point"]).to(torch.float32)
    * float(np.float32(a["scale"])),
})


class _Call(nn.Module):
    """One IR node as a module (its name is what torch.export records as the location)."""

    def __init__(self, node: Node):
        super().__init__()
        self.op, self.attrs = node.op, dict(node.attr_map)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return _T[self.op](self.attrs, list(xs))


def _module_name(hint: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", hint).strip("_") or "node"
    return unique_name(base if not base[0].isdigit() else "n" + base, taken)


class IRModule(nn.Module):
    """A float Graph IR (layout nchw, no host ops) as an exportable torch module."""

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph
        taken = set(dir(self))
        self._slots: dict[str, str] = {}
        for node in graph.nodes:
            name = _module_name(node.name if node.op is Op.CONSTANT else
                                (node.loc.module or node.name), taken)
            self._slots[node.name] = name
            if node.op is Op.CONSTANT:
                self._constant(name, np.asarray(node.attr("value").array))
            elif node.op not in _T or node.attr_map.get("layout", Layout.NCHW) is not Layout.NCHW:
                raise TesselConfigError(f"%{node.name} = {node.op.value} cannot run as a torch "
                                        "module (unsupported op or layout)")
            else:
                self.add_module(name, _Call(node))
        self.eval()  # an inference graph: no train-mode behaviour (and Tessel refuses train mode)

    def _constant(self, name: str, array: np.ndarray) -> None:
        tensor = torch.from_numpy(np.array(array))
        if tensor.is_floating_point():
            self.register_parameter(name, nn.Parameter(tensor, requires_grad=False))
        else:
            self.register_buffer(name, tensor)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        env: dict[str, torch.Tensor] = {v.name: x for v, x in zip(self.graph.inputs, inputs,
                                                                   strict=True)}
        for node in self.graph.nodes:
            slot = getattr(self, self._slots[node.name])
            env[node.name] = slot if node.op is Op.CONSTANT else slot(
                *(env[i] for i in node.inputs))
        outputs = tuple(env[o] for o in self.graph.outputs)
        return outputs[0] if len(outputs) == 1 else outputs


class QDQModule(nn.Module):
    """An already-quantised graph (float ops between quantize / dequantize with given scales).

    `tessel.quantize` lowers `qdq_graph` directly (no calibration, the scales are kept);
    forward runs it in float with the IR interpreter (the float reference of `tessel run --check`).
    """

    def __init__(self, qdq_graph: Graph):
        super().__init__()
        self.qdq_graph = qdq_graph
        self.eval()

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        from tessel.ir import run_graph

        arrays = [x.detach().cpu().numpy() for x in inputs]
        outputs = tuple(torch.from_numpy(np.asarray(y)) for y in run_graph(self.qdq_graph, arrays))
        return outputs[0] if len(outputs) == 1 else outputs
