"""`tessel.compile`: the whole pipeline (README.md, docs/backend.md), top to bottom, verifier
between stages.

    nn.Module -> ptq (quant.api: torch.export, pt2e with TesselQuantizer, calibrate, convert)
              -> import (frontend.qdq: the QDQ module as Graph IR)
              -> lower_qdq (quant.lower: integer ops, LUT fusion)
              -> layout (passes.to_nhwc: NHWC)                             = tessel.quantize
              -> legalise -> partition (host prologue | NPU region | host | ... | host epilogue)
              -> schedule (mapping search per op and fusion, cost model, constant layout, DRAM
                 arena, on-chip residency: one `Schedule` value)
              -> emit (token-ordered streams once per step, metadata) -> .tsl -> CompiledModel

The float rewriting of this path is torch's (export's decompositions, pt2e's conv / batch-norm
folding): the QDQ graph is imported after quantisation. Tessel's float passes (tessel.passes)
run on float IR (`tessel import`, `tessel opt`). A model already in QDQ form (ONNX, TFLite:
`frontend.ir_module.QDQModule`) starts at lower_qdq. `--dump-after STAGE` prints what a stage
produced (`Stage`: its text form).
"""
from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tessel.arch import CompileOptions, NpuArch, load_target
from tessel.collector import few_collections, no_collections
from tessel.display import plural
from tessel.emit.metadata import model_metadata
from tessel.emit.program import emit
from tessel.emit.text import streams_text
from tessel.frontend.model_input import model_name
from tessel.ir import Graph, print_graph
from tessel.lower.fallback import summarize
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.reference import KEY as REFERENCE_KEY
from tessel.runtime.reference import reference_metadata
from tessel.schedule.plan import plan
from tessel.schedule.text import schedule_text

Progress = Callable[[str], None]


class Stage(enum.Enum):
    """The stages whose result `--dump-after` prints, in pipeline order."""

    IMPORT = "import"  # the QDQ graph: float ops between quantize / dequantize
    LOWER = "lower_qdq"  # the integer IR (the model's own layout)
    QUANTIZE = "quantize"  # the integer IR in the NPU's layout (NHWC): what tessel.quantize gives
    LEGALIZE = "legalize"  # the integer IR after the exact rewrites for the instruction fields
    PARTITION = "partition"  # host parts and NPU regions
    SCHEDULE = "schedule"  # one line per step (schedule/text.py)
    EMIT = "emit"  # the instruction streams, per engine


def parse_stages(names: Iterable[str]) -> frozenset[Stage]:
    """`--dump-after` names -> stages; an unknown name is a TesselConfigError listing them."""
    from tessel.errors import TesselConfigError

    known = {s.value: s for s in Stage}
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise TesselConfigError(f"--dump-after {unknown}: the compile's stages are "
                                f"{', '.join(known)} (use `tessel import --dump-after PASS` "
                                "for the float passes)")
    return frozenset(known[n] for n in names)


@dataclass(frozen=True)
class Dumps:
    """Which stages to print, and where to (one text per stage, headed by its name)."""

    after: frozenset[Stage]
    write: Callable[[str], None]

    def __call__(self, stage: Stage, text: Callable[[], str]) -> None:
        if stage in self.after:
            self.write(f"// ----- after {stage.value} -----\n{text()}")


