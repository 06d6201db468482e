"""A float Graph IR as a PyTorch module, so graphs imported from other formats (ONNX) go
through Tessel's usual pt2e quantisation; and a module holding an already-quantised QDQ
graph (QDQ ONNX, int8 TFLite), which `tessel.quantize` lowers as it is, keeping its scales.

    module = IRModule(graph)      # forward runs the graph with torch ops (exportable)
    qdq = QDQModule(qdq_graph)    # forward runs the QDQ graph in float (numpy interpreter)

IRModule runs each non-constant node (its op definition's torch kernel) through a small child
module named after the node's source (an ONNX node name), so torch.export records it in
`nn_module_stack` and the re-imported IR keeps those names as locations. Float constants become
frozen parameters (pt2e quantises parameters read by conv / linear as weights); other constants
become buffers.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from torch import nn

from tessel.errors import TesselConfigError
from tessel.ir import Graph, Layout, Node, unique_name
from tessel.ops import DEFINITIONS, Trait, definition


class _Call(nn.Module):
    """One IR node as a module (its name is what torch.export records as the location)."""

    def __init__(self, node: Node):
        super().__init__()
        self.fn, self.attrs = definition(node.op).torch, dict(node.attr_map)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(self.attrs, list(xs))


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
            name = _module_name(node.name if node.is_constant else
                                (node.loc.module or node.name), taken)
            self._slots[node.name] = name
            if node.is_constant:
                self._constant(name, np.asarray(node.attr("value").array))
            elif (definition(node.op).torch is None
                  or node.attr_map.get("layout", Layout.NCHW) is not Layout.NCHW):
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
            env[node.name] = slot if node.is_constant else slot(
                *(env[i] for i in node.inputs))
        outputs = tuple(env[o] for o in self.graph.outputs)
        return outputs[0] if len(outputs) == 1 else outputs


class QDQModule(nn.Module):
    """An already-quantised graph (float ops between quantize / dequantize with given scales).

    `tessel.quantize` lowers `qdq_graph` directly (no calibration, the scales are kept);
    forward runs it in float with the IR interpreter (the float reference of `tessel run --check`);
    a graph that holds integer ops already (an imported TOSA file) runs its golden kernels, the
    only semantics it has.
    """

    def __init__(self, qdq_graph: Graph):
        super().__init__()
        self.qdq_graph = qdq_graph
        self.eval()

    @property
    def integer(self) -> bool:
        """The graph holds integer ops (an imported TOSA file): it has no float semantics."""
        return any(definition(n.op).has(Trait.INTEGER) for n in self.qdq_graph.nodes)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        from tessel.ir import run_graph

        arrays = [x.detach().cpu().numpy() for x in inputs]
        kernels = {op: d.golden if d.golden is not None else d.kernel
                   for op, d in DEFINITIONS.items()} if self.integer else None
        outputs = tuple(torch.from_numpy(np.asarray(y))
                        for y in run_graph(self.qdq_graph, arrays, kernels=kernels))
        return outputs[0] if len(outputs) == 1 else outputs
