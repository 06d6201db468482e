"""The one-call quantisation API: ``tessel.quantize(model, example_inputs, calibration_data)``.

    qm = tessel.quantize(model, (x,), calibration_data=[(x1,), (x2,)])
    y = qm.run(x)          # the bit-exact golden model (numpy)
    qm.graph               # integer Graph IR (NHWC), what the backend compiles
    qm.host_ops            # what runs on the CPU, with source locations

The flow, each step a stage function the driver calls in the same order: `ptq` (torch.export ->
prepare_pt2e with TesselQuantizer -> calibrate -> convert_pt2e) -> `import_qdq`
(tessel.frontend.qdq: the QDQ module into Graph IR) -> `lower_qdq` (tessel.quant.lower: integer
ops) -> `to_nhwc` (tessel.passes.to_nhwc: the NPU's layout). QAT:
``prepare_quantize_qat`` gives the fake-quant module to train; ``quantize_qat`` converts and
lowers it the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.fx import GraphModule
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES, MAX_CALIBRATION_SAMPLES
from tessel.collector import few_collections
from tessel.display import Table, plural, short_repr, summary_html
from tessel.errors import TesselConfigError
from tessel.frontend.ir_module import QDQModule
from tessel.frontend.locations import model_root
from tessel.frontend.model_input import as_module, example_inputs_of, is_exported, model_name
from tessel.frontend.output_names import default_names, output_names
from tessel.frontend.qdq import import_qdq
from tessel.ir import Graph, Node
from tessel.passes.to_nhwc import to_nhwc
from tessel.progress import info
from tessel.quant.config import QuantConfig, config_keyword
from tessel.quant.int4_weights import round_int4_weights
from tessel.quant.lower import host_ops, lower_qdq
from tessel.quant.pt2e import (
    Sample,
    calibrate,
    convert,
    convert_qat,
    export_for_quant,
    prepare_qat,
)
from tessel.quant.quantizer import TesselQuantizer


@dataclass(frozen=True)
class HostOp:
    """One op left on the host: its IR value, op, and where it came from."""

    name: str
    op: str
    loc: str

    def __str__(self) -> str:
        return f"%{self.name} = {self.op} at {self.loc}"


@dataclass(frozen=True)
class QuantizedModel:
    """A quantised model: the integer IR, its QDQ float reference, and how it was made."""

    graph: Graph
    qdq_graph: Graph
    config: QuantConfig
    calibration_samples: int
    host_ops: tuple[HostOp, ...] = field(default=())

    def run(self, *inputs: np.ndarray | torch.Tensor) -> list[np.ndarray]:
        """The golden model's outputs (numpy) for one set of inputs."""
        from tessel.quant.golden import run_golden

        arrays = [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
                  for x in inputs]
        return run_golden(self.graph, arrays)

    def __repr__(self) -> str:  # short: the graphs hold every weight (never dump them)
        return short_repr("QuantizedModel", [
            ("graph", repr(self.graph.name)), ("nodes", len(self.graph.nodes)),
            ("inputs", [v.name for v in self.graph.inputs]), ("outputs", list(self.graph.outputs)),
            ("calibration_samples", self.calibration_samples), ("host_ops", len(self.host_ops))])

    def _repr_html_(self) -> str:
        """Notebook view: the integer graph's summary and the ops left on the host."""
        lines = self.graph.summary().split("\n") + [
            f"calibrated on {self.calibration_samples} sample(s); observer "
            f"{self.config.observer.value}"]
        shown = self.host_ops[:_SHOWN_HOST_OPS]
        tables = [Table(("value", "op", "source"), [(h.name, h.op, h.loc) for h in shown],
                        title=f"host (CPU) ops: {len(shown)} of {len(self.host_ops)}")
                  ] if self.host_ops else []
        return summary_html(f"QuantizedModel {self.graph.name}", lines, tables)


_SHOWN_HOST_OPS = 10


def _as_args(sample: Sample) -> tuple[torch.Tensor, ...]:
    return (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)


def host_list(graph: Graph) -> tuple[HostOp, ...]:
    def one(n: Node) -> HostOp:
        return HostOp(n.name, n.attr("target") if n.op.value == "host" else n.op.value,
                      str(n.loc))
    return tuple(one(n) for n in host_ops(graph))


def quantized_model(qdq: Graph, config: QuantConfig, samples: int,
                    names: Sequence[str] | None = None) -> QuantizedModel:
    """The QuantizedModel of an imported QDQ graph: lowered to integer ops, NHWC layout, its
    outputs named ``names`` (the model's: frontend.output_names; default output_0, ...)."""
    graph = to_nhwc(lower_qdq(qdq))
    graph = graph.with_output_names(names if names is not None and len(names) == len(
        graph.outputs) else default_names(len(graph.outputs)))
    return QuantizedModel(graph, qdq, config, samples, host_list(graph))


def finish(converted: GraphModule, example_inputs: Sample, config: QuantConfig, samples: int,
           name: str, root: str | None = None, model: Any = None) -> QuantizedModel:
    """Import, lower and lay out a converted pt2e module (outputs named after ``model``'s)."""
    qdq = import_qdq(converted, example_inputs, name, root)
    names = None if model is None else output_names(model, _as_args(example_inputs),
                                                   len(qdq.outputs))
    return quantized_model(qdq, config, samples, names)


