"""`tessel advise --scenario FILE --target PRESET`: what limits a scenario's schedule on an NPU
and what each knob would gain.

The limiting model is the one whose worst response time comes closest to its deadline (largest
max latency / deadline over the simulated window); its limiting layer is its longest NPU step.
Then every change `tessel advise` tries on one model (each knob relaxed 2x,
tessel.analysis.advise) and every other operating point of the target is run on the whole
scenario: its average power, deadline misses and the limiting model's worst latency, against
the target's. A relaxed NPU is larger: its static power is scaled with its area, as `tessel
explore` does (``explore_space.build_arch``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tessel.analysis.advise import relax, relaxations
from tessel.arch import NpuArch
from tessel.arch.operating import at_point
from tessel.display import Table
from tessel.errors import TesselError


@dataclass(frozen=True)
class ScenarioChange:
    """One change of the NPU run on the scenario (``error``: why it could not be)."""

    label: str
    area_mm2: float
    power_mw: float = 0.0
    misses: int = 0
    limiting_max_ms: float = 0.0  # the limiting model's worst latency with the change
    error: str = ""


@dataclass(frozen=True)
class ScenarioAdvice:
    scenario: str
    target: str
    power_mw: float
    misses: int
    area_mm2: float
    model: str  # the limiting model
    max_ms: float
    deadline_ms: float
    layer: str  # its longest step
    layer_share: float  # of the model's frame cycles
    changes: tuple[ScenarioChange, ...]  # ranked: no more misses first, then by power

    def summary(self) -> str:
        return (f"scenario {self.scenario} on {self.target}: {self.power_mw:.3f} mW, "
                f"{self.misses} deadline misses\nlimiting model: {self.model} (worst latency "
                f"{self.max_ms:.3f} ms of a {self.deadline_ms:.3f} ms deadline); its longest "
                f"step: {self.layer} ({100 * self.layer_share:.1f} % of its frame)")

    def table(self, width: int | None = None) -> str:
        rows = [(c.label, f"{c.area_mm2 - self.area_mm2:+.4f}",
                 "" if c.error else f"{c.power_mw:.3f}",
                 "" if c.error else f"{100 * (c.power_mw / self.power_mw - 1):+.1f}",
                 "" if c.error else str(c.misses),
                 "" if c.error else f"{c.limiting_max_ms:.3f}", c.error) for c in self.changes]
        t = Table(("change", "area mm2", "power mW", "power %", "misses",
                   f"{self.model} max ms", "note"), rows,
                  numeric=(False, True, True, True, True, True, False),
                  title="each change run on the whole scenario")
        return self.summary() + "\n" + t.text(width)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def advise_scenario(scenario: Any, arch: NpuArch, **run_options: Any) -> ScenarioAdvice:
    """The advice (module docstring); ``run_options`` go to ``run_scenario``."""
    from tessel.scenario.run import run_scenario

    base = run_scenario(scenario, arch, **run_options)
    worst = max(base.models, key=lambda m: m.max_ms / m.deadline_ms)
    prof = base.profiles[worst.name]
    longest = max(range(len(prof.steps)), key=lambda i: prof.steps[i])
    changes = []
    candidates = [(f"operating point {p.name} ({p.clock_hz / 1e6:g} MHz, {p.voltage_v:g} V)",
                   lambda p=p: at_point(arch, p))
                  for p in arch.operating_points if p != arch.nominal_point]
    candidates += [(r.label(arch), lambda r=r: _relaxed(arch, r)) for r in relaxations(arch)]
    for label, build in candidates:
        try:
            changed = build()
            rep = run_scenario(scenario, changed, **run_options)
        except TesselError as exc:
            changes.append(ScenarioChange(label, arch.derived.area_mm2,
                                          error=str(exc).splitlines()[0][:100]))
            continue
        stats = next(m for m in rep.models if m.name == worst.name)
        changes.append(ScenarioChange(label, changed.derived.area_mm2, rep.power_mw, rep.misses,
                                      stats.max_ms))
    ranked = sorted(changes, key=lambda c: (bool(c.error), c.misses > base.misses, c.power_mw))
    return ScenarioAdvice(scenario.name, arch.name, base.power_mw, base.misses,
                          arch.derived.area_mm2, worst.name, worst.max_ms, worst.deadline_ms,
                          prof.step_names[longest], prof.steps[longest] / sum(prof.steps),
                          tuple(ranked))


def _relaxed(arch: NpuArch, change: Any) -> NpuArch:
    """``arch`` with one knob relaxed, its static power scaled with its area."""
    new = relax(arch, change)
    scale = new.derived.area_mm2 / arch.derived.area_mm2
    return dataclasses.replace(new, energy=dataclasses.replace(
        new.energy, static_power_mw=new.energy.static_power_mw * scale))
