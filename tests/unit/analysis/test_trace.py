"""The Perfetto / Chrome trace: valid trace-event JSON (object format), one track per
engine, slices named after layers that never overlap on a track, bursts nested in their
slice, instruction counts and busy cycles that add up to the schedule, and a bandwidth
counter whose integral is the profile's off-chip traffic."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from analysis_nets import LAYERS, build

from tessel.analysis.timeline import CONTROL, PROGRAM_LAYER, build_timeline
from tessel.analysis.trace import trace_events, write_trace
from tessel.errors import TesselConfigError
from tessel.isa.fields import Engine
from tessel.sim.prepare import prepared
from tessel.sim.timing import instr_times

EPS = 1e-9


@pytest.fixture(scope="module")
def trace(compiled, tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    assert write_trace(compiled, path) == path
    return json.loads(path.read_text())


def test_follows_the_trace_event_format(trace):
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] in ("ms", "ns")
    for ev in trace["traceEvents"]:
        assert isinstance(ev["name"], str) and ev["name"]
        assert ev["ph"] in ("X", "M", "C")
        assert isinstance(ev["pid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "thread_sort_index")
            assert isinstance(ev["args"], dict)
            continue
        assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert isinstance(ev["tid"], int)
            assert isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0
        else:
            assert ev["args"] and all(isinstance(v, (int, float)) for v in ev["args"].values())


def test_one_named_track_per_engine(trace):
    names = {ev["tid"]: ev["args"]["name"] for ev in trace["traceEvents"]
             if ev["ph"] == "M" and ev["name"] == "thread_name"}
    assert sorted(names.values()) == sorted(e.name for e in Engine)
    used = {ev["tid"] for ev in trace["traceEvents"] if ev["ph"] == "X"}
    assert used == set(names)  # every engine of this model runs something


def test_slices_are_layers_and_do_not_overlap_on_a_track(trace, compiled):
    by_tid = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X" and ev["cat"] == "layer":
            by_tid[ev["tid"]].append(ev)
    seen = set()
    for evs in by_tid.values():
        evs.sort(key=lambda ev: ev["ts"])
        for a, b in zip(evs, evs[1:], strict=False):
            assert a["ts"] + a["dur"] <= b["ts"] + EPS, (a, b)
        for ev in evs:
            assert ev["name"] in LAYERS + [PROGRAM_LAYER]
            seen.add(ev["name"])
            if ev["name"] != PROGRAM_LAYER:
                info = next(i for i in compiled.program.metadata["layers"]
                            if i["name"] == ev["name"])
                assert ev["args"]["op"] == info["op"] and ev["args"]["mapping"] == info["mapping"]
                assert ev["args"]["instructions"] >= ev["args"]["work_instructions"] > 0
    assert set(LAYERS) <= seen


def test_bursts_nest_inside_their_layer_slice(trace):
    layer = [ev for ev in trace["traceEvents"] if ev["ph"] == "X" and ev["cat"] == "layer"]
    bursts = [ev for ev in trace["traceEvents"] if ev["ph"] == "X" and ev["cat"] == "burst"]
    assert bursts  # the convolutions wait on DMA: their slices have gaps
    for b in bursts:
        assert any(p["tid"] == b["tid"] and p["ts"] <= b["ts"] + EPS
                   and b["ts"] + b["dur"] <= p["ts"] + p["dur"] + EPS for p in layer), b


def test_trace_spans_the_schedule(trace, compiled):
    end = max(ev["ts"] + ev["dur"] for ev in trace["traceEvents"] if ev["ph"] == "X")
    assert end == pytest.approx(compiled.profile.cycles * 1e6 / compiled.arch.clock_hz)
    assert trace["otherData"]["cycles"] == compiled.profile.cycles


def test_slices_account_for_every_work_instruction_and_cycle(compiled):
    tl = build_timeline(compiled)
    prep = prepared(compiled.program, compiled.arch)
    sched = instr_times(prep)
    for e in Engine:
        work = [i for i, op in enumerate(prep.queues[e]) if op.opcode not in CONTROL]
        assert sum(n for sl in tl.on(e) for _, n in sl.opcodes) == len(work)
        if e in (Engine.MATRIX, Engine.VECTOR):  # one instruction at a time: busy = sum
            assert sum(sl.busy_cycles for sl in tl.on(e)) == sum(
                sched.ends[e][i] - sched.starts[e][i] for i in work)


def test_bandwidth_counter_integrates_to_the_traffic(compiled):
    tl = build_timeline(compiled)
    edges, per_mem = tl.bandwidth(bins=50)
    prof = compiled.profile
    for name, bpc in per_mem.items():
        moved = float(np.sum(bpc * np.diff(edges)))
        assert moved == pytest.approx(prof.bytes_read[name] + prof.bytes_written[name])
        assert np.all(bpc <= compiled.arch.offchip[0].bytes_per_cycle + 1e-9)


def test_counter_track_per_memory(trace, compiled):
    counters = {ev["name"] for ev in trace["traceEvents"] if ev["ph"] == "C"}
    assert counters == {f"{m.name} GB/s" for m in compiled.arch.offchip}


def test_deterministic_and_two_memories():
    a, b = build("u55-256"), build("u55-256")
    assert json.dumps(trace_events(a)) == json.dumps(trace_events(b))
    counters = {ev["name"] for ev in trace_events(a)["traceEvents"] if ev["ph"] == "C"}
    assert counters == {"sys_sram GB/s", "flash GB/s"}


def test_unwritable_path_is_a_clear_error(compiled, tmp_path):
    with pytest.raises(TesselConfigError, match="cannot write"):
        write_trace(compiled, tmp_path / "missing" / "trace.json")
