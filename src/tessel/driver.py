"""`tessel.compile`: the whole pipeline (README.md, docs/backend.md), top to bottom, verifier
between stages.

    nn.Module -> frontend (torch.export) -> float passes   \\ tessel.quantize
              -> quantise (pt2e, TesselQuantizer) -> integer IR (lower_qdq, NHWC)
              -> legalise -> partition (host prologue | NPU region | host | ... | host epilogue)
              -> schedule (mapping search per op and fusion, cost model, constant layout, DRAM
                 arena, on-chip residency: one `Schedule` value)
              -> emit (token-ordered streams, once per step) -> .tsl -> CompiledModel

`--dump-after STAGE` prints what a stage produced (`Stage`: its text form).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tessel.arch import CompileOptions, NpuArch, load_target
from tessel.binary import TslProgram
from tessel.binary.metadata import METADATA_VERSION
from tessel.codegen.program import RegionProgram, emit
from tessel.collector import no_collections
from tessel.frontend.model_input import model_name
from tessel.ir import Graph, Node, Op, print_graph, verify
from tessel.ir.macs import node_macs
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.reference import KEY as REFERENCE_KEY
from tessel.runtime.reference import reference_metadata
from tessel.schedule.fallback import op_label, summarize
from tessel.schedule.legalize import legalize
from tessel.schedule.partition import Partition, partition
from tessel.schedule.plan import plan
from tessel.schedule.text import schedule_text
from tessel.version import __version__

Progress = Callable[[str], None]


class Stage(enum.Enum):
    """The stages whose result `--dump-after` prints, in pipeline order."""

    QUANTIZE = "quantize"  # the integer IR (NHWC) after quantisation
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
    ExportedProgram. source: how to rebuild the model (zoo name or file.py:factory), recorded in the binary so
    `tessel run --check` can recompute the golden and float references (a file by its name
    and content hash, not its path: see tessel.models.digest.source_record). dump: the stages
    to print and where (`--dump-after`)."""
    from tessel.quant.api import quantize
    from tessel.threads import single_threaded

    with single_threaded():  # same binary and speed whatever the caller's thread settings
        return _compile(model, example_inputs, target, calibration_data, options, quant_config,
                        name, progress, times, source, dump, quantize)


def _compile(model, example_inputs, target, calibration_data, options, quant_config, name,
             progress, times, source, dump, quantize) -> CompiledModel:
    from tessel.models.digest import source_record

    options = options or CompileOptions()
    arch = target if isinstance(target, NpuArch) else load_target(target)
    times = times if times is not None else StageTimes()
    say = progress or (lambda msg: None)
    name = name or model_name(model)
    t0 = time.perf_counter()
    say(f"quantising {name} ({options.calibration_samples} calibration samples)")
    qm = quantize(model, example_inputs, calibration_data=calibration_data,
                  config=quant_config, calibration_samples=options.calibration_samples)
    times.record("frontend+quantise", t0)
    if dump is not None:
        dump(Stage.QUANTIZE, lambda: print_graph(qm.graph, elide_constants=True))
    extra: dict[str, Any] = {}
    if source:
        t0 = time.perf_counter()
        say("computing the reference outputs for `tessel run --check`")
        extra = {"source": {**source_record(source), "calibration": options.calibration_samples},
                 REFERENCE_KEY: _reference(model, qm, example_inputs)}
        times.record("reference", t0)
    return compile_graph(verify(qm.graph), arch, options=options, name=name, progress=say,
                         times=times, metadata=extra, dump=dump)


def host_op_lines(graph: Graph, nodes: Sequence[Node]) -> list[str]:
    """One line per host op (each once): the ATen op of a `host` node, and why the NPU does
    not run an integer op ("after a host op" when only its position keeps it there)."""
    from tessel.codegen.registry import npu_refusal

    lines = []
    for n in {n.name: n for n in nodes}.values():
        op = op_label(n)
        why = npu_refusal(n, graph) if n.type.dtype.is_int else None
        if n.type.dtype.is_int:
            op += f" (NPU: {why or 'runs after a host op'})"
        lines.append(f"%{n.name} = {op} at {n.loc}")
    return lines


