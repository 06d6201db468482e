"""The headline figures of one compiled model on its design point (the report's summary).

Definitions (docs/analysis.md repeats them for readers; cycles, latency and MAC utilisation
are those of docs/figures.md):

* throughput = clock / cycles, inferences per second with inferences run back to back;
* energy per inference = dynamic energy of every instruction's events + static power x latency;
* average power at ``fps`` frames per second = dynamic energy per inference x fps + static
  power (the NPU leaks all the time, and idles between frames);
* TOPS/W = 2 x MACs / energy per inference (ops per pJ = TOPS/W);
* SRAM: the largest layer working set (the scratchpad bytes one layer's instructions touch),
  and the highest scratchpad byte touched by any instruction (``timeline.sram_peaks``);
* DRAM arena = the activation arena the memory planner laid out, vs one buffer per tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessel.analysis.timeline import Timeline
from tessel.errors import TesselConfigError
from tessel.runtime.profile import Profile, host_note


@dataclass(frozen=True)
class Summary:
    model: str
    target: str
    clock_hz: int
    cycles: int
    latency_ms: float
    throughput_ips: float
    macs: int
    mac_utilisation: float
    achieved_tops: float
    peak_tops: float
    energy_uj: float  # per inference, static included
    static_energy_uj: float
    fps: float
    average_power_mw: float  # at ``fps``
    static_power_mw: float
    fps_achievable: bool  # fps <= throughput
    tops_per_w: float
    sram_peak_bytes: int  # highest scratchpad byte + 1 touched by any instruction
    sram_working_set_bytes: int  # the largest layer working set
    sram_working_set_layer: str  # that layer's name
    sram_bytes: int  # capacity of the preset
    acc_peak_bytes: int
    arena_peak_bytes: int
    arena_naive_bytes: int
    offchip_read_bytes: int
    offchip_written_bytes: int
    area_mm2: float
    host_ops: tuple[str, ...]


def check_fps(fps: float) -> float:
    """``fps`` as a float, or TesselConfigError if it is not a positive finite number."""
    try:
        value = float(fps)
    except (TypeError, ValueError):
        raise TesselConfigError(f"frame rate must be a number, got {fps!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise TesselConfigError(f"frame rate must be a positive number of frames per second, "
                                f"got {fps!r}")
    return value


def summarize(profile: Profile, timeline: Timeline, fps: float = 30.0) -> Summary:
    """The summary figures of ``profile`` (from ``timeline.compiled``) at ``fps``."""
    fps = check_fps(fps)
    arch = timeline.compiled.arch
    total_pj = math.fsum(profile.energy_pj.values())
    static_pj = profile.energy_pj.get("static", 0.0)
    seconds = profile.cycles / arch.clock_hz
    throughput = 1.0 / seconds if seconds > 0 else math.inf
    peaks = timeline.sram_peaks
    return Summary(
        model=profile.model, target=profile.target, clock_hz=arch.clock_hz,
        cycles=profile.cycles, latency_ms=profile.latency_ms, throughput_ips=throughput,
        macs=profile.macs, mac_utilisation=profile.mac_utilisation,
        achieved_tops=2 * profile.macs / seconds / 1e12 if seconds > 0 else 0.0,
        peak_tops=arch.peak_tops, energy_uj=total_pj / 1e6, static_energy_uj=static_pj / 1e6,
        fps=fps, average_power_mw=(total_pj - static_pj) * fps * 1e-9
        + arch.energy.static_power_mw,
        static_power_mw=arch.energy.static_power_mw, fps_achievable=fps <= throughput,
        tops_per_w=2 * profile.macs / total_pj if total_pj > 0 else 0.0,
        sram_peak_bytes=peaks.sram_bytes,
        sram_working_set_bytes=peaks.largest_working_set[0],
        sram_working_set_layer=(profile.layers[peaks.largest_working_set[1]].label
                                if peaks.largest_working_set[1] >= 0 else ""),
        sram_bytes=arch.onchip.sram_bytes,
        acc_peak_bytes=peaks.acc_bytes, arena_peak_bytes=profile.arena_peak_bytes,
        arena_naive_bytes=profile.arena_naive_bytes,
        offchip_read_bytes=sum(profile.bytes_read.values()),
        offchip_written_bytes=sum(profile.bytes_written.values()),
        area_mm2=arch.derived.area_mm2, host_ops=profile.host_ops)


def summary_rows(s: Summary) -> list[tuple[str, str, str]]:
    """(field key, label, formatted value) of every summary figure, in display order."""
    mb = 1e6
    rows = [
        ("latency", "Latency", f"{s.latency_ms:.4f} ms ({s.cycles:,} cycles at "
                               f"{s.clock_hz / 1e6:g} MHz)" + host_note(s.host_ops)),
        ("throughput", "Throughput", f"{s.throughput_ips:,.1f} inferences/s"
         + host_note(s.host_ops)),
        ("energy", "Energy per inference", f"{s.energy_uj:.3f} uJ (static "
                                           f"{s.static_energy_uj:.3f} uJ)"),
        ("power", f"Average power at {s.fps:g} fps",
         f"{s.average_power_mw:.3f} mW (static {s.static_power_mw:.3f} mW)"
         + ("" if s.fps_achievable else
            f"; NOT achievable: {s.fps:g} fps exceeds the throughput")),
        ("tops_per_w", "TOPS/W", f"{s.tops_per_w:.3f}"),
        ("mac_utilisation", "MAC utilisation",
         f"{100 * s.mac_utilisation:.1f} % ({s.macs / 1e6:.2f} M MACs; {s.achieved_tops:.4f} "
         f"of {s.peak_tops:.4f} peak TOPS)"),
        ("sram_peak", "SRAM use",
         f"largest layer working set {s.sram_working_set_bytes / 1024:.1f} KiB"
         + (f" ({s.sram_working_set_layer})" if s.sram_working_set_layer else "")
         + f"; highest byte touched {s.sram_peak_bytes / 1024:.1f} KiB of "
           f"{s.sram_bytes / 1024:.0f} KiB (accumulators {s.acc_peak_bytes / 1024:.1f} KiB)"),
        ("dram_arena", "DRAM arena peak", f"{s.arena_peak_bytes / mb:.3f} MB (naive "
                                          f"{s.arena_naive_bytes / mb:.3f} MB)"),
        ("offchip_traffic", "Off-chip traffic",
         f"read {s.offchip_read_bytes / mb:.3f} MB, written {s.offchip_written_bytes / mb:.3f} MB"),
        ("area", "Area of the design point", f"{s.area_mm2:.4f} mm2"),
        ("host_ops", "Host (CPU) ops", f"{len(s.host_ops)} (not in the cycle count)"),
    ]
    return rows
