"""`write_trace`: the simulated schedule as a Chrome / Perfetto trace-event JSON file.

Open it at ui.perfetto.dev or chrome://tracing. Layout (the JSON object format of the
Trace Event Format): one process (the NPU), one thread (track) per engine; on each track one
complete event ("X") per layer slice (``timeline.EngineSlice``: consecutive instructions of
one layer, named after the layer's module path, args IR name / op / mapping / instruction
counts), with nested
"X" events for the bursts in which the engine ran work (named after their opcodes; the gaps
are stalls); and one counter ("C") per off-chip memory with its average bandwidth in GB/s
over short bins. Timestamps and durations are microseconds at the preset's clock,
whole nanoseconds (a clock above 1 GHz loses its sub-nanosecond part).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tessel.analysis.timeline import EngineSlice, Timeline, build_timeline
from tessel.fileio import write_atomic as write_text
from tessel.isa.fields import Engine
from tessel.runtime.compiled import CompiledModel

PID = 1
COUNTER_BINS = 400


def _tid(engine: Engine) -> int:
    return int(engine) + 1


def trace_events(compiled: CompiledModel, timeline: Timeline | None = None) -> dict[str, Any]:
    """The trace as a JSON-able dict (``{"traceEvents": [...], ...}``)."""
    tl = timeline or build_timeline(compiled)
    ns = 1e9 / compiled.arch.clock_hz  # nanoseconds per cycle
    meta = compiled.program.metadata
    layers = {k: info for k, info in enumerate(meta.get("layers", []))}
    events: list[dict[str, Any]] = [_meta("process_name", 0, {
        "name": f"Tessel NPU {compiled.arch.name}: {meta.get('model', '?')}"})]
    for e in Engine:
        events.append(_meta("thread_name", _tid(e), {"name": e.name}))
        events.append(_meta("thread_sort_index", _tid(e), {"sort_index": int(e)}))
    for sl in tl.slices:
        events.extend(_slice_events(sl, layers.get(sl.layer_index, {}), ns))
    events.extend(_counter_events(tl, ns))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"model": str(meta.get("model", "?")), "target": compiled.arch.name,
                      "clock_hz": compiled.arch.clock_hz, "cycles": tl.total_cycles,
                      "host_ops_not_in_trace": list(meta.get("host_ops", []))},
    }


def write_trace(compiled: CompiledModel, path: str | Path,
                timeline: Timeline | None = None) -> Path:
    """Write the trace-event JSON of ``compiled`` to ``path``."""
    return write_text(path, json.dumps(trace_events(compiled, timeline), separators=(",", ":")))


def _meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": PID, "tid": tid, "args": args}


def _slice_events(sl: EngineSlice, info: dict[str, Any], ns: float) -> list[dict[str, Any]]:
    """The layer slice and its bursts (nested inside it on the same track)."""
    work = sum(n for _, n in sl.opcodes)
    args = {"ir_name": str(info.get("name", "")), "op": str(info.get("op", "")),
            "mapping": str(info.get("mapping", "")),
            "loc": str(info.get("loc", "")), "instructions": sl.instructions,
            "work_instructions": work, "opcodes": dict(sl.opcodes),
            "start_cycle": sl.start, "end_cycle": sl.end, "busy_cycles": sl.busy_cycles}
    out = [_complete(sl.layer, "layer", sl.engine, sl.start, sl.end, ns, args)]
    burst_name = "+".join(name for name, _ in sl.opcodes)
    if len(sl.bursts) > 1 or sl.bursts[0] != (sl.start, sl.end):
        out.extend(_complete(burst_name, "burst", sl.engine, s, t, ns, {"cycles": t - s})
                   for s, t in sl.bursts)
    return out


def _us(cycle: int, ns_per_cycle: float) -> float:
    """Cycle -> microseconds, through whole nanoseconds so that a slice that ends where the
    next begins gives equal numbers on both sides (importers store nanoseconds)."""
    return round(cycle * ns_per_cycle) / 1000


def _complete(name: str, cat: str, engine: Engine, start: int, end: int, ns: float,
              args: dict[str, Any]) -> dict[str, Any]:
    ts = _us(start, ns)
    return {"name": name, "cat": cat, "ph": "X", "pid": PID, "tid": _tid(engine), "ts": ts,
            "dur": round(_us(end, ns) - ts, 3), "args": args}


def _counter_events(tl: Timeline, ns: float) -> list[dict[str, Any]]:
    """Average off-chip bandwidth per bin (GB/s), one counter track per memory."""
    if not tl.transfers:
        return []
    edges, per_mem = tl.bandwidth(COUNTER_BINS)
    gbps = tl.compiled.arch.clock_hz / 1e9  # bytes/cycle -> GB/s
    out = []
    for name, bpc in per_mem.items():
        values = [round(float(v) * gbps, 4) for v in bpc] + [0.0]
        for k, value in enumerate(values):
            if k == 0 or value != values[k - 1]:  # a counter holds its value until the next
                out.append({"name": f"{name} GB/s", "cat": "bandwidth", "ph": "C", "pid": PID,
                            "ts": _us(int(edges[k]), ns), "args": {"GB/s": value}})
    return out
