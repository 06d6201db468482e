"""Run a scenario on one NPU: profile every model (tessel.scenario.profile), turn the scenario
into periodic tasks in cycles (tessel.scenario.power), schedule them over the hyperperiod or a
given window (tessel.scenario.scheduler) and report latency, deadlines, busy time, energy and
power (tessel.scenario.report).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from tessel.arch import CompileOptions, NpuArch
from tessel.errors import TesselConfigError
from tessel.scenario.power import PowerModel
from tessel.scenario.profile import ModelProfile, profile_model
from tessel.scenario.report import ScenarioReport
from tessel.scenario.scheduler import Policy, Task, simulate
from tessel.scenario.spec import Scenario
from tessel.scenario.switch import SwitchCosts

MAX_WINDOW_S = 60.0  # a longer window is a typo, and would take long to simulate
MAX_JOBS = 200_000


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


def run_scenario(scenario: Scenario, arch: NpuArch, *, policy: Policy = Policy.FIXED,
                 window_s: float | None = None, idle_gating: float = 0.0, seed: int = 0,
                 preemptive: bool = True, options: CompileOptions | None = None,
                 progress: Callable[[str], None] | None = None) -> ScenarioReport:
    """Profile, schedule and report ``scenario`` on ``arch`` (see the module docstring)."""
    pm = PowerModel.of(arch, idle_gating)
    window = window_cycles(scenario, window_s, pm)
    profiles, switches = {}, {}
    for m in scenario.models:
        if progress is not None:
            progress(f"scheduling {m.name} ({m.model}) on {arch.name}")
        profiles[m.name] = profile_model(m, arch, options)
        switches[m.name] = SwitchCosts.of(profiles[m.name].live_bytes, arch)
    timeline = simulate(tasks_of(scenario, profiles, switches, pm), window, policy,
                        preemptive=preemptive, seed=seed)
    return ScenarioReport(scenario, arch.name, policy, pm, profiles, switches, timeline,
                          preemptive)
