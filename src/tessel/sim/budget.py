"""The simulator's memory budget: what one run (a batch included) may allocate on the host.

A run holds, per simulated sample, the off-chip bytes the program can touch (``batch_layout``:
the highest byte of any DMA, I/O tensor or the constant block, per memory; the rest of a
memory is never mapped), the on-chip SRAM, accumulator and LUT memories, and the host copies of
its I/O tensors (their bytes and a float32 copy of each element, twice). A read-only constant
block shared by a batch counts once. `check_budget` refuses a run whose total exceeds
`budget_bytes()` before anything is allocated: TesselConfigError with both figures. The budget
is `DEFAULT_BUDGET` (1 GiB) unless the environment variable ``TESSEL_SIM_MEMORY_MIB`` sets
another number of MiB; `CompiledModel.run_batch` splits a batch into chunks that fit it.
"""

from __future__ import annotations

import math
import os

from tessel.errors import TesselConfigError

DEFAULT_BUDGET = 1 << 30
ENV = "TESSEL_SIM_MEMORY_MIB"
_HOST_BYTES_PER_ELEMENT = 8  # a float32 copy of each I/O element, twice (dequantised, returned)


def budget_bytes() -> int:
    """The budget in bytes: $TESSEL_SIM_MEMORY_MIB MiB if set, else DEFAULT_BUDGET."""
    text = os.environ.get(ENV)
    if not text:
        return DEFAULT_BUDGET
    try:
        mib = int(text)
    except ValueError:
        raise TesselConfigError(f"{ENV}={text!r}: expected a whole number of MiB") from None
    if mib < 1:
        raise TesselConfigError(f"{ENV}={text!r}: must be >= 1")
    return mib << 20


def run_bytes(prep, samples: int) -> int:
    """Host bytes a run of `samples` samples of the prepared program allocates at most."""
    from tessel.sim.api import batch_layout

    arch, prog = prep.arch, prep.program
    sizes, shared = batch_layout(prep)
    onchip = (arch.onchip.sram_bytes + arch.derived.acc_entries * 4
              + arch.onchip.lut_entries * 2)
    io = sum(d.nbytes + _HOST_BYTES_PER_ELEMENT * math.prod(d.shape)
             for d in (*prog.inputs, *prog.outputs))
    once = len(prog.constants) if shared is not None else 0
    return samples * (sum(sizes) - once + onchip + io) + once


def check_budget(prep, samples: int = 1) -> None:
    """TesselConfigError, before any allocation, if `samples` samples exceed the budget."""
    need, budget = run_bytes(prep, samples), budget_bytes()
    if need > budget:
        what = f"{samples} samples" if samples > 1 else "one sample"
        raise TesselConfigError(
            f"simulate: {what} of this program need {need} bytes of host memory ({need >> 20} "
            f"MiB: the off-chip bytes it can touch, the on-chip memories, its I/O tensors), "
            f"more than the simulator's budget of {budget >> 20} MiB (set {ENV} to raise it)")


def samples_within_budget(prep) -> int:
    """The largest batch that fits the budget (0 if one sample does not)."""
    one, budget = run_bytes(prep, 1), budget_bytes()
    if one > budget:
        return 0
    extra = run_bytes(prep, 2) - one
    return 1 + (budget - one) // max(extra, 1)
