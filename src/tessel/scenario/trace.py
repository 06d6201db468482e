"""A scheduled scenario as a Chrome / Perfetto trace-event JSON file (ui.perfetto.dev,
chrome://tracing): one process (the NPU), one track per model. On each track, one complete
event ("X", category "job") per job from its start to its finish (its release and deadline in
the args), and nested in it one per slice the NPU ran it (category "step", "save" or
"restore"); an instant event ("i") marks each missed deadline. Times are microseconds at the
NPU's clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tessel.fileio import write_atomic
from tessel.scenario.report import ScenarioReport
from tessel.scenario.scheduler import SliceKind

PID = 1


def trace_events(report: ScenarioReport) -> dict[str, Any]:
    """The trace as a JSON-able dict (``{"traceEvents": [...], ...}``)."""
    pm = report.power
    tid = {m.name: k + 1 for k, m in enumerate(report.scenario.models)}
    names = {m: report.profiles[m].step_names for m in report.profiles}

    def us(cycles: int) -> float:
        return round(pm.ms(cycles) * 1e3, 3)

    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                                     "args": {"name": f"Tessel NPU {report.target}: scenario "
                                                      f"{report.scenario.name}"}}]
    for m in report.scenario.models:
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid[m.name],
                       "args": {"name": f"{m.name} ({m.rate_hz:g} Hz)"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid[m.name],
                       "args": {"sort_index": m.priority}})
    for j in report.timeline.jobs:
        events.append({"name": f"{j.task} #{j.frame}", "cat": "job", "ph": "X", "pid": PID,
                       "tid": tid[j.task], "ts": us(j.start),
                       "dur": round(us(j.finish) - us(j.start), 3),
                       "args": {"frame": j.frame, "release_us": us(j.arrival),
                                "ready_us": us(j.release),
                                "deadline_us": us(j.deadline), "response_us": us(j.response),
                                "missed": j.missed, "preemptions": j.preemptions}})
        if j.missed:
            events.append({"name": "deadline missed", "cat": "deadline", "ph": "i", "s": "t",
                           "pid": PID, "tid": tid[j.task], "ts": us(j.deadline)})
    for s in report.timeline.slices:
        label = names[s.task][s.step] if s.kind is SliceKind.STEP else s.kind.value
        events.append({"name": label, "cat": s.kind.value, "ph": "X", "pid": PID,
                       "tid": tid[s.task], "ts": us(s.start),
                       "dur": round(us(s.end) - us(s.start), 3),
                       "args": {"frame": s.frame, "step": s.step, "cycles": s.end - s.start}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"scenario": report.scenario.name, "target": report.target,
                          "clock_hz": pm.clock_hz, "policy": report.policy.value}}


def write_trace(report: ScenarioReport, path: str | Path) -> Path:
    return write_atomic(path, json.dumps(trace_events(report), separators=(",", ":")))
