"""Run a scenario on one NPU: profile every model (tessel.scenario.profile), plan which
models' constants stay on chip across frames (tessel.scenario.constants), turn the scenario
into periodic tasks in cycles (tessel.scenario.power), schedule them over the hyperperiod or
a given window (tessel.scenario.scheduler) and report latency, deadlines, busy time, energy
and power (tessel.scenario.report).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from fractions import Fraction

from tessel.arch import CompileOptions, NpuArch
from tessel.errors import TesselConfigError, TesselError
from tessel.ir import Graph
from tessel.scenario.constants import (
    NO_RESIDENCY,
    SRAM_GRANULE,
    Candidate,
    plan_constants,
    reserves,
    saving_per_byte_pj,
)
from tessel.scenario.memory import memory_map
from tessel.scenario.power import PowerModel
from tessel.scenario.profile import (
    ModelProfile,
    named,
    profile_model,
    quantised_graph,
    with_resident_constants,
)
from tessel.scenario.report import ScenarioReport
from tessel.scenario.scheduler import Policy, Task, simulate
from tessel.scenario.spec import Scenario, ScenarioModel
from tessel.scenario.switch import SwitchCosts

MAX_WINDOW_S = 60.0  # a longer window is a typo, and would take long to simulate
MAX_JOBS = 50_000  # about 20 s of scheduling on models of tens of steps


class Reserve(enum.Enum):
    """`resident_constants` other than a number of bytes."""

    AUTO = "auto"  # try `constants.reserves`, keep the best


def tasks_of(scenario: Scenario, profiles: dict[str, ModelProfile],
             switches: dict[str, SwitchCosts], pm: PowerModel) -> list[Task]:
    """One task per model, times in cycles at ``pm``'s clock."""
    out = []
    for m in scenario.models:
        p, sw = profiles[m.name], switches[m.name]
        out.append(Task(m.name, pm.period_cycles(m.rate_hz), math.floor(pm.cycles(m.deadline_s)),
                        m.priority, p.steps, round(pm.cycles(m.offset_s)),
                        math.floor(pm.cycles(m.jitter_s)), m.after,
                        tuple(t.cycles for t in sw.save), tuple(t.cycles for t in sw.restore)))
    return out


def window_cycles(scenario: Scenario, window_s: float | None, pm: PowerModel) -> int:
    """The simulated window: ``window_s``, else the hyperperiod."""
    if window_s is not None and not 0 < window_s <= MAX_WINDOW_S:
        raise TesselConfigError(f"the window must be > 0 and <= {MAX_WINDOW_S:g} s, got "
                                f"{window_s!r} s")
    seconds = Fraction(str(window_s)) if window_s is not None else Fraction(
        str(scenario.hyperperiod_s))
    jobs = sum(float(seconds) * m.rate_hz for m in scenario.models)
    if jobs > MAX_JOBS:
        raise TesselConfigError(f"the window holds {jobs:,.0f} jobs, more than {MAX_JOBS:,}: "
                                "give a shorter --window-ms")
    return max(1, math.floor(pm.cycles(seconds)))


def check_reserve(arch: NpuArch, reserve: int) -> None:
    sram = arch.onchip.sram_bytes
    if reserve % SRAM_GRANULE or not 0 <= reserve < sram:
        raise TesselConfigError(f"the SRAM reserved for resident constants must be a multiple "
                                f"of {SRAM_GRANULE} bytes in [0, {sram}), got {reserve}")


def run_scenario(scenario: Scenario, arch: NpuArch, *, policy: Policy = Policy.FIXED,
                 window_s: float | None = None, idle_gating: float = 0.0, seed: int = 0,
                 preemptive: bool = True, options: CompileOptions | None = None,
                 resident_constants: int | Reserve = 0, power: PowerModel | None = None,
                 progress: Callable[[str], None] | None = None) -> ScenarioReport:
    """Profile, schedule and report ``scenario`` on ``arch`` (see the module docstring).
    ``resident_constants``: SRAM bytes set aside for constants kept on chip across frames
    (0: none, every frame reads them), or ``Reserve.AUTO``: each of `constants.reserves` tried, the
    report of lowest average power kept among those with no more deadline misses than none
    (its `tried` lists them all). ``power``: the clock, leakage and dynamic-energy scale of
    an operating point (default: the preset's, `PowerModel.of(arch, idle_gating)`)."""
    pm = power if power is not None else PowerModel.of(arch, idle_gating)
    window = window_cycles(scenario, window_s, pm)
    say = progress or (lambda msg: None)
    auto = resident_constants is Reserve.AUTO
    if not auto:
        check_reserve(arch, int(resident_constants))
    graphs = {}
    for m in scenario.models:
        say(f"quantising {m.name} ({m.model})")
        graphs[m.name] = _graph(m)
    tries = reserves(arch) if auto else [int(resident_constants)]
    reports = []
    for reserve in tries:
        say(f"scheduling every model for {arch.onchip.sram_bytes - reserve} bytes of SRAM "
            f"({reserve} reserved for resident constants)")
        try:
            profiles = _profiles(scenario, arch, reserve, graphs, options)
        except TesselError as exc:
            if len(tries) == 1 or reserve == 0:
                raise
            say(f"not with {reserve} bytes reserved: {exc}")
            continue
        plan = NO_RESIDENCY
        if reserve:
            plan = plan_constants([Candidate(m.name, profiles[m.name].constant_bytes,
                                             _saving(profiles[m.name], arch) * m.rate_hz)
                                   for m in scenario.models], reserve)
            profiles = {n: with_resident_constants(p, arch) if n in plan.resident else p
                        for n, p in profiles.items()}
        switches = {n: SwitchCosts.of(p.live_bytes, arch) for n, p in profiles.items()}
        timeline = simulate(tasks_of(scenario, profiles, switches, pm), window, policy,
                            preemptive=preemptive, seed=seed)
        report = ScenarioReport(scenario, arch.name, policy, pm, profiles, switches, timeline,
                                preemptive, plan)
        layout = memory_map(profiles, plan, report.shared_arena_bytes, arch)
        reports.append(dataclasses.replace(report, memory=layout))
    floor = reports[0].misses
    best = min((r for r in reports if r.misses <= floor), key=lambda r: r.power_mw)
    tried = tuple((r.constants.reserve, r.constants.resident, r.power_mw, r.misses)
                  for r in reports)
    return best.with_tried(tried) if len(reports) > 1 else best


def _graph(m: ScenarioModel) -> Graph:
    try:
        return quantised_graph(m)
    except TesselError as exc:
        raise named(exc, f"scenario model {m.name!r} ({m.model})") from None


def _profiles(scenario: Scenario, arch: NpuArch, reserve: int, graphs: dict,
              options: CompileOptions | None) -> dict[str, ModelProfile]:
    """Every model scheduled for the SRAM left after ``reserve`` bytes."""
    sram = arch.onchip.sram_bytes
    smaller = arch if reserve == 0 else arch.with_param("onchip.sram_bytes", sram - reserve)
    return {m.name: profile_model(m, smaller, options, graph=graphs[m.name])
            for m in scenario.models}


def _saving(p: ModelProfile, arch: NpuArch) -> float:
    """Energy one frame saves with its constants on chip."""
    index = [m.name for m in arch.offchip].index(p.weights_memory)
    return p.constant_reads * saving_per_byte_pj(arch, index)
