"""torch.export front half: refuse training-mode models, export non-strict, decompose to core ATen.

The decomposition table is torch's default core-ATen table minus the ops Tessel imports whole
(`KEEP_WHOLE`), so convolutions, linear layers, norms, attention and the activations the NPU has
LUTs for reach the importer as one node each instead of a pile of primitive ops.
"""

from __future__ import annotations

import torch
from torch import nn

from tessel.errors import TesselError
from tessel.frontend.model_input import as_module

_A = torch.ops.aten

KEEP_WHOLE: tuple[torch._ops.OpOverload, ...] = (
    _A.conv1d.default, _A.conv2d.default, _A.conv2d.padding, _A.linear.default,
    _A.matmul.default, _A.layer_norm.default, _A.scaled_dot_product_attention.default,
    _A.gelu.default, _A.hardswish.default, _A.hardsigmoid.default, _A.silu.default,
    _A.hardtanh.default, _A.upsample_nearest2d.default, _A.upsample_nearest2d.vec,
    _A.adaptive_avg_pool2d.default, _A._adaptive_avg_pool2d.default, _A.avg_pool2d.default,
    _A.softmax.int, _A.log_softmax.int,
)
"""Ops left out of the default decomposition table (imported as one IR op each)."""


def decomposition_table() -> dict:
    """torch's default core-ATen decomposition table without the `KEEP_WHOLE` entries."""
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


def export_program(model: nn.Module | torch.export.ExportedProgram, example_inputs: tuple
                   ) -> torch.export.ExportedProgram:
    """Export `model` (an nn.Module, ExportedProgram or exported GraphModule) non-strict on
    `example_inputs`; decompose to core ATen (whole ops kept)."""
    if not isinstance(example_inputs, tuple):
        raise TesselError(f"example_inputs must be a tuple, got {type(example_inputs).__name__}")
    model = as_module(model)
    with torch.no_grad():
        program = torch.export.export(model, example_inputs, strict=False)
        return program.run_decompositions(decomposition_table())
