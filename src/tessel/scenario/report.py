"""The figures of a scheduled scenario: per model latency (p50 / p99 / max, from each frame's
nominal release), deadline misses, preemptions, energy per frame; for the NPU its busy share,
the energy over the timeline and the average power, broken down by model and by component
(dynamic energy of each model's frames, the save / restore DMAs of preemptions, leakage while
busy and while idle with the idle power gating applied).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from tessel.display import Table, plural
from tessel.scenario.constants import NO_RESIDENCY, ConstantsPlan
from tessel.scenario.memory import MemoryMap
from tessel.scenario.power import PowerModel
from tessel.scenario.profile import ModelProfile
from tessel.scenario.scheduler import Policy, SliceKind, Timeline
from tessel.scenario.spec import Scenario
from tessel.scenario.switch import SwitchCosts

STATIC_BUSY, STATIC_IDLE, SWITCH = "static (busy)", "static (idle)", "save/restore"


@dataclass(frozen=True)
class ModelStats:
    name: str
    model: str
    rate_hz: float
    deadline_ms: float
    priority: int
    cycles: int  # one frame's NPU cycles
    jobs: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    misses: int
    preemptions: int
    energy_uj: float  # per frame: its dynamic energy plus its save / restore DMAs
    power_mw: float  # its frames' (and switches') energy over the timeline


@dataclass(frozen=True)
class ScenarioReport:
    scenario: Scenario
    target: str
    policy: Policy
    power: PowerModel
    profiles: dict[str, ModelProfile]
    switches: dict[str, SwitchCosts]
    timeline: Timeline
    preemptive: bool = True  # at step boundaries (False: a started job runs to its end)
    constants: ConstantsPlan = NO_RESIDENCY
    memory: MemoryMap | None = None  # where the scenario's data lives (tessel.scenario.memory)
    # with an automatic constants plan: (reserve, resident models, mW, misses) of each tried
    tried: tuple[tuple[int, tuple[str, ...], float, int], ...] = ()

    def with_tried(self, tried: tuple) -> ScenarioReport:
        return dataclasses.replace(self, tried=tried)

    @property
    def span(self) -> int:
        """Cycles the figures are taken over: the window, or longer if jobs ran past it."""
        return self.timeline.end

    @cached_property
    def switch_pj(self) -> dict[str, float]:
        out = dict.fromkeys(self.profiles, 0.0)
        for s in self.timeline.slices:
            sw = self.switches[s.task]
            if s.kind is SliceKind.SAVE:
                out[s.task] += self.power.dynamic_pj(sw.save[s.step].energy_pj)
            elif s.kind is SliceKind.RESTORE:
                out[s.task] += self.power.dynamic_pj(sw.restore[s.step].energy_pj)
        return out

    @cached_property
    def models(self) -> tuple[ModelStats, ...]:
        out = []
        pm = self.power
        for m in self.scenario.models:
            jobs = self.timeline.task_jobs(m.name)
            resp = np.array([pm.ms(j.response) for j in jobs]) if jobs else np.zeros(1)
            dyn = pm.dynamic_pj(self.profiles[m.name].energy_pj) * len(jobs)
            energy = dyn + self.switch_pj[m.name]
            out.append(ModelStats(
                m.name, m.model, m.rate_hz, 1e3 * m.deadline_s, m.priority,
                self.profiles[m.name].cycles, len(jobs), float(np.percentile(resp, 50)),
                float(np.percentile(resp, 99)), float(resp.max()),
                sum(j.missed for j in jobs), sum(j.preemptions for j in jobs),
                energy / len(jobs) / 1e6 if jobs else 0.0, pm.power_mw(energy, self.span)))
        return tuple(out)

    @cached_property
    def shared_arena_bytes(self) -> int:
        """The activation arena the models need together: at any time, the arenas of the jobs
        started and not finished (one unless a job was preempted), at their largest."""
        events = sorted([(j.start, 1, j.task) for j in self.timeline.jobs]
                        + [(j.finish, 0, j.task) for j in self.timeline.jobs])
        live, best = 0, 0
        for _, starts, task in events:
            live += self.profiles[task].arena_bytes * (1 if starts else -1)
            best = max(best, live)
        return best

    @property
    def misses(self) -> int:
        return sum(m.misses for m in self.models)

    @property
    def busy(self) -> float:
        """The share of the span the NPU runs (steps and save / restore DMAs)."""
        return self.timeline.busy() / self.span

    @cached_property
    def energy_pj(self) -> dict[str, float]:
        """Energy over the span by component (the models' dynamic components added up)."""
        out: dict[str, float] = {}
        for m in self.scenario.models:
            n = len(self.timeline.task_jobs(m.name))
            for k, v in self.profiles[m.name].dynamic_pj.items():
                out[k] = out.get(k, 0.0) + self.power.dynamic_pj(v) * n
        out[SWITCH] = sum(self.switch_pj.values())
        busy = self.timeline.busy()
        out[STATIC_BUSY] = self.power.static_pj(busy, 0)
        out[STATIC_IDLE] = self.power.static_pj(0, self.span - busy)
        return out

    @property
    def power_mw(self) -> float:
        return self.power.power_mw(sum(self.energy_pj.values()), self.span)

    def summary(self) -> str:
        pm = self.power
        policy = "fixed priority" if self.policy is Policy.FIXED else "earliest deadline first"
        preempt = "preemption at step boundaries" if self.preemptive else "no preemption"
        return (f"scenario {self.scenario.name} on {self.target} ({policy}, {preempt}): "
                f"{plural(len(self.timeline.jobs), 'job')} over {pm.ms(self.span):.2f} ms "
                f"(window {pm.ms(self.timeline.window):.2f} ms)\n"
                f"NPU busy {100 * self.busy:.2f} %; deadline misses {self.misses}; average "
                f"power {self.power_mw:.3f} mW (idle power gating "
                f"{100 * pm.idle_gating:.0f} %)\n{self.memory_line()}")

    def memory_line(self) -> str:
        c = self.constants
        on_chip = (f"constants on chip across frames: {', '.join(c.resident)} ({c.resident_bytes:,}"
                   f" of {c.reserve:,} bytes reserved)" if c.resident else
                   "constants read from memory every frame")
        separate = sum(p.arena_bytes for p in self.profiles.values())
        host = [f"{n} {len(p.host_ops)}" for n, p in self.profiles.items() if p.host_ops]
        mem = "" if self.memory is None else f"\nmemory: {self.memory.text()}"
        return (f"{on_chip}; shared activation arena {self.shared_arena_bytes:,} bytes "
                f"({separate:,} if every model had its own)" + mem + (
                    f"\nhost ops (run on the CPU, not on this timeline): {', '.join(host)}"
                    if host else ""))

    def model_table(self) -> Table:
        rows = [(m.name, m.model, f"{m.rate_hz:g}", f"{m.deadline_ms:.2f}", str(m.priority),
                 str(m.jobs), f"{self.power.ms(m.cycles):.3f}", f"{m.p50_ms:.3f}",
                 f"{m.p99_ms:.3f}", f"{m.max_ms:.3f}", str(m.misses), str(m.preemptions),
                 f"{m.energy_uj:.2f}", f"{m.power_mw:.3f}") for m in self.models]
        return Table(("model", "zoo / file", "rate Hz", "deadline ms", "prio", "jobs",
                      "alone ms", "p50 ms", "p99 ms", "max ms", "misses", "preempted",
                      "uJ/frame", "mW"), rows, numeric=(False, False) + (True,) * 12,
                     title="latency from each frame's release", secondary=(1,))

    def power_table(self) -> Table:
        total = sum(self.energy_pj.values())
        rows = [(k, f"{self.power.power_mw(v, self.span):.3f}",
                 f"{100 * v / total if total else 0.0:.1f}")
                for k, v in sorted(self.energy_pj.items(), key=lambda kv: -kv[1]) if v > 0]
        return Table(("component", "mW", "share %"), rows, numeric=(False, True, True),
                     title=f"average power {self.power_mw:.3f} mW")

    def text(self, width: int | None = None) -> str:
        return "\n".join([self.summary(), self.model_table().text(width),
                          self.power_table().text(width)])

    def as_dict(self) -> dict[str, Any]:
        pm = self.power
        return {
            "scenario": self.scenario.name, "target": self.target,
            "policy": self.policy.value, "preemptive": self.preemptive,
            "clock_hz": pm.clock_hz,
            "idle_gating": pm.idle_gating, "window_ms": pm.ms(self.timeline.window),
            "span_ms": pm.ms(self.span), "busy": self.busy, "deadline_misses": self.misses,
            "average_power_mw": self.power_mw,
            "resident_constants": {"reserve_bytes": self.constants.reserve,
                                   "models": list(self.constants.resident),
                                   "bytes": self.constants.resident_bytes},
            "constants_plans_tried": [{"reserve_bytes": r, "models": list(m), "power_mw": p,
                                       "deadline_misses": k} for r, m, p, k in self.tried],
            "shared_arena_bytes": self.shared_arena_bytes,
            "memory": None if self.memory is None else [
                {"what": r.what, "memory": r.memory, "address": r.address, "bytes": r.nbytes}
                for r in self.memory.regions],
            "power_mw": {k: pm.power_mw(v, self.span) for k, v in self.energy_pj.items()},
            "models": [m.__dict__ for m in self.models],
            "jobs": [{"model": j.task, "frame": j.frame, "release_ms": pm.ms(j.arrival),
                      "ready_ms": pm.ms(j.release), "start_ms": pm.ms(j.start),
                      "finish_ms": pm.ms(j.finish), "deadline_ms": pm.ms(j.deadline),
                      "missed": j.missed, "preemptions": j.preemptions}
                     for j in self.timeline.jobs],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, sort_keys=True)
