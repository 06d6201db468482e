"""Summary figures follow their definitions (docs/analysis.md); roofline points and roofs;
the energy groups add up to the profile's energy."""

from __future__ import annotations

import math

import pytest
from analysis_nets import build

from tessel.analysis.figures import check_fps, summarize, summary_rows
from tessel.analysis.plots import bandwidth_roofs, energy_groups, roofline_points
from tessel.analysis.timeline import build_timeline
from tessel.errors import TesselConfigError


def test_summary_definitions(compiled):
    prof, tl = compiled.profile, build_timeline(compiled)
    s = summarize(prof, tl, fps=60)
    total_pj = math.fsum(prof.energy_pj.values())
    assert s.throughput_ips * s.latency_ms / 1e3 == pytest.approx(1.0)
    assert s.energy_uj == pytest.approx(total_pj / 1e6)
    dyn = total_pj - prof.energy_pj["static"]
    assert s.average_power_mw == pytest.approx(dyn * 60 * 1e-9
                                               + compiled.arch.energy.static_power_mw)
    assert s.tops_per_w == pytest.approx(2 * prof.macs / total_pj)
    assert s.achieved_tops == pytest.approx(s.peak_tops * s.mac_utilisation)
    assert s.area_mm2 == compiled.arch.derived.area_mm2 > 0
    assert 0 < s.sram_peak_bytes <= s.sram_bytes
    assert s.sram_peak_bytes == max(tl.sram_peaks.per_layer_sram)
    ws = tl.sram_peaks.per_layer_working_set
    assert s.sram_working_set_bytes == max(ws) > 0
    assert s.sram_working_set_layer == prof.layers[ws.index(max(ws))].label
    assert s.arena_peak_bytes == compiled.program.metadata["arena_peak_bytes"] > 0
    assert s.fps_achievable and not summarize(prof, tl, fps=1e9).fps_achievable
    keys = [k for k, _, _ in summary_rows(s)]
    assert len(keys) == len(set(keys)) and "power" in keys


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "x"])
def test_bad_frame_rate(bad):
    with pytest.raises(TesselConfigError, match="frame rate"):
        check_fps(bad)


def test_roofline_points_and_roofs(compiled):
    prof = compiled.profile
    pts = roofline_points(prof)
    assert [p.layer for p in pts] == ["c1", "c2"]  # the pool has no MACs
    for p in pts:
        lay = next(x for x in prof.layers if x.name == p.layer)
        moved = sum(lay.bytes_read.values()) + sum(lay.bytes_written.values())
        assert p.intensity == pytest.approx(lay.macs / moved)
        assert p.macs_per_cycle <= compiled.arch.peak_macs_per_cycle
    roofs = bandwidth_roofs(build_timeline(compiled))
    assert [(r.label, r.bytes_per_cycle) for r in roofs] == [
        ("lpddr 16 B/cycle (weights+activations)", 16.0)]
    u55 = build("u55-256")
    assert [r.bytes_per_cycle for r in bandwidth_roofs(build_timeline(u55))] == [1.0, 8.0]


def test_energy_groups_add_up(compiled):
    prof = compiled.profile
    groups = energy_groups(prof.energy_pj, [m.name for m in compiled.arch.offchip])
    assert [g for g, _ in groups] == ["MAC", "SRAM", "accumulator", "off-chip lpddr", "vector",
                                      "LUT", "static"]
    assert math.fsum(v for _, v in groups) == pytest.approx(math.fsum(prof.energy_pj.values()))


def test_layer_working_set_is_the_bytes_its_instructions_touch(compiled):
    """Against a byte mask per layer filled from every instruction's SRAM operand boxes."""
    import numpy as np

    from tessel.analysis.timeline import CONTROL
    from tessel.isa.fields import Engine
    from tessel.isa.footprint import Space, accesses
    from tessel.sim.prepare import prepared

    prep = prepared(compiled.program, compiled.arch)
    layers = compiled.program.metadata["layers"]
    masks = [np.zeros(compiled.arch.onchip.sram_bytes, bool) for _ in layers]
    for k, info in enumerate(layers):
        for e in Engine:
            for i in range(info["first"][e.name], info["last"][e.name] + 1):
                op = prep.queues[e][i]
                if op.opcode in CONTROL:
                    continue
                for a in accesses(op.instr):
                    if a.space is Space.SRAM:
                        masks[k][a.lo:a.hi] = True
    peaks = build_timeline(compiled).sram_peaks
    assert list(peaks.per_layer_working_set) == [int(m.sum()) for m in masks]
    assert all(0 < w <= p for w, p in zip(peaks.per_layer_working_set, peaks.per_layer_sram,
                                          strict=True))
