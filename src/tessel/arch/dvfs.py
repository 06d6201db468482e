"""DVFS policies: which operating point a workload with deadlines runs at, and its average
power there.

* ``RACE`` (race to idle): the fastest point; the NPU finishes its work as early as it can and
  is power-gated while idle (no leakage until the next release).
* ``SLOWEST``: the slowest point at which every deadline is met (the lowest voltage, so the
  least dynamic energy), idle or not as the caller's gating says.

``choose_point`` decides over a feasibility callback (does the workload meet every deadline at
this point?), so a policy is testable without a scheduler: the scenario scheduler passes one
that simulates its timeline at the point. ``average_power_mw`` is the power model of a window
of time in which the NPU is busy for some cycles: dynamic energy at the point
(``tessel.arch.operating``), leakage while busy, and while idle unless power-gated.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tessel.arch.operating import STATIC, scale_breakdown, static_power_mw
from tessel.arch.types import NpuArch, OperatingPoint
from tessel.errors import TesselConfigError


class DvfsPolicy(enum.Enum):
    """How a scenario picks its operating point."""

    RACE = "race"  # the fastest point, power-gated when idle
    SLOWEST = "slowest"  # the slowest point that meets every deadline


@dataclass(frozen=True)
class DvfsChoice:
    """The point a policy chose, whether it meets every deadline, and every point the policy
    asked the feasibility callback about (in the order asked) with its answer."""

    policy: DvfsPolicy
    point: OperatingPoint
    feasible: bool
    tried: tuple[tuple[OperatingPoint, bool], ...]

    @property
    def idle_gated(self) -> bool:
        """Race to idle power-gates the NPU between its jobs."""
        return self.policy is DvfsPolicy.RACE


def choose_point(points: tuple[OperatingPoint, ...], policy: DvfsPolicy,
                 feasible: Callable[[OperatingPoint], bool]) -> DvfsChoice:
    """The point ``policy`` runs at among ``points``. RACE: the fastest (its feasibility is
    still asked, for the report). SLOWEST: the first feasible point from the slowest up (no
    assumption that feasibility grows with the clock); when none is, the fastest, marked
    infeasible."""
    if not points:
        raise TesselConfigError("no operating points to choose from")
    ordered = sorted(points, key=lambda p: p.clock_hz)
    tried: list[tuple[OperatingPoint, bool]] = []
    if policy is DvfsPolicy.RACE:
        ok = bool(feasible(ordered[-1]))
        return DvfsChoice(policy, ordered[-1], ok, ((ordered[-1], ok),))
    for p in ordered:
        ok = bool(feasible(p))
        tried.append((p, ok))
        if ok:
            return DvfsChoice(policy, p, True, tuple(tried))
    return DvfsChoice(policy, ordered[-1], False, tuple(tried))


def average_power_mw(energy_pj: Mapping[str, float], busy_cycles: int, window_s: float,
                     arch: NpuArch, point: OperatingPoint, idle_gated: bool) -> float:
    """Average power (mW) over a window of ``window_s`` seconds in which the NPU runs
    ``busy_cycles`` cycles at ``point``. ``energy_pj``: the dynamic energy of that work at the
    nominal point, by component (``energy_breakdown_pj``; a ``"static"`` entry is ignored:
    leakage is counted here over the window). Leakage is charged while busy, and while idle
    unless ``idle_gated``."""
    if window_s <= 0:
        raise TesselConfigError(f"the window must be positive, got {window_s} s")
    busy_s = busy_cycles / point.clock_hz
    if busy_s > window_s * (1 + 1e-12):
        raise TesselConfigError(f"{busy_cycles} cycles at {point.name} take {busy_s:.6g} s, "
                                f"more than the {window_s:.6g} s window")
    dynamic = {k: v for k, v in energy_pj.items() if k != STATIC}
    dynamic_pj = sum(scale_breakdown(dynamic, arch, point).values())
    leak_s = busy_s if idle_gated else window_s
    return dynamic_pj * 1e-9 / window_s + static_power_mw(arch, point) * leak_s / window_s