@dataclass
class StageTimes:
    """Wall seconds per pipeline stage of the last compile (for benchmarks)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def record(self, stage: str, t0: float) -> float:
        t1 = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + t1 - t0
        return t1


def compile(model: torch.nn.Module | torch.export.ExportedProgram,  # noqa: A001
            example_inputs: Sequence[torch.Tensor] | None = None, *,
            target: str | NpuArch = "tnpu-s",
            calibration_data: Iterable[Sequence[torch.Tensor]] | None = None,
            options: CompileOptions | None = None, quant_config: Any = None,
            name: str | None = None, progress: Progress | None = None,
            times: StageTimes | None = None, source: str | None = None,
            dump: Dumps | None = None) -> CompiledModel:
    """Compile a PyTorch model for an NPU target; returns a runnable CompiledModel.

    model: an nn.Module in eval mode, a torch.export.ExportedProgram (e.g. from
    torch.export.load) or an exported GraphModule; example_inputs may be omitted for an
    ExportedProgram. source: how to rebuild the model (zoo name or file.py:factory), recorded in
    the binary so `tessel run --check` can recompute the golden and float references (a file by
    its name and content hash, not its path: see tessel.models.digest.source_record). dump: the
    stages to print and where (`--dump-after`)."""
    from tessel.threads import single_threaded

    with single_threaded():  # same binary and speed whatever the caller's thread settings
        return _compile(model, example_inputs, target, calibration_data, options, quant_config,
                        name, progress, times, source, dump)


def _compile(model, example_inputs, target, calibration_data, options, quant_config, name,
             progress, times, source, dump) -> CompiledModel:
    from tessel.frontend.ir_module import QDQModule
    from tessel.frontend.locations import model_root
    from tessel.frontend.model_input import example_inputs_of, is_exported
    from tessel.frontend.output_names import output_names
    from tessel.frontend.qdq import import_qdq
    from tessel.passes.to_nhwc import to_nhwc
    from tessel.quant.api import QuantizedModel, host_list, ptq
    from tessel.quant.config import QuantConfig, weights_record
    from tessel.quant.lower import lower_qdq

    options = options or CompileOptions()
    config = quant_config if quant_config is not None else QuantConfig()
    arch = target if isinstance(target, NpuArch) else load_target(target)
    times = times if times is not None else StageTimes()
    say = progress or (lambda msg: None)
    dump = dump or Dumps(frozenset(), print)
    name = name or model_name(model)
    t0 = time.perf_counter()
    samples = 0
    with few_collections():  # export, calibration and lowering make many small objects
        if isinstance(model, QDQModule):  # ONNX / TFLite: quantised already, its own scales
            qdq = model.qdq_graph
        else:
            say(f"quantising {name}")  # ptq says how many calibration samples it runs
            example_inputs = example_inputs_of(model, example_inputs)
            converted, samples = ptq(model, example_inputs, calibration_data, config,
                                     options.calibration_samples)
            qdq = import_qdq(converted, example_inputs, name,
                             None if is_exported(model) else model_root(model))
        dump(Stage.IMPORT, lambda: print_graph(qdq, elide_constants=True))
        integer = lower_qdq(qdq)
        dump(Stage.LOWER, lambda: print_graph(integer, elide_constants=True))
        graph = to_nhwc(integer)
        graph = graph.with_output_names(  # the model's own output names (output_0, ...)
            output_names(model, example_inputs if example_inputs is not None else (),
                         len(graph.outputs)))
        dump(Stage.QUANTIZE, lambda: print_graph(graph, elide_constants=True))
    times.record("frontend+quantise", t0)
    extra: dict[str, Any] = {}
    if source:
        from tessel.frontend.cut import cut_record
        from tessel.models.digest import source_record

        t0 = time.perf_counter()
        say("computing the reference outputs for `tessel run --check`")
        qm = QuantizedModel(graph, qdq, config, samples, host_list(graph))
        extra = {"source": {**source_record(source), "calibration": options.calibration_samples,
                            **weights_record(config), **cut_record(model)},
                 REFERENCE_KEY: _reference(model, qm, example_inputs)}
        times.record("reference", t0)
    return compile_graph(graph, arch, options=options, name=name, progress=say, times=times,
                         metadata=extra, dump=dump)


def _reference(model: Any, qm: Any, example_inputs: Sequence[torch.Tensor] | None
               ) -> dict[str, Any]:
    """Golden and float outputs on the example inputs (stored: `run --check` reuses them), and
    the outputs that span fewer than a few quantisation steps (warned about by the check)."""
    from tessel.frontend.model_input import as_module, example_inputs_of
    from tessel.runtime.check import (
        FloatReference,
        float_reference,
        float_reference_of,
        low_range_outputs,
    )

    inputs = example_inputs_of(model, example_inputs)
    golden = qm.run(*inputs)
    float_of = float_reference_of(model)
    return reference_metadata(golden, [] if float_of is FloatReference.NONE
                              else float_reference(as_module(model), inputs),
                              low_range_outputs(qm.graph, golden),
                              [np.asarray(x.detach().cpu() if hasattr(x, "detach") else x)
                               for x in inputs], float_of)


@no_collections()  # the backend makes millions of objects and no cyclic garbage (tessel.collector)
def compile_graph(graph: Graph, arch: NpuArch, *, options: CompileOptions | None = None,
                  name: str | None = None, progress: Progress | None = None,
                  times: StageTimes | None = None, metadata: dict[str, Any] | None = None,
                  dump: Dumps | None = None) -> CompiledModel:
    """The backend: integer Graph IR (NHWC) -> legalise -> partition -> schedule -> emit ->
    CompiledModel."""
    options = options or CompileOptions()
    times = times if times is not None else StageTimes()
    say = progress or (lambda msg: None)
    dump = dump or Dumps(frozenset(), print)
    t0 = time.perf_counter()
    graph = legalize(graph, arch)  # exact rewrites for the target (lower/legalize.py)
    dump(Stage.LEGALIZE, lambda: print_graph(graph, elide_constants=True))
    part = partition(graph, no_fallback=not options.allow_host_fallback)
    dump(Stage.PARTITION, part.text)
    fallback = summarize(graph, part)
    t0 = times.record("partition", t0)
    say(f"compiling {plural(len(part.npu_nodes), 'NPU op')} in "
        f"{plural(len(part.regions), 'region')} for "
        f"{arch.name}")
    meta = {**model_metadata(graph, arch, name or graph.name, part, fallback), **(metadata or {})}
    sizes = [len(r.nodes) for r in part.regions] or None
    schedule = plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                    region_sizes=sizes, on_chip_residency=options.on_chip_residency,
                    prefetch=options.prefetch_groups, stage_weights=options.stage_weights)
    t0 = times.record("schedule", t0)
    dump(Stage.SCHEDULE, lambda: schedule_text(schedule))
    region = emit(schedule, meta, part)
    t0 = times.record("emit", t0)
    dump(Stage.EMIT, lambda: streams_text(region.program))
    compiled = CompiledModel(region.program, arch)
    _ = compiled.binary  # serialise once: validates the program as a reader would
    times.record("serialise", t0)
    return compiled
