"""`tessel.compile`: the whole pipeline of DESIGN.md, top to bottom, verifier between stages.

    nn.Module -> frontend (torch.export) -> float passes   \\ tessel.quantize
              -> quantise (pt2e, TesselQuantizer) -> integer IR (lower_qdq, NHWC)
              -> partition (host prologue | NPU region | host | NPU region | ... | host epilogue)
              -> schedule (mapping search per op, cost model) -> memory plan (DRAM arena)
              -> codegen (token-ordered streams, pre-tiled constants) -> .tsl -> CompiledModel
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tessel import __version__
from tessel.arch import CompileOptions, NpuArch, load_target
from tessel.binary import TslProgram
from tessel.binary.metadata import METADATA_VERSION
from tessel.codegen.program import compile_region
from tessel.frontend.model_input import model_name
from tessel.ir import Graph, Node, print_graph, verify
from tessel.ir.macs import node_macs
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.reference import KEY as REFERENCE_KEY
from tessel.runtime.reference import reference_metadata
from tessel.schedule.fallback import op_label, summarize
from tessel.schedule.legalize import legalize
from tessel.schedule.partition import partition

Progress = Callable[[str], None]


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
            dump: Callable[[Graph], None] | None = None) -> CompiledModel:
    """Compile a PyTorch model for an NPU target; returns a runnable CompiledModel.

    model: an nn.Module in eval mode, a torch.export.ExportedProgram (e.g. from
    torch.export.load) or an exported GraphModule; example_inputs may be omitted for an
    ExportedProgram. source: how to rebuild the model (zoo name or file.py:factory), recorded in the binary so
    `tessel run --check` can recompute the golden and float references (a file by its name
    and content hash, not its path: see tessel.models.digest.source_record). dump: called with
    the integer graph after quantisation (`--dump-after quantize`)."""
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
        dump(qm.graph)
    extra: dict[str, Any] = {}
    if source:
        t0 = time.perf_counter()
        say("computing the reference outputs for `tessel run --check`")
        extra = {"source": {**source_record(source), "calibration": options.calibration_samples},
                 REFERENCE_KEY: _reference(model, qm, example_inputs)}
        times.record("reference", t0)
    return compile_graph(verify(qm.graph), arch, options=options, name=name, progress=say,
                         times=times, metadata=extra)


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


def compile_graph(graph: Graph, arch: NpuArch, *, options: CompileOptions | None = None,
                  name: str | None = None, progress: Progress | None = None,
                  times: StageTimes | None = None, metadata: dict[str, Any] | None = None
                  ) -> CompiledModel:
    """The backend: integer Graph IR (NHWC) -> CompiledModel."""
    options = options or CompileOptions()
    times = times if times is not None else StageTimes()
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    graph = legalize(graph)  # exact rewrites for the instruction fields (schedule/legalize.py)
    part = partition(graph, no_fallback=not options.allow_host_fallback)
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
    region = compile_region(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch, meta,
                            region_sizes=sizes, residency=options.on_chip_residency,
                            prefetch=options.prefetch_groups)
    t0 = times.record("backend", t0)
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


def _host_key(k: int, count: int) -> str:
    """HOST_GRAPHS key of host part k of `count`: prologue, host_1, ..., epilogue."""
    if k == 0:
        return "prologue"
    return "epilogue" if k == count - 1 else f"host_{k}"
