"""The pt2e flow with Tessel's quantiser: export -> prepare -> calibrate (or train) -> convert.

The result of :func:`quantize_pt2e_module` / :func:`convert_qat` is torchao's QDQ graph:
float ATen ops with ``quantized_decomposed`` quantize / dequantize nodes around them and int8
weights / int32 biases folded into constants. The QDQ -> integer IR lowering reads that graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch.fx import GraphModule
from torchao.quantization.pt2e import move_exported_model_to_eval
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from tessel.errors import TesselConfigError
from tessel.progress import track
from tessel.quant.config import QuantConfig
from tessel.quant.quantizer import TesselQuantizer
from tessel.threads import single_threaded

Sample = torch.Tensor | Sequence[torch.Tensor]


def _as_args(sample: Sample) -> tuple[torch.Tensor, ...]:
    return (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)


def export_for_quant(model: torch.nn.Module, example_inputs: Sample) -> GraphModule:
    """``torch.export.export(model, inputs, strict=False).module()``: the graph pt2e annotates."""
    from tessel.frontend.export import exporting

    with exporting(model):
        return torch.export.export(model, _as_args(example_inputs), strict=False).module()


def calibrate(prepared: GraphModule, calibration_data: Iterable[Sample]) -> int:
    """Run every calibration sample through the observed model; returns the sample count."""
    count = 0
    with torch.no_grad(), single_threaded():  # float reduction order fixed: same binary
        for sample in track(calibration_data, "calibration"):
            prepared(*_as_args(sample))
            count += 1
    if count == 0:
        raise TesselConfigError("calibration_data is empty: PTQ needs at least one sample")
    return count


def quantize_pt2e_module(
    model: torch.nn.Module,
    example_inputs: Sample,
    calibration_data: Iterable[Sample],
    config: QuantConfig | None = None,
) -> GraphModule:
    """PTQ: export ``model`` (in eval mode; refused otherwise), annotate, calibrate, convert."""
    from tessel.frontend.model_input import as_module

    prepared = prepare_pt2e(export_for_quant(as_module(model), example_inputs), TesselQuantizer(config))
    calibrate(prepared, calibration_data)
    return convert_pt2e(prepared)


def prepare_qat(
    model: torch.nn.Module, example_inputs: Sample, config: QuantConfig | None = None
) -> GraphModule:
    """QAT: export ``model`` in train mode and insert fake-quant modules; train the result."""
    model.train()
    gm = export_for_quant(model, example_inputs)
    return prepare_qat_pt2e(gm, TesselQuantizer(config, is_qat=True))


def convert_qat(prepared: GraphModule) -> GraphModule:
    """QAT: switch the trained fake-quant graph to eval (batch norm) and convert to QDQ."""
    move_exported_model_to_eval(prepared)
    return convert_pt2e(prepared)
