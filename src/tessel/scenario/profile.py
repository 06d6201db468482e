"""What the scheduler needs of each model of a scenario, from the schedule stage: its NPU
steps with their estimated cycles (the analytical cost model `tessel.compile` and `tessel
estimate` use, residency and prefetch included), its dynamic energy per frame by component,
its constants' size and the bytes a frame reads of them, its activation arena and, per step
boundary, the bytes of on-chip state a preemption there must save and restore (activations
kept resident across the boundary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessel.arch import CompileOptions, NpuArch
from tessel.errors import TesselError
from tessel.ir import Graph
from tessel.isa.events import Events, energy_breakdown_pj
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.scenario.constants import constant_reads
from tessel.scenario.resident import reserve_energy
from tessel.scenario.spec import ScenarioModel
from tessel.schedule.events import step_events
from tessel.schedule.plan import plan
from tessel.schedule.result import Schedule

CALIBRATION_SAMPLES = 8  # per model: a scenario's estimate needs ranges, not accuracy


@dataclass(frozen=True)
class ModelProfile:
    name: str  # the scenario's name for it
    model: str
    steps: tuple[int, ...]  # cycles of each NPU step, in program order
    step_names: tuple[str, ...]
    dynamic_pj: dict[str, float]  # one frame's dynamic energy by component
    constant_bytes: int
    constant_reads: int  # bytes one frame reads from its constants (tessel.scenario.constants)
    weights_memory: str  # the off-chip memory they are read from
    arena_bytes: int  # its activation arena in the activation memory
    live_bytes: tuple[int, ...]  # on-chip state live across the boundary after each step
    host_ops: tuple[str, ...]

    @property
    def cycles(self) -> int:
        return sum(self.steps)

    @property
    def energy_pj(self) -> float:
        return sum(self.dynamic_pj.values())


def named(exc: TesselError, who: str) -> TesselError:
    """``exc`` (its class and attributes kept) with ``who`` in front of its message."""
    exc.args = (f"{who}: {exc}",)
    return exc


def quantised_graph(sm: ScenarioModel, samples: int = CALIBRATION_SAMPLES) -> Graph:
    """The integer graph of a scenario's model (its zoo calibration data, its inputs file if
    given), through the graph cache."""
    from tessel.models import resolve
    from tessel.models.data_files import read_inputs
    from tessel.quant.cache import cached_graph
    from tessel.quant.config import default_config

    spec = resolve(sm.model)
    model, inputs = spec.factory()
    if sm.inputs is not None:
        inputs = read_inputs(sm.inputs, inputs)
    return cached_graph(sm.model, model, inputs, spec.calibration_data(samples),
                        default_config(spec.name), samples)


def schedule_of(graph: Graph, arch: NpuArch, options: CompileOptions) -> tuple[Schedule, Any]:
    """The Schedule `tessel.compile` would emit for ``graph`` (and the partition)."""
    graph = legalize(graph, arch)
    part = partition(graph)
    sizes = [len(r.nodes) for r in part.regions] or None
    return plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                region_sizes=sizes, on_chip_residency=options.on_chip_residency,
                prefetch=options.prefetch_groups, stage_weights=options.stage_weights), part


def profile_model(sm: ScenarioModel, arch: NpuArch, options: CompileOptions | None = None,
                  graph: Graph | None = None) -> ModelProfile:
    """The profile of scenario model ``sm`` on ``arch``; a model that does not compile for
    the NPU raises a TesselError naming it."""
    options = options or CompileOptions()
    try:
        graph = graph if graph is not None else quantised_graph(sm)
        schedule, part = schedule_of(graph, arch, options)
    except TesselError as exc:
        raise named(exc, f"scenario model {sm.name!r} ({sm.model}) on {arch.name}") from None
    if not schedule.steps:
        raise TesselError(f"scenario model {sm.name!r} ({sm.model}) has no NPU step on "
                          f"{arch.name}: every op runs on the host")
    events = Events()
    for step in schedule.steps:
        events = events + step_events(step.work, arch, step.tally)
    return ModelProfile(
        sm.name, sm.model, tuple(s.estimate.cycles for s in schedule.steps),
        tuple(s.name for s in schedule.steps),
        reserve_energy(energy_breakdown_pj(events, arch), events, arch),
        len(schedule.constants.blob), constant_reads(schedule),
        arch.offchip[schedule.constants.memory].name, schedule.arena_peak, live_bytes(schedule),
        tuple(f"%{n.name} = {n.op.value}" for n in part.host_ops + part.moved_to_host))


def live_bytes(schedule: Schedule) -> tuple[int, ...]:
    """Per step boundary (after step b), the bytes of resident tensors a step <= b wrote or
    read on chip and a step > b still reads there."""
    first: dict[tuple, int] = {}
    last: dict[tuple, int] = {}
    for s, step in enumerate(schedule.steps):
        for r in step.residents:
            key = (r.mem, r.lo, r.hi, r.sram)
            first.setdefault(key, s)
            last[key] = s
    n = len(schedule.steps)
    return tuple(sum(k[2] - k[1] for k in first if first[k] <= b < last[k]) for b in range(n))
