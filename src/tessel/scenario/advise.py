"""Co-design advice for a scenario (`tessel advise --scenario`): which model limits the
schedule, which layers make up its response and what binds them, and what each NPU knob of
`tessel advise` (tessel.analysis.advise: the same 2x relaxations) would gain for the whole
scenario.

The limiting job is the one whose response is the largest share of its deadline (the least
slack relative to it; a missed deadline is a share above 1). Its response window (release to
finish) holds its own steps and those of the jobs that ran before it finished (predecessors of
its chain, more urgent models, save / restore DMAs): the window's cycles are split by model,
and the layers of the models in it are ranked by cycles, each with its binding limit from
`tessel.analysis.advise` on that model (for the SRAM the scenario scheduled it for).

Every knob's gain is measured by running the whole scenario again on the relaxed NPU (its
models profiled and scheduled again, the timeline simulated again), not extrapolated: the
limiting model's slack, the NPU busy share, average power and deadline misses. Leakage is
scaled with the area, as `tessel explore` scales it (the presets give leakage per mm^2). Each
other operating point of the NPU (tessel.arch.operating: the same hardware at a lower clock and
voltage) is run the same way.

    advice = advise_scenario(load_scenario("xr_glasses"), load_target("tnpu-s"))
    print(advice.text()); advice.gains[0].slack_gain_ms
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from typing import Any

from tessel.analysis.advise import advise, json_plain, relax, relaxations
from tessel.arch import NpuArch
from tessel.arch.decl import Limit
from tessel.arch.operating import at_point
from tessel.display import Table, fit_text, fmt_change, fmt_int
from tessel.errors import TesselError
from tessel.progress import track
from tessel.scenario.profile import quantised_graph
from tessel.scenario.report import ScenarioReport
from tessel.scenario.resident import resident_arch
from tessel.scenario.run import run_scenario
from tessel.scenario.scheduler import Job
from tessel.scenario.spec import Scenario
from tessel.schedule import search

TOP_LAYERS = 10  # layers of the limiting window shown


@dataclass(frozen=True)
class LimitingJob:
    model: str
    frame: int
    response_ms: float
    deadline_ms: float  # relative to its release
    slack_ms: float  # the model's least slack over its jobs (negative: a miss)
    window_ms: dict[str, float]  # NPU time in its response window, by model


@dataclass(frozen=True)
class WindowLayer:
    model: str
    layer: str
    op: str
    cycles: int
    bound: str
    binding: Limit
    best_change: str | None  # the 2x relaxation that saves it most (>= 1 %)
    best_gain_pct: float | None


@dataclass(frozen=True)
class ScenarioGain:
    """One 2x relaxation, the whole scenario run again on it; deltas are relaxed - now."""

    change: str
    limit: Limit | None  # None: an operating point (the same hardware, clock and voltage)
    target: str
    slack_ms: float  # of the baseline's limiting model
    slack_gain_ms: float
    limiting: str  # the limiting model on the relaxed NPU
    misses: int
    busy_pct: float
    busy_delta_pct: float  # percentage points
    power_mw: float
    power_change_pct: float
    area_mm2_delta: float


@dataclass(frozen=True)
class ScenarioAdvice:
    scenario: str
    target: str
    busy_pct: float
    power_mw: float
    misses: int
    area_mm2: float
    limiting: LimitingJob
    layers: tuple[WindowLayer, ...]
    gains: tuple[ScenarioGain, ...]  # by slack gain, then power saved
    skipped: tuple[tuple[str, str], ...]  # (change, why)

    def summary(self) -> str:
        lim = self.limiting
        parts = ", ".join(f"{m} {ms:.3f} ms" for m, ms in lim.window_ms.items())
        return (f"advice for scenario {self.scenario} on {self.target}: busy "
                f"{self.busy_pct:.2f} %, average power {self.power_mw:.3f} mW, deadline "
                f"misses {self.misses}\nlimited by {lim.model} (frame {lim.frame}: response "
                f"{lim.response_ms:.3f} ms of its {lim.deadline_ms:.2f} ms deadline; least "
                f"slack {lim.slack_ms:.3f} ms); its response window: {parts}")

    def gain_table(self) -> Table:
        rows = [(str(i + 1), g.change, "-" if g.limit is None else g.limit.value,
                 f"{g.slack_ms:.3f}",
                 f"{g.slack_gain_ms:+.3f}", g.limiting, str(g.misses), f"{g.busy_pct:.2f}",
                 f"{g.busy_delta_pct:+.2f}", f"{g.power_mw:.3f}", fmt_change(g.power_change_pct),
                 f"{g.area_mm2_delta:+.4f}") for i, g in enumerate(self.gains)]
        return Table(("rank", "change", "limit", f"{self.limiting.model} slack ms", "slack",
                      "limiting", "misses", "busy %", "busy pp", "mW", "power", "area mm2"),
                     rows, numeric=(True, False, False) + (True,) * 2 + (False,) + (True,) * 6,
                     title="2x relaxations and operating points, the scenario run again on "
                     "each (changes vs now)")

    def layer_table(self) -> Table:
        rows = [(x.model, x.layer, x.op, fmt_int(x.cycles), x.bound, x.binding.value,
                 "-" if x.best_change is None else
                 f"{x.best_change} ({fmt_change(-(x.best_gain_pct or 0.0), 1)})")
                for x in self.layers]
        return Table(("model", "layer", "op", "cycles", "bound", "binding",
                      "best change (its cycles)"), rows,
                     numeric=(False, False, False, True, False, False, False),
                     title=f"{len(rows)} slowest layers in {self.limiting.model}'s response "
                     "window")

    def text(self, width: int | None = None) -> str:
        return "\n".join([fit_text(self.summary(), width), "", self.layer_table().text(width),
                          "", self.gain_table().text(width),
                          *(fit_text(f"skipped {c}: {why}", width) for c, why in self.skipped)])

    def to_dict(self) -> dict[str, Any]:
        return json_plain(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)


def limiting_job(report: ScenarioReport) -> tuple[Job, LimitingJob]:
    """The job of largest response / relative deadline, and its response window."""
    tl, pm = report.timeline, report.power
    job = max(tl.jobs, key=lambda j: (j.response / (j.deadline - j.arrival), -j.arrival))
    window: dict[str, int] = {}
    for s in tl.slices:
        lo, hi = max(s.start, job.arrival), min(s.end, job.finish)
        if hi > lo:
            window[s.task] = window.get(s.task, 0) + hi - lo
    slack = min(j.deadline - j.finish for j in tl.task_jobs(job.task))
    order = [m.name for m in report.scenario.models]
    return job, LimitingJob(job.task, job.frame, pm.ms(job.response),
                            pm.ms(job.deadline - job.arrival), pm.ms(slack),
                            {n: pm.ms(window[n]) for n in order if n in window})


def advise_scenario(scenario: Scenario, arch: NpuArch, **run: Any) -> ScenarioAdvice:
    """Run ``scenario`` on ``arch`` and on each 2x relaxation of it (``run``: the keyword
    arguments of `run_scenario`, the same for every run); see the module docstring."""
    if search.active() is None:
        with search.use(search.SearchCache()):
            return advise_scenario(scenario, arch, **run)
    base = run_scenario(scenario, arch, **run)
    _, lim = limiting_job(base)
    layers = _window_layers(scenario, arch, base, lim)
    gains, skipped = [], []
    for change in track(relaxations(arch), "advise: the scenario on each 2x relaxation"):
        label = change.label(arch)
        try:
            relaxed = _with_scaled_leakage(relax(arch, change), arch)
            gains.append(_gain(base, lim, label, change.knob.limit, relaxed,
                               run_scenario(scenario, relaxed, **run), arch))
        except TesselError as exc:
            skipped.append((label, str(exc)))
    for point in arch.operating_points:
        if point == arch.nominal_point:
            continue
        label = (f"operating point {point.name} ({point.clock_hz / 1e6:g} MHz, "
                 f"{point.voltage_v:g} V)")
        try:
            at = at_point(arch, point)
            gains.append(_gain(base, lim, label, None, at, run_scenario(scenario, at, **run),
                               arch))
        except TesselError as exc:
            skipped.append((label, str(exc)))
    gains.sort(key=lambda g: (-round(g.slack_gain_ms, 6), g.power_mw, g.area_mm2_delta))
    return ScenarioAdvice(scenario.name, arch.name, 100 * base.busy, base.power_mw, base.misses,
                          arch.derived.area_mm2, lim, tuple(layers), tuple(gains),
                          tuple(skipped))


def _with_scaled_leakage(relaxed: NpuArch, arch: NpuArch) -> NpuArch:
    scale = relaxed.derived.area_mm2 / arch.derived.area_mm2
    energy = dataclasses.replace(relaxed.energy,
                                 static_power_mw=arch.energy.static_power_mw * scale)
    return dataclasses.replace(relaxed, energy=energy)


def _gain(base: ScenarioReport, lim: LimitingJob, label: str, limit: Limit | None,
          relaxed: NpuArch,
          report: ScenarioReport, arch: NpuArch) -> ScenarioGain:
    jobs = report.timeline.task_jobs(lim.model)
    slack = report.power.ms(min(j.deadline - j.finish for j in jobs))
    _, now = limiting_job(report)
    power = report.power_mw
    return ScenarioGain(label, limit, relaxed.name, slack, slack - lim.slack_ms, now.model,
                        report.misses, 100 * report.busy, 100 * (report.busy - base.busy),
                        power, 100 * (power - base.power_mw) / base.power_mw,
                        relaxed.derived.area_mm2 - arch.derived.area_mm2)


def _window_layers(scenario: Scenario, arch: NpuArch, base: ScenarioReport,
                   lim: LimitingJob) -> list[WindowLayer]:
    """The slowest layers of the models in the limiting job's window, with their binding
    limit on the NPU the scenario scheduled them for (the scratchpad its reserve leaves, the
    reserve as a resident model's weights memory)."""
    reserve = base.constants.reserve
    scheduled = arch if reserve == 0 else arch.with_param(
        "onchip.sram_bytes", arch.onchip.sram_bytes - reserve)
    out = []
    for name in lim.window_ms:
        m = scenario.model(name)
        target = (resident_arch(scheduled, reserve) if name in base.constants.resident
                  else scheduled)
        a = advise(quantised_graph(m), target, name=m.model)
        for x in a.layers:
            gain = None if x.binding_change is None else x.gains_pct[x.binding_change]
            out.append(WindowLayer(name, x.layer or x.name, x.op, x.cycles, x.bound, x.binding,
                                   x.binding_change, gain))
    out.sort(key=lambda x: (-x.cycles, x.model, x.layer))
    return out[:TOP_LAYERS]
