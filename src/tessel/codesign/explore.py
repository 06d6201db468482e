"""`tessel explore --scenario FILE --space space.toml`: the NPU design (parameters, and the
operating point when the space lists `operating_point`) of lowest average power that runs a
scenario with no deadline miss, within the space's `max_area_mm2`.

Every design point of the space is built as `tessel explore` builds it
(``explore_space.build_arch``: static power scaled with the area, figures at the point) and
the whole scenario is scheduled on it (``tessel.scenario.run.run_scenario``: the models'
analytical profiles, the timeline over the hyperperiod). The best design is then confirmed:

1. its preset file is written and read back, and the scenario run again on it from scratch
   (same misses, same power);
2. every model is compiled for it and its first frame run on the simulator, bit for bit
   against the golden model (``tessel.scenario.functional``);
3. the timeline is simulated again with every model's steps scaled to its simulated cycles:
   it must still miss no deadline (its power is reported too).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessel.analysis.explore_output import arch_to_toml
from tessel.analysis.explore_space import Space, arch_name, build_arch, check_against
from tessel.arch import NpuArch, arch_from_toml
from tessel.display import Table
from tessel.errors import TesselConfigError, TesselError


@dataclass(frozen=True)
class DesignRun:
    """One design point run on the scenario (``error``: why it could not be run)."""

    name: str
    values: dict[str, Any]
    area_mm2: float
    power_mw: float = math.inf
    misses: int = -1
    error: str = ""

    @property
    def feasible(self) -> bool:
        return not self.error and self.misses == 0


@dataclass(frozen=True)
class Confirmation:
    """The best design checked again (module docstring): the re-run's misses and power, the
    functional checks, and the timeline with simulated cycles."""

    preset: Path
    rerun_misses: int
    rerun_power_mw: float
    bit_exact: bool
    cycles: dict[str, tuple[int, int]]  # model -> (simulated, estimated) cycles of a frame
    simulated_misses: int
    simulated_power_mw: float

    @property
    def confirmed(self) -> bool:
        return self.rerun_misses == 0 and self.bit_exact and self.simulated_misses == 0


@dataclass(frozen=True)
class ScenarioExplore:
    scenario: str
    base: str
    base_power_mw: float
    base_misses: int
    base_area_mm2: float
    runs: tuple[DesignRun, ...]
    best: DesignRun | None
    confirmation: Confirmation | None

    def table(self, top: int = 15) -> Table:
        ranked = sorted(self.runs, key=lambda r: (not r.feasible, r.power_mw))[:top]
        return Table(("design", "area mm2", "power mW", "misses", "note"),
                     [(r.name, f"{r.area_mm2:.4f}", "" if r.error else f"{r.power_mw:.3f}",
                       "" if r.error else str(r.misses), r.error) for r in ranked],
                     numeric=(False, True, True, True, False),
                     title=f"{min(top, len(ranked))} best of {len(self.runs)} designs")

    def summary(self) -> str:
        lines = [f"scenario {self.scenario}: {len(self.runs)} designs from {self.base}; "
                 f"{self.base} at its nominal point: {self.base_power_mw:.3f} mW, "
                 f"{self.base_misses} misses, {self.base_area_mm2:.4f} mm2"]
        if self.best is None:
            lines.append("no design meets every deadline within the area limit")
            return "\n".join(lines)
        b, c = self.best, self.confirmation
        saving = 100 * (1 - b.power_mw / self.base_power_mw)
        lines.append(f"best: {b.name}: {b.power_mw:.3f} mW ({saving:.1f} % below {self.base}), "
                     f"{b.area_mm2:.4f} mm2, no deadline miss")
        if c is not None:
            verdict = "confirmed" if c.confirmed else "NOT confirmed"
            cyc = ", ".join(f"{n} {s:,}/{e:,}" for n, (s, e) in c.cycles.items())
            lines.append(f"{verdict}: re-run from {c.preset}: {c.rerun_misses} misses, "
                         f"{c.rerun_power_mw:.3f} mW; first frames on the simulator "
                         f"{'bit-exact' if c.bit_exact else 'NOT bit-exact'} (cycles "
                         f"simulated/estimated: {cyc}); timeline with simulated cycles: "
                         f"{c.simulated_misses} misses, {c.simulated_power_mw:.3f} mW")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "base": self.base,
                "base_power_mw": self.base_power_mw, "base_misses": self.base_misses,
                "base_area_mm2": self.base_area_mm2,
                "designs": [dataclasses.asdict(r) | {"feasible": r.feasible}
                            for r in self.runs],
                "best": None if self.best is None else self.best.name,
                "confirmation": None if self.confirmation is None else
                dataclasses.asdict(self.confirmation) | {
                    "preset": str(self.confirmation.preset),
                    "confirmed": self.confirmation.confirmed}}


def explore_scenario(scenario: Any, space: Space, base: NpuArch, out: Path, *,
                     confirm: bool = True, progress: Callable[[str], None] | None = None,
                     **run_options: Any) -> ScenarioExplore:
    """Run ``scenario`` on every design point of ``space`` (from ``base``), pick the one of
    lowest average power with no miss and confirm it (module docstring); ``run_options`` go to
    ``run_scenario`` (idle gating, scheduling policy, resident constants, window)."""
    from tessel.scenario.run import run_scenario

    say = progress or (lambda msg: None)
    check_against(space, base)
    if space.size > 500:
        raise TesselConfigError(f"the space has {space.size} designs; a scenario search runs "
                                "them all: give it at most 500")
    base_report = run_scenario(scenario, base, **run_options)
    limit = space.constraints.max_area_mm2
    runs = []
    archs: dict[str, NpuArch] = {}
    for i, point in enumerate(space.points()):
        name = arch_name(base, point)
        arch = build_arch(base, point)
        area = arch.derived.area_mm2
        if limit is not None and area > limit:
            runs.append(DesignRun(name, point, area, error=f"area above {limit:g} mm2"))
            continue
        say(f"[{i + 1}/{space.size}] {name}")
        try:
            rep = run_scenario(scenario, arch, **run_options)
        except TesselError as exc:
            runs.append(DesignRun(name, point, area, error=str(exc).splitlines()[0][:100]))
            continue
        archs[name] = arch
        runs.append(DesignRun(name, point, area, rep.power_mw, rep.misses))
    feasible = [r for r in runs if r.feasible]
    best = min(feasible, key=lambda r: r.power_mw) if feasible else None
    confirmation = None
    if best is not None and confirm:
        confirmation = _confirm(scenario, archs[best.name], out, say, run_options)
    return ScenarioExplore(scenario.name, base.name, base_report.power_mw, base_report.misses,
                           base.derived.area_mm2, tuple(runs), best, confirmation)


def _confirm(scenario: Any, arch: NpuArch, out: Path, say: Callable[[str], None],
             run_options: dict[str, Any]) -> Confirmation:
    from tessel.scenario.functional import check_first_frames
    from tessel.scenario.run import run_scenario, tasks_of, window_cycles
    from tessel.scenario.scheduler import simulate

    out.mkdir(parents=True, exist_ok=True)
    preset = out / f"{arch.name}.toml"
    preset.write_text(arch_to_toml(arch), encoding="utf-8")
    again = arch_from_toml(preset)
    say(f"confirming {arch.name}: the scenario again from {preset}")
    rerun = run_scenario(scenario, again, **run_options)
    say(f"confirming {arch.name}: every model compiled and its first frame simulated")
    checks = check_first_frames(scenario, again)
    cycles = {c.name: (c.simulated_cycles, c.estimated_cycles) for c in checks}
    profiles = {n: dataclasses.replace(p, steps=tuple(
        math.ceil(s * cycles[n][0] / cycles[n][1]) for s in p.steps))
        for n, p in rerun.profiles.items()}
    window = window_cycles(scenario, run_options.get("window_s"), rerun.power)
    timeline = simulate(tasks_of(scenario, profiles, rerun.switches, rerun.power), window,
                        rerun.policy, preemptive=rerun.preemptive,
                        seed=run_options.get("seed", 0))
    simulated = dataclasses.replace(rerun, profiles=profiles, timeline=timeline)
    return Confirmation(preset, rerun.misses, rerun.power_mw, all(c.bit_exact for c in checks),
                        cycles, simulated.misses, simulated.power_mw)
