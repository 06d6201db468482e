"""CompileOptions: how the compiler behaves, kept apart from NpuArch (what the hardware is).

The difference, as in Vela's ArchitectureFeatures / CompilerOptions: a design-space exploration
varies the ``NpuArch`` (MACs, SRAM, bandwidths, energies) and never these options; changing an
option never changes the hardware a binary targets, so it is not part of ``NpuArch.arch_hash``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.errors import TesselConfigError

# The one default of every API and CLI command that calibrates (`--calibration N`).
DEFAULT_CALIBRATION_SAMPLES = 32
MAX_CALIBRATION_SAMPLES = 10_000  # every sample is kept in memory while calibrating


@dataclass(frozen=True)
class CompileOptions:
    """Knobs of one compilation; every field has a safe default.

    calibration_samples: number of example inputs the PTQ calibration runs (>= 1).
    allow_host_fallback: run ops the NPU cannot express on the host CPU (default) instead of
        failing (`--no-fallback`).
    dump_after: names of passes after which the IR is printed (``--dump-after=PASS``).
    seed: seed of every random choice the compiler makes (search, sampling); runs are
        deterministic for a given seed.
    on_chip_residency: keep activations in SRAM between steps where the cost model finds it
        faster (on by default; docs/backend.md "On-chip residency"); `tessel estimate` plans
        the same schedule, residency included.
    prefetch_groups: load each step's first group of weights and parameters while the
        previous step runs, where SRAM allows (default on; docs/backend.md "Steps, rings and
        tokens"); off gives the program of a strict barrier between steps.
    stage_weights: where weights live in a memory slower than the activation memory, copy
        the constants of weight-bound steps into free activation memory while earlier
        compute-bound steps run, and read them from there (default on; docs/backend.md
        "Weight staging").
    """

    calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES
    allow_host_fallback: bool = True
    dump_after: tuple[str, ...] = ()
    seed: int = 0
    on_chip_residency: bool = True
    prefetch_groups: bool = True
    stage_weights: bool = True

    def __post_init__(self) -> None:
        n = self.calibration_samples
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CALIBRATION_SAMPLES:
            raise TesselConfigError(f"calibration_samples must be an integer from 1 to "
                                    f"{MAX_CALIBRATION_SAMPLES}, got {n!r}")
        if not isinstance(self.allow_host_fallback, bool):
            raise TesselConfigError(
                f"allow_host_fallback must be a bool, got {self.allow_host_fallback!r}"
            )
        if isinstance(self.dump_after, str) or not all(
            isinstance(p, str) and p for p in self.dump_after
        ):
            raise TesselConfigError(
                f"dump_after must be a tuple of pass names, got {self.dump_after!r}"
            )
        object.__setattr__(self, "dump_after", tuple(self.dump_after))
        if not isinstance(self.on_chip_residency, bool):
            raise TesselConfigError(
                f"on_chip_residency must be a bool, got {self.on_chip_residency!r}"
            )
        if not isinstance(self.prefetch_groups, bool):
            raise TesselConfigError(
                f"prefetch_groups must be a bool, got {self.prefetch_groups!r}"
            )
        if not isinstance(self.stage_weights, bool):
            raise TesselConfigError(f"stage_weights must be a bool, got {self.stage_weights!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise TesselConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
