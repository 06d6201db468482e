"""Operating points (DVFS): time and energy of the NPU at another (clock, supply voltage) pair,
one rule for every tool.

A preset's energy figures are for its nominal point, (``clock_hz``, ``voltage_v``). At a point
(f, V) (tessel.arch.sources gives the CMOS rule and its sources):

* cycle counts do not change (off-chip bandwidth and latency are given in NPU cycles and kept
  in cycles: at a lower clock a real memory gets relatively faster, so this is conservative);
* time = cycles / f;
* dynamic energy of the NPU's own events (MACs, SRAM, accumulator, vector, LUT, operand
  buffers, int4 decode) x (V / Vnom)^2;
* leakage power x V / Vnom, so the static energy over a run is x (V / Vnom) x (fnom / f);
* off-chip memories (LPDDR, system SRAM, flash) have supplies of their own: unchanged.

``at_point(arch, point)`` is the NPU running at ``point``: its ``clock_hz``, ``voltage_v`` and
energy figures are the point's, so every figure computed from it (estimate, profile,
simulator statistics) is the figure at that point. ``scale_breakdown`` does the same to an
energy breakdown already computed at the nominal point.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tessel.errors import TesselConfigError, did_you_mean

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch, OperatingPoint

STATIC = "static"  # the key of the static (leakage) energy in an energy breakdown


def dynamic_scale(arch: NpuArch, point: OperatingPoint) -> float:
    """Factor of the NPU's dynamic energy per event at ``point``: (V / Vnom)^2."""
    return (point.voltage_v / arch.voltage_v) ** 2


def leakage_scale(arch: NpuArch, point: OperatingPoint) -> float:
    """Factor of the leakage power at ``point``: V / Vnom."""
    return point.voltage_v / arch.voltage_v


def static_power_mw(arch: NpuArch, point: OperatingPoint) -> float:
    """Leakage power of ``arch`` at ``point`` (mW)."""
    return arch.energy.static_power_mw * leakage_scale(arch, point)


def scale_breakdown(energy_pj: Mapping[str, float], arch: NpuArch,
                    point: OperatingPoint) -> dict[str, float]:
    """An energy breakdown of a run at the nominal point (``energy_breakdown_pj`` plus
    ``"static"``, as reports hold it) as it is at ``point``: the NPU's components x (V/Vnom)^2,
    the off-chip memories (keyed by name) unchanged, the static energy x (V/Vnom)(fnom/f)."""
    memories = {m.name for m in arch.offchip}
    dyn = dynamic_scale(arch, point)
    static = leakage_scale(arch, point) * arch.clock_hz / point.clock_hz
    return {k: v * (static if k == STATIC else 1.0 if k in memories else dyn)
            for k, v in energy_pj.items()}


def at_point(arch: NpuArch, point: OperatingPoint | str | int) -> NpuArch:
    """``arch`` running at ``point`` (a point, its name or its index): ``clock_hz`` and
    ``voltage_v`` are the point's and the NPU's energy figures are scaled to it (the off-chip
    memories' are not). The hardware is the same, the hash is not (clock and figures differ)."""
    from tessel.arch.types import offchip_figures

    p = point if not isinstance(point, (str, int)) else find_point(arch, point)
    if p.clock_hz == arch.clock_hz and p.voltage_v == arch.voltage_v:
        return arch
    dyn, keep = dynamic_scale(arch, p), offchip_figures()
    figures = {f.name: getattr(arch.energy, f.name) * dyn
               for f in dataclasses.fields(arch.energy) if f.name not in keep}
    figures["static_power_mw"] = static_power_mw(arch, p)
    return dataclasses.replace(arch, clock_hz=p.clock_hz, voltage_v=p.voltage_v,
                               energy=dataclasses.replace(arch.energy, **figures))


def find_point(arch: NpuArch, which: str | int) -> OperatingPoint:
    """The operating point named ``which``, or at index ``which`` of ``operating_points``
    (a string of digits is an index)."""
    points = arch.operating_points
    if isinstance(which, str) and which.isdigit():
        which = int(which)
    if isinstance(which, int):
        if 0 <= which < len(points):
            return points[which]
        raise TesselConfigError(f"{arch.name} has {len(points)} operating point(s) (0 .. "
                                f"{len(points) - 1}, slowest first), not {which}")
    for p in points:
        if p.name == which:
            return p
    names = [p.name for p in points]
    raise TesselConfigError(f"{arch.name} has no operating point {which!r}"
                            f"{did_you_mean(which, names)}; its points: {', '.join(names)}")


def check_points(arch: NpuArch) -> None:
    """Raise unless the declared points are by increasing clock, their voltage does not fall
    as the clock rises, and one of them is the nominal point (``clock_hz``, ``voltage_v``)."""
    points = arch.operating_point
    if not points:
        return
    for a, b in zip(points, points[1:], strict=False):
        if b.clock_hz <= a.clock_hz:
            raise TesselConfigError(f"operating_point: {b.name!r} must have a higher clock "
                                    f"than {a.name!r} (points are listed slowest first)")
        if b.voltage_v < a.voltage_v:
            raise TesselConfigError(f"operating_point: {b.name!r} runs a higher clock than "
                                    f"{a.name!r} at a lower voltage ({b.voltage_v} < "
                                    f"{a.voltage_v} V)")
    nominal = [p for p in points if p.clock_hz == arch.clock_hz]
    if not nominal:
        raise TesselConfigError(f"operating_point: no point at clock_hz ({arch.clock_hz}); "
                                "one point must be the nominal one")
    if not math.isclose(nominal[0].voltage_v, arch.voltage_v, rel_tol=1e-9):
        raise TesselConfigError(f"operating_point: {nominal[0].name!r} is at clock_hz, so its "
                                f"voltage must be voltage_v ({arch.voltage_v} V), got "
                                f"{nominal[0].voltage_v}")
