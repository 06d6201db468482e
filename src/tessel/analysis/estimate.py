"""Power / performance estimate without building a binary: the Schedule compile builds
(tessel.schedule.plan: mapping search, analytical cost model, memory plan, residency), plus the
energy events of the scheduled steps' instructions. The fast path for design-space
exploration; `tessel estimate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tessel.arch import CompileOptions, NpuArch, load_target
from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.display import Table, fmt_int, plural, short_repr, summary_html
from tessel.ir import Graph
from tessel.isa.costs import Events, energy_breakdown_pj, static_energy_pj
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.ops.registry import node_macs
from tessel.runtime.profile import TOP_LAYERS, InferenceFigures, layer_label
from tessel.schedule.events import step_events
from tessel.schedule.plan import plan


@dataclass(frozen=True)
class LayerEstimate:
    name: str  # the IR name of the step (its last node's, or the fused chain's)
    op: str
    mapping: str
    bound: str
    cycles: int
    macs: int
    loc: str = ""  # source location of its last node: ``file:line (module a.b.c)``

    @property
    def label(self) -> str:
        """What users call the layer: its module path, else its IR name."""
        return layer_label(self.name, self.loc)


@dataclass(frozen=True)
class EstimateReport(InferenceFigures):
    """The analytical estimate of a model's inference: the figures the simulator's profile
    reports, from the schedule alone (no binary, no simulation)."""

    layers: tuple[LayerEstimate, ...]

    def summary(self) -> str:
        rd, wr = sum(self.bytes_read.values()), sum(self.bytes_written.values())
        return (f"estimate for {self.model} on {self.target}: {self.cycles:,} cycles = "
                f"{self.latency_ms:.3f} ms\nenergy {self.energy_uj:.2f} uJ; MAC utilisation "
                f"{100 * self.mac_utilisation:.1f} %\noff-chip read {rd / 1e6:.2f} MB, written "
                f"{wr / 1e6:.2f} MB; host ops {len(self.host_ops)}")

    def layer_table(self, top: int | None = None) -> Table:
        """The layers (program order, or the ``top`` slowest) with a header row."""
        layers = list(self.layers) if top is None else sorted(
            self.layers, key=lambda x: -x.cycles)[:top]
        share = [100 * x.cycles / self.cycles if self.cycles else 0.0 for x in layers]
        title = (f"{len(layers)} slowest of {plural(len(self.layers), 'layer')}"
                 if top is not None else plural(len(layers), "layer"))
        return Table(("layer", "op", "cycles", "share %", "bound", "MACs", "mapping", "IR name"),
                     [(x.label, x.op, fmt_int(x.cycles), f"{share[i]:.1f}", x.bound,
                       fmt_int(x.macs), x.mapping, x.name) for i, x in enumerate(layers)],
                     numeric=(False, False, True, True, False, True, False, False), title=title,
                     secondary=(7,))

    def __repr__(self) -> str:
        return short_repr("EstimateReport", [
            ("model", repr(self.model)), ("target", repr(self.target)),
            ("cycles", fmt_int(self.cycles)), ("latency_ms", f"{self.latency_ms:.3f}"),
            ("energy_uj", f"{self.energy_uj:.2f}"), ("layers", len(self.layers)),
            ("host_ops", len(self.host_ops))])

    def _repr_html_(self) -> str:
        return summary_html(f"EstimateReport {self.model} on {self.target}",
                            self.summary().split("\n"),
                            [self.layer_table(TOP_LAYERS)])

    def _repr_markdown_(self) -> str:
        return self.summary() + "\n\n" + self.layer_table(TOP_LAYERS).markdown()


def estimate_graph(graph: Graph, arch: NpuArch, *, name: str | None = None,
                   options: CompileOptions | None = None, timing_only: bool = False
                   ) -> EstimateReport:
    """Estimate an integer graph on `arch` from the Schedule `compile_graph` would emit (the
    same stage, `tessel.schedule.plan`, with the same `options`: with on-chip residency too),
    so the cycles are the compiled layers' estimates added up. `timing_only`: cycles and
    layers only, no energy events (`energy_pj`, `bytes_read`, `bytes_written` are empty). With
    a search cache active (tessel.schedule.search.use) steps searched before are not
    searched again."""
    options = options or CompileOptions()
    graph = legalize(graph, arch)
    part = partition(graph)
    sizes = [len(r.nodes) for r in part.regions] or None
    schedule = plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                    region_sizes=sizes, on_chip_residency=options.on_chip_residency,
                    prefetch=options.prefetch_groups, stage_weights=options.stage_weights)
    layers, events = [], Events()
    for step in schedule.steps:
        if not timing_only:
            events = events + step_events(step.work, arch, step.tally)
        layers.append(LayerEstimate(step.name, step.op, str(step.mapping),
                                    step.estimate.bound.value, step.estimate.cycles,
                                    sum(node_macs(graph, n) for n in step.nodes),
                                    str(step.nodes[-1].loc)))
    cycles = schedule.cycles
    host = tuple(f"%{n.name} = {n.op.value} at {n.loc}" for n in part.host_ops + part.moved_to_host)
    if timing_only:
        macs = sum(x.macs for x in layers)
        util = macs / (cycles * arch.peak_macs_per_cycle) if cycles else 0.0
        return EstimateReport(name or graph.name, arch.name, arch.clock_hz, cycles,
                              1e3 * cycles / arch.clock_hz, macs, util, {}, {}, {},
                              tuple(layers), host)
    energy = dict(energy_breakdown_pj(events, arch))
    energy["static"] = static_energy_pj(cycles, arch)
    names = [m.name for m in arch.offchip]
    rd = list(events.offchip_read_bytes) + [0] * len(names)
    wr = list(events.offchip_write_bytes) + [0] * len(names)
    peak = arch.peak_macs_per_cycle
    macs = sum(x.macs for x in layers)  # the model's MACs (docs/figures.md), not re-executed ones
    return EstimateReport(
        name or graph.name, arch.name, arch.clock_hz, cycles, 1e3 * cycles / arch.clock_hz,
        macs, macs / (cycles * peak) if cycles else 0.0, energy,
        dict(zip(names, rd, strict=False)), dict(zip(names, wr, strict=False)), tuple(layers),
        tuple(f"%{n.name} = {n.op.value} at {n.loc}"
              for n in part.host_ops + part.moved_to_host))


def estimate(model: Any, example_inputs: Sequence[Any], *, target: str | NpuArch = "tnpu-s",
             calibration_data: Iterable[Sequence[Any]] | None = None,
             calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES, quant_config: Any = None,
             name: str | None = None, options: CompileOptions | None = None
             ) -> EstimateReport:
    """Quantise a PyTorch model and estimate it on `target` (no binary is built); `options`
    as for `tessel.compile` (e.g. on-chip residency)."""
    from tessel.quant.api import quantize

    arch = target if isinstance(target, NpuArch) else load_target(target)
    qm = quantize(model, tuple(example_inputs), calibration_data=calibration_data,
                  quant_config=quant_config, calibration_samples=calibration_samples)
    return estimate_graph(qm.graph, arch, name=name or type(model).__name__, options=options)
