"""The torch.export frontend: nn.Module + example inputs -> float Graph IR.

    graph = tessel.frontend.import_model(model.eval(), (x,))

Export is non-strict, decomposed to core ATen except the ops Tessel keeps whole (conv, linear,
layer norm, attention, ...; see `export.KEEP_WHOLE`). docs/frontend.md lists the supported ops.
"""

from __future__ import annotations

import torch
from torch import nn

from tessel.frontend.export import KEEP_WHOLE, decomposition_table, export_program
from tessel.frontend.importer import import_program
from tessel.frontend.model_input import check_eval_mode, model_name
from tessel.ir import Graph, sanitize_name, verify

__all__ = ["KEEP_WHOLE", "check_eval_mode", "decomposition_table", "export_program",
           "import_model", "import_program"]


def import_model(model: nn.Module | torch.export.ExportedProgram, example_inputs: tuple, *,
                 name: str | None = None, allow_host_ops: bool = False) -> Graph:
    """Export `model` (an nn.Module, a torch.export.ExportedProgram or its GraphModule) on
    `example_inputs` and import it as a verified float Graph IR.

    Raises TesselError for a model in training mode, and one TesselUnsupportedOpError listing
    every op the IR cannot express (with its source line) unless `allow_host_ops`, in which
    case those ops become `host` ops run on the CPU through torch.
    """
    program = export_program(model, example_inputs)
    graph = import_program(program, sanitize_name(name or model_name(model)),
                           allow_host_ops=allow_host_ops)
    return verify(graph)