def _reference(model: Any, qm: Any, example_inputs: Sequence[torch.Tensor] | None
               ) -> dict[str, Any]:
    """Golden and float outputs on the example inputs (stored: `run --check` reuses them), and
    the outputs that span fewer than a few quantisation steps (warned about by the check)."""
    from tessel.frontend.model_input import as_module, example_inputs_of
    from tessel.runtime.check import float_reference, low_range_outputs

    inputs = example_inputs_of(model, example_inputs)
    golden = qm.run(*inputs)
    return reference_metadata(golden, float_reference(as_module(model), inputs),
                              low_range_outputs(qm.graph, golden))


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
    graph = legalize(graph)  # exact rewrites for the instruction fields (schedule/legalize.py)
    dump(Stage.LEGALIZE, lambda: print_graph(graph, elide_constants=True))
    part = partition(graph, no_fallback=not options.allow_host_fallback)
    dump(Stage.PARTITION, lambda: partition_text(part))
    fallback = summarize(graph, part)
    t0 = times.record("partition", t0)
    say(f"compiling {len(part.npu_nodes)} NPU ops in {len(part.regions)} region(s) for "
        f"{arch.name}")
    meta: dict[str, Any] = {
        "metadata_version": METADATA_VERSION,
        "model": name or graph.name, "target": arch.name, "tessel_version": __version__,
        "arch": arch.to_toml_dict(), "model_inputs": [v.name for v in graph.inputs],
        "model_outputs": list(graph.outputs),
        "host_ops": host_op_lines(graph, part.host_ops + part.moved_to_host),
        "fallback": fallback.to_dict(),
        **(metadata or {}),
    }
    sizes = [len(r.nodes) for r in part.regions] or None
    schedule = plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                    region_sizes=sizes, on_chip_residency=options.on_chip_residency,
                    prefetch=options.prefetch_groups)
    t0 = times.record("schedule", t0)
    dump(Stage.SCHEDULE, lambda: schedule_text(schedule))
    region = emit(schedule, meta)
    t0 = times.record("emit", t0)
    dump(Stage.EMIT, lambda: streams_text(region.program))
    meta = dict(region.program.metadata)
    meta["arena_peak_bytes"] = region.arena_peak
    meta["arena_naive_bytes"] = region.arena_naive
    meta["layers"] = [{"name": lay.name, "op": lay.op, "loc": lay.loc, "mapping": lay.mapping,
                       "bound": lay.estimate.bound.value,
                       "estimated_cycles": lay.estimate.cycles, "first": lay.first_instr,
                       "last": lay.last_instr, "nodes": list(lay.nodes or (lay.name,)),
                       "macs": sum(node_macs(graph, graph.node_map[n])
                                   for n in (lay.nodes or (lay.name,)))}
                      for lay in region.layers]
    if len(part.regions) > 1:  # format 1.1; absent: one region with every descriptor
        meta["npu_regions"] = [{"inputs": list(r.inputs), "outputs": list(r.outputs),
                                "ends": ends}
                               for r, ends in zip(part.regions, region.region_ends, strict=False)]
    host = {_host_key(k, len(part.hosts)): print_graph(g)
            for k, g in enumerate(part.hosts) if g.nodes and g.outputs}
    p = region.program
    program = TslProgram(p.arch_hash, p.streams, p.constants, p.constants_memory,
                         p.constants_address, p.inputs, p.outputs, meta, host)
    compiled = CompiledModel(program, arch)
    _ = compiled.binary  # serialise once: validates the program as a reader would
    times.record("serialise", t0)
    return compiled


def partition_text(part: Partition) -> str:
    """The host parts and NPU regions, one line each, in run order."""
    lines = []
    for k, host in enumerate(part.hosts):
        ops = ", ".join(f"%{n.name} = {op_label(n)}" for n in host.nodes
                        if n.op is not Op.CONSTANT)
        lines.append(f"host {_host_key(k, len(part.hosts))}: {ops or '(nothing)'}")
        if k < len(part.regions):
            r = part.regions[k]
            lines.append(f"npu region {k + 1}: {len(r.nodes)} op(s) "
                         f"{', '.join('%' + n.name for n in r.nodes)}; reads "
                         f"{', '.join('%' + v for v in r.inputs)}; hands on "
                         f"{', '.join('%' + v for v in r.outputs)}")
    return "\n".join(lines) + "\n"


def streams_text(program: TslProgram) -> str:
    """Every engine's instruction stream, disassembled (a stream held as encoded bytes is
    decoded first)."""
    from tessel.isa import Engine, disassemble
    from tessel.isa.codec import decode_stream

    def instructions(e: Engine) -> Sequence[Any]:
        stream = program.streams[e]
        return decode_stream(e, stream) if isinstance(stream, bytes) else stream

    return "".join(f".engine {e.name}\n{disassemble(instructions(e))}" for e in Engine
                   if e in program.streams)


def compile_region(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
                   outputs: Sequence[str], arch: NpuArch, metadata: dict[str, Any],
                   units: list | None = None, region_sizes: Sequence[int] | None = None,
                   residency: bool = False, prefetch: bool = True) -> RegionProgram:
    """The backend of the NPU nodes `nodes` of `graph` (schedule, then emit; see
    `tessel.schedule.plan.plan` for the arguments); `compile_graph` without the partition."""
    schedule = plan(graph, nodes, inputs, outputs, arch, region_sizes=region_sizes,
                    on_chip_residency=residency, prefetch=prefetch, units=units)
    return emit(schedule, metadata)


def _host_key(k: int, count: int) -> str:
    """HOST_GRAPHS key of host part k of `count`: prologue, host_1, ..., epilogue."""
    if k == 0:
        return "prologue"
    return "epilogue" if k == count - 1 else f"host_{k}"
