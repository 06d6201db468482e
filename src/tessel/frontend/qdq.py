"""Import a converted pt2e module (float ATen ops between quantize / dequantize nodes) into the
Graph IR: the QDQ graph that quant.lower turns into integer ops."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.fx import GraphModule

from tessel.frontend.export import decomposition_table, exporting
from tessel.frontend.importer import import_graph_module, import_program, imports_directly
from tessel.ir import Graph, sanitize_name, verify

Sample = torch.Tensor | Sequence[torch.Tensor]


def _as_args(sample: Sample) -> tuple[torch.Tensor, ...]:
    return (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)


def import_qdq(converted: GraphModule, example_inputs: Sample, name: str = "model",
               root: str | None = None) -> Graph:
    """Import a converted pt2e module (quantize / dequantize nodes kept); source locations are
    relative to `root` (the model's folder; None: the working directory).

    convert_pt2e's module is an ATen graph already: it is read as it is
    (``import_graph_module``) when that gives the Graph IR that exporting it again and
    decomposing it would (``imports_directly``: no op that the decomposition would rewrite
    other than the few the importer reproduces); otherwise it is exported and decomposed
    first, as ``export_program`` does."""
    if imports_directly(converted):
        return verify(import_graph_module(converted, sanitize_name(name), allow_host_ops=True,
                                          cwd=root))
    for module in converted.modules():
        module.training = False  # convert_pt2e's module is in eval semantics already
    with torch.no_grad(), exporting(converted):
        program = torch.export.export(converted, _as_args(example_inputs), strict=False)
        program = program.run_decompositions(decomposition_table())
    return verify(import_program(program, sanitize_name(name), allow_host_ops=True, cwd=root))
