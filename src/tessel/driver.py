"""`tessel.compile`: the whole pipeline of DESIGN.md, top to bottom, verifier between stages.

    nn.Module -> frontend (torch.export) -> float passes   \\ tessel.quantize
              -> quantise (pt2e, TesselQuantizer) -> integer IR (lower_qdq, NHWC)
              -> partition (host prologue | NPU region | host epilogue)
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
from tessel.codegen.program import compile_region
from tessel.ir import Graph, print_graph, verify
from tessel.ir.macs import node_macs
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.reference import KEY as REFERENCE_KEY
from tessel.runtime.reference import reference_metadata
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


def compile(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], *,  # noqa: A001
            target: str | NpuArch = "tnpu-s",
            calibration_data: Iterable[Sequence[torch.Tensor]] | None = None,
            options: CompileOptions | None = None, quant_config: Any = None,
            name: str | None = None, progress: Progress | None = None,
            times: StageTimes | None = None, source: str | None = None,
            dump: Callable[[Graph], None] | None = None) -> CompiledModel:
    """Compile a PyTorch model for an NPU target; returns a runnable CompiledModel.

    source: how to rebuild the model (zoo name or file.py:factory), recorded in the binary so
    `tessel run --check` can recompute the golden and float references. dump: called with
    the integer graph after quantisation (`--dump-after quantize`)."""
    from tessel.quant.api import quantize
    from tessel.threads import single_threaded

    with single_threaded():  # same binary and speed whatever the caller's thread settings
        return _compile(model, example_inputs, target, calibration_data, options, quant_config,
                        name, progress, times, source, dump, quantize)


def _compile(model, example_inputs, target, calibration_data, options, quant_config, name,
             progress, times, source, dump, quantize) -> CompiledModel:
    options = options or CompileOptions()
    arch = target if isinstance(target, NpuArch) else load_target(target)
    times = times if times is not None else StageTimes()
    say = progress or (lambda msg: None)
    name = name or type(model).__name__
    t0 = time.perf_counter()
    say(f"quantising {name} ({options.calibration_samples} calibration samples)")
    qm = quantize(model, tuple(example_inputs), calibration_data=calibration_data,
                  config=quant_config, calibration_samples=options.calibration_samples)
    times.record("frontend+quantise", t0)
    if dump is not None:
        dump(qm.graph)
    extra: dict[str, Any] = {}
    if source:
        t0 = time.perf_counter()
        say("computing the reference outputs for `tessel run --check`")
        extra = {"source": {"model": source, "calibration": options.calibration_samples},
                 REFERENCE_KEY: _reference(model, qm, example_inputs)}
        times.record("reference", t0)
    return compile_graph(verify(qm.graph), arch, options=options, name=name, progress=say,
                         times=times, metadata=extra)


def _reference(model: torch.nn.Module, qm: Any, example_inputs: Sequence[torch.Tensor]
               ) -> dict[str, Any]:
    """Golden and float outputs on the example inputs (stored: `run --check` reuses them)."""
    golden = qm.run(*example_inputs)
    with torch.no_grad():
        out = model(*example_inputs)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    return reference_metadata(golden, [o.detach().float().numpy() for o in outs])


def compile_graph(graph: Graph, arch: NpuArch, *, options: CompileOptions | None = None,
                  name: str | None = None, progress: Progress | None = None,
                  times: StageTimes | None = None, metadata: dict[str, Any] | None = None
                  ) -> CompiledModel:
    """The backend: integer Graph IR (NHWC) -> CompiledModel."""
    options = options or CompileOptions()
    times = times if times is not None else StageTimes()
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    part = partition(graph, no_fallback=not options.allow_host_fallback)
    t0 = times.record("partition", t0)
    say(f"compiling {len(part.npu_nodes)} NPU ops for {arch.name}")
    meta: dict[str, Any] = {
        "model": name or graph.name, "target": arch.name, "tessel_version": __version__,
        "arch": arch.to_toml_dict(), "model_inputs": [v.name for v in graph.inputs],
        "model_outputs": list(graph.outputs),
        "host_ops": [f"%{n.name} = {n.op.value} at {n.loc}" for n in
                     part.host_ops + part.moved_to_host],
        **(metadata or {}),
    }
    region = compile_region(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch, meta)
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
    host = {k: print_graph(g) for k, g in (("prologue", part.prologue),
                                            ("epilogue", part.epilogue)) if g.nodes or
            g.outputs != tuple(v.name for v in g.inputs)}
    p = region.program
    program = TslProgram(p.arch_hash, p.streams, p.constants, p.constants_memory,
                         p.constants_address, p.inputs, p.outputs, meta, host)
    compiled = CompiledModel(program, arch)
    _ = compiled.binary  # serialise once: validates the program as a reader would
    times.record("serialise", t0)
    return compiled
