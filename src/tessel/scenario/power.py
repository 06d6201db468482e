"""Every time and energy conversion of a scenario run, in one place: seconds <-> cycles at the
NPU's clock, leakage over a window with idle power gating, average power.

A scenario's schedule is computed in cycles; the clock turns periods and deadlines into cycles
and the timeline back into milliseconds. Static power leaks while the NPU is busy and, unless
power-gated, while it is idle: ``idle_gating`` is the fraction of idle leakage the gating
removes (0: none, 1: all). An operating point (another clock and static power) is a
different `PowerModel`, and dynamic energies scaled with it go through `dynamic_pj`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tessel.arch import NpuArch
from tessel.errors import TesselConfigError


@dataclass(frozen=True)
class PowerModel:
    clock_hz: int
    static_power_mw: float
    idle_gating: float = 0.0
    dynamic_scale: float = 1.0  # multiplies every dynamic energy (1: the preset's figures)

    def __post_init__(self) -> None:
        if not 0.0 <= self.idle_gating <= 1.0:
            raise TesselConfigError(f"idle power gating must be in [0, 1], got "
                                    f"{self.idle_gating!r}")
        if self.clock_hz <= 0:
            raise TesselConfigError(f"clock must be > 0 Hz, got {self.clock_hz!r}")

    @classmethod
    def of(cls, arch: NpuArch, idle_gating: float = 0.0) -> PowerModel:
        """The preset's clock and static power."""
        return cls(arch.clock_hz, arch.energy.static_power_mw, idle_gating)

    def cycles(self, seconds: float | Fraction) -> Fraction:
        """Exact cycles of a time given as a decimal (a 60 Hz period is fractional)."""
        s = seconds if isinstance(seconds, Fraction) else Fraction(str(seconds))
        return s * self.clock_hz

    def period_cycles(self, rate_hz: float) -> Fraction:
        return Fraction(self.clock_hz) / Fraction(str(rate_hz))

    def ms(self, cycles: float) -> float:
        return 1e3 * cycles / self.clock_hz

    def dynamic_pj(self, energy_pj: float) -> float:
        return energy_pj * self.dynamic_scale

    def static_pj(self, busy_cycles: int, idle_cycles: int) -> float:
        """Leakage over ``busy_cycles`` + ``idle_cycles`` (the idle share gated): mW * s = 1e9
        pJ."""
        cycles = busy_cycles + idle_cycles * (1.0 - self.idle_gating)
        return self.static_power_mw * cycles / self.clock_hz * 1e9

    def power_mw(self, energy_pj: float, cycles: int) -> float:
        """Average power of ``energy_pj`` spent over ``cycles``."""
        return energy_pj * 1e-9 / (cycles / self.clock_hz) if cycles else 0.0
