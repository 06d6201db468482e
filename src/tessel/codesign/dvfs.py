"""DVFS for a scenario: run it at the operating point a policy picks (tessel.arch.dvfs).

* race to idle: the fastest point, the NPU power-gated while idle (idle gating 1);
* slowest: the slowest point at which the scenario misses no deadline, at the caller's idle
  gating.

A point is feasible when the scenario's timeline, simulated at that point (the NPU running at
its clock, with its energy figures: ``tessel.arch.operating.at_point``; the cycle counts of
every model are the nominal ones), misses no deadline. Every point the policy asks about is
run in full, and its average power and misses are kept for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessel.arch import NpuArch
from tessel.arch.dvfs import DvfsChoice, DvfsPolicy, choose_point
from tessel.arch.operating import at_point
from tessel.arch.types import OperatingPoint

RACE_IDLE_GATING = 1.0  # race to idle power-gates the whole idle time


@dataclass(frozen=True)
class PointRun:
    """A scenario run at one operating point: its average power and deadline misses."""

    point: OperatingPoint
    power_mw: float
    misses: int


@dataclass(frozen=True)
class DvfsRun:
    """The policy's choice, the scenario's report at the chosen point, and every point run."""

    choice: DvfsChoice
    report: Any  # tessel.scenario.report.ScenarioReport at the chosen point
    runs: tuple[PointRun, ...]

    def summary(self) -> str:
        c, p = self.choice, self.choice.point
        tried = ", ".join(f"{r.point.name} {r.power_mw:.3f} mW, {r.misses} misses"
                          for r in self.runs)
        met = "meets every deadline" if c.feasible else "misses deadlines at every point"
        return (f"DVFS {c.policy.value}: operating point {p.name} ({p.clock_hz / 1e6:g} MHz, "
                f"{p.voltage_v:g} V), {met}; idle power gating "
                f"{100 * self.report.power.idle_gating:g} %\npoints run: {tried}")

    def as_dict(self) -> dict[str, Any]:
        p = self.choice.point
        return {"policy": self.choice.policy.value, "feasible": self.choice.feasible,
                "point": {"name": p.name, "clock_hz": p.clock_hz, "voltage_v": p.voltage_v},
                "runs": [{"point": r.point.name, "clock_hz": r.point.clock_hz,
                          "voltage_v": r.point.voltage_v, "average_power_mw": r.power_mw,
                          "deadline_misses": r.misses} for r in self.runs]}


def run_dvfs(scenario: Any, arch: NpuArch, dvfs: DvfsPolicy, *, idle_gating: float = 0.0,
             **run_options: Any) -> DvfsRun:
    """Run ``scenario`` on ``arch`` at the point the ``dvfs`` policy picks among
    ``arch.operating_points``; ``run_options`` go to ``tessel.scenario.run.run_scenario``
    (the scheduling ``policy`` among them; ``idle_gating`` applies to the slowest policy: race
    to idle gates all idle time)."""
    from tessel.scenario.run import run_scenario

    gating = RACE_IDLE_GATING if dvfs is DvfsPolicy.RACE else idle_gating
    reports: dict[str, Any] = {}
    runs: list[PointRun] = []

    def feasible(point: OperatingPoint) -> bool:
        report = run_scenario(scenario, at_point(arch, point), idle_gating=gating,
                              **run_options)
        reports[point.name] = report
        runs.append(PointRun(point, report.power_mw, report.misses))
        return report.misses == 0

    choice = choose_point(arch.operating_points, dvfs, feasible)
    # (every policy asks about the point it picks, so that point has been run)
    return DvfsRun(choice, reports[choice.point.name], tuple(runs))
