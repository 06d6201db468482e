"""`write_scenario_html`: one self-contained HTML page of a scheduled scenario: the summary,
the DVFS decision (when a policy chose the operating point: the point, and every point the
policy ran with its power and misses), the per-model latency table, the NPU timeline (one
lane per model over the whole window, and the first frames zoomed in, deadline misses
marked), the average power breakdown (a bar per component) and the per-model table. Plots are
PNGs embedded as data URIs (the style of the profile report, tessel.analysis.html); the page
loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import dataclasses
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tessel.analysis import plots
from tessel.analysis.html import STYLE
from tessel.display import Table
from tessel.fileio import write_atomic
from tessel.scenario.report import ScenarioReport
from tessel.scenario.scheduler import SliceKind

_SWITCH_COLOUR = "black"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _img(png: bytes, alt: str, ident: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="{_e(ident)}" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def timeline_png(report: ScenarioReport, until: int | None = None) -> bytes:
    """One lane per model (most urgent on top): its slices on the NPU, save / restore DMAs in
    black, releases as ticks, missed deadlines as red crosses; time in ms."""
    pm = report.power
    models = sorted(report.scenario.models, key=lambda m: m.priority)
    lane = {m.name: len(models) - 1 - k for k, m in enumerate(models)}
    stop = report.span if until is None else until
    fig = plots.figure(11.0, 0.55 * len(models) + 1.4)
    ax = fig.add_subplot(1, 1, 1)
    colours = {m.name: f"C{k % 10}" for k, m in enumerate(report.scenario.models)}
    for s in report.timeline.slices:
        if s.start >= stop:
            continue
        colour = colours[s.task] if s.kind is SliceKind.STEP else _SWITCH_COLOUR
        width = max(pm.ms(s.end - s.start), pm.ms(stop) / 600)  # visible at any zoom
        ax.broken_barh([(pm.ms(s.start), width)], (lane[s.task] - 0.35, 0.7),
                       facecolors=colour)
    for j in report.timeline.jobs:
        if j.arrival < stop:
            ax.plot([pm.ms(j.arrival)] * 2, [lane[j.task] - 0.45, lane[j.task] + 0.45],
                    color="0.6", lw=0.6)
        if j.missed and j.deadline < stop:
            ax.plot(pm.ms(j.deadline), lane[j.task], "x", color="red", ms=8, mew=2)
    ax.set_yticks(range(len(models)), [f"{m.name} ({m.rate_hz:g} Hz)"
                                       for m in reversed(models)])
    ax.set_xlim(0, pm.ms(stop))
    ax.set_ylim(-0.6, len(models) - 0.4)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", color="0.9")
    fig.tight_layout()
    return plots.png_bytes(fig)


def power_png(report: ScenarioReport) -> bytes:
    """Average power (mW) by component and by model (its frames' dynamic energy and its
    save / restore DMAs; leakage is the NPU's, shown by component only), largest first."""
    pm, span = report.power, report.span
    panels = [("by component", {k: pm.power_mw(v, span) for k, v in report.energy_pj.items()}),
              ("by model (dynamic)", {m.name: m.power_mw for m in report.models})]
    rows = max(len(v) for _, v in panels)
    fig = plots.figure(11.0, 0.3 * rows + 1.4)
    for k, (title, values) in enumerate(panels):
        items = sorted(((n, v) for n, v in values.items() if v > 0), key=lambda kv: kv[1])
        ax = fig.add_subplot(1, 2, k + 1)
        ax.barh([n for n, _ in items], [v for _, v in items], color=f"C{k + 1}")
        for y, (_, v) in enumerate(items):
            ax.text(v, y, f" {v:.3g}", va="center", fontsize=8)
        ax.set_xlim(0, 1.2 * max([v for _, v in items], default=1.0))
        ax.set_xlabel("average power (mW)")
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"average power {report.power_mw:.3f} mW", fontsize=11)
    fig.tight_layout()
    return plots.png_bytes(fig)


def _zoom(report: ScenarioReport) -> int:
    """The end of the first frames: the latest finish of every model's first job, at most two
    of the shortest periods (an overloaded NPU finishes some first job only at the end)."""
    first = [j.finish for j in report.timeline.jobs if j.frame == 0]
    shortest = min(m.period_s for m in report.scenario.models)
    cap = 2 * report.power.cycles(shortest)
    return max(1, int(min(max(first, default=report.span) * 1.05, cap)))


def dvfs_section(dvfs: Mapping[str, Any]) -> list[str]:
    """The DVFS decision (`DvfsRun.as_dict()`, tessel.codesign.dvfs): the operating point the
    policy chose for the scenario's jobs, and the points it ran."""
    p = dvfs["point"]
    met = "meets every deadline" if dvfs["feasible"] else "misses deadlines at every point"
    runs = Table(("operating point", "clock (MHz)", "voltage (V)", "average power (mW)",
                  "deadline misses", "chosen"),
                 [(r["point"], f"{r['clock_hz'] / 1e6:g}", f"{r['voltage_v']:g}",
                   f"{r['average_power_mw']:.3f}", str(r["deadline_misses"]),
                   "yes" if r["point"] == p["name"] else "")
                  for r in dvfs["runs"]],
                 numeric=(False, True, True, True, True, False), html_id="scenario-dvfs-runs")
    return ["<h2>DVFS</h2>",
            f'<p id="scenario-dvfs">Policy {_e(dvfs["policy"])}: every job runs at operating '
            f'point <b>{_e(p["name"])}</b> ({p["clock_hz"] / 1e6:g} MHz, {p["voltage_v"]:g} V); '
            f"it {met}.</p>",
            "<p>Points the policy ran the scenario at:</p>",
            f'<div class="wide">{runs.html()}</div>']


def scenario_html(report: ScenarioReport, dvfs: Mapping[str, Any] | None = None) -> str:
    """The page; `dvfs`: the DVFS decision (`DvfsRun.as_dict()`) when a policy chose the
    operating point."""
    title = f"Tessel scenario {report.scenario.name} on {report.target}"
    summary = "".join(f"<p>{_e(line)}</p>" for line in report.summary().split("\n"))
    models = dataclasses.replace(report.model_table(), html_id="scenario-models")
    power = dataclasses.replace(report.power_table(), html_id="scenario-power-table")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>", f'<p class="note">{_e(report.scenario.description)}</p>',
        "<h2>Summary</h2>", summary,
        *(dvfs_section(dvfs) if dvfs is not None else []),
        "<h2>Models</h2>", f'<div class="wide">{models.html()}</div>',
        "<h2>Timeline</h2>",
        '<p class="note">One lane per model, most urgent on top; grey ticks: releases; '
        "black: save / restore of a preempted job; red crosses: missed deadlines.</p>",
        _img(timeline_png(report), "the NPU timeline over the window", "scenario-timeline"),
        "<p>The first frames:</p>",
        _img(timeline_png(report, _zoom(report)), "the first frames", "scenario-zoom"),
        "<h2>Power</h2>", _img(power_png(report), "average power by component",
                               "scenario-power"),
        f'<div class="wide">{power.html()}</div>',
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_scenario_html(report: ScenarioReport, path: str | Path,
                        dvfs: Mapping[str, Any] | None = None) -> Path:
    return write_atomic(path, scenario_html(report, dvfs))