@few_collections()  # export, calibration and lowering allocate many small objects
def quantize(model: torch.nn.Module | torch.export.ExportedProgram,
             example_inputs: Sample | None = None,
             calibration_data: Iterable[Sample] | None = None,
             quant_config: QuantConfig | None = None, *,
             calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES,
             config: QuantConfig | None = None) -> QuantizedModel:
    """PTQ: export, prepare, calibrate (on up to `calibration_samples` samples of
    `calibration_data`; the example inputs if None), convert, import, lower, NHWC layout.

    `model`: an nn.Module in eval mode, a torch.export.ExportedProgram or an exported
    GraphModule (`ep.module()`); a model in training mode is refused (TesselError).
    `example_inputs` may be omitted for an ExportedProgram (its own examples are used).

    A QDQModule (a QDQ ONNX or int8 TFLite model) is already quantised: its graph is lowered
    as it is, keeping its scales and zero points (no calibration). `quant_config`: the
    QuantConfig (per-layer weight and activation types; default: int8); `config=` is its old
    name (tessel.quant.config.config_keyword)."""
    config = config_keyword(quant_config, config, "quantize") or QuantConfig()
    if isinstance(model, QDQModule):
        return quantized_import(model, config)
    example_inputs = example_inputs_of(model, example_inputs)
    converted, count = ptq(model, example_inputs, calibration_data, config, calibration_samples)
    info("quantise: import the integer graph, lower, NHWC layout")
    return finish(converted, example_inputs, config, count, model_name(model),
                  None if is_exported(model) else model_root(model), model)


def ptq(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sample,
        calibration_data: Iterable[Sample] | None, config: QuantConfig,
        calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES) -> tuple[GraphModule, int]:
    """Post-training quantisation on the exported ATen graph: torch.export -> prepare_pt2e
    (TesselQuantizer) -> calibrate (up to `calibration_samples` samples of
    `calibration_data`; the example inputs if None) -> convert_pt2e. Returns the converted
    QDQ module and the number of calibration samples run."""
    if not 1 <= calibration_samples <= MAX_CALIBRATION_SAMPLES:
        raise TesselConfigError(f"calibration_samples must be from 1 to "
                                f"{MAX_CALIBRATION_SAMPLES}, got {calibration_samples}")
    data = [_as_args(example_inputs)] if calibration_data is None else list(
        itertools.islice(calibration_data, calibration_samples))
    fewer = "" if calibration_data is None or len(data) >= calibration_samples else \
        f", all there are; {calibration_samples} asked"
    info(f"quantise: torch.export and prepare ({plural(len(data), 'calibration sample')}"
         f"{fewer})")
    module = as_module(model)
    check_finite(module, data)
    prepared = prepare_pt2e(export_for_quant(module, example_inputs), TesselQuantizer(config))
    count = calibrate(prepared, data, example_inputs)
    if round_int4_weights(prepared, [_as_args(s) for s in data]):
        info("quantise: int4 weights rounded on their layers' calibration inputs (GPTQ)")
    info("quantise: convert")
    try:
        return convert(prepared), count
    except AssertionError as e:  # torchao's observers: a min / max that is NaN
        if "should be less than max" not in str(e):
            raise
        raise TesselConfigError("quantisation: a tensor of the model is NaN on the calibration "
                                "data (its range has no scale); check the model's operations "
                                "on these inputs (log or sqrt of negatives, 0/0)") from None


def check_finite(module: torch.nn.Module, samples: Sequence[Sequence[Any]]) -> None:
    """TesselConfigError naming the tensor if a floating-point parameter or buffer of `module`
    holds NaN, or a calibration sample holds NaN or an infinity (neither has a scale)."""
    for kind, named in (("parameter", module.named_parameters()),
                        ("buffer", module.named_buffers())):
        for name, t in named:
            if t.is_floating_point() and bool(torch.isnan(t).any()):
                raise TesselConfigError(f"the model's {kind} '{name}' holds NaN values: it "
                                        "cannot be quantised")
    for k, sample in enumerate(samples):
        for j, x in enumerate(sample):
            if isinstance(x, torch.Tensor) and x.is_floating_point() and not bool(
                    torch.isfinite(x).all()):
                raise TesselConfigError(f"calibration sample {k}, input {j} holds NaN or "
                                        "infinite values: calibration needs finite data")


def quantized_import(model: QDQModule, config: QuantConfig | None = None) -> QuantizedModel:
    """Lower an imported QDQ graph (its own scales and zero points) like a converted pt2e one."""
    return quantized_model(model.qdq_graph, config or QuantConfig(), 0,
                           output_names(model, (), len(model.qdq_graph.outputs)))


def prepare_quantize_qat(model: torch.nn.Module, example_inputs: Sample,
                         config: QuantConfig | None = None) -> GraphModule:
    """QAT step 1: the fake-quant module to train (``tessel.quant.pt2e.prepare_qat``)."""
    return prepare_qat(model, example_inputs, config)


def quantize_qat(prepared: GraphModule, example_inputs: Sample,
                 config: QuantConfig | None = None, *, name: str = "model") -> QuantizedModel:
    """QAT step 2: convert the trained fake-quant module and lower it like PTQ."""
    converted = convert_qat(prepared)
    return finish(converted, example_inputs, config or QuantConfig(), 0, name)


def from_pt2e(converted: GraphModule, example_inputs: Sample, config: QuantConfig | None = None,
              *, calibration_samples: int = 0, name: str = "model") -> QuantizedModel:
    """Bring your own pt2e flow: a module you prepared with ``TesselQuantizer``, calibrated or
    trained yourself and converted with torchao's ``convert_pt2e``, as a QuantizedModel
    (import, lower, NHWC) that ``tessel.driver.compile_graph(qm.graph, arch)`` compiles.
    ``config`` must be the QuantConfig the quantiser was built with."""
    return finish(converted, example_inputs, config or QuantConfig(), calibration_samples, name)
