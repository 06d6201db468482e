"""Which models' constants stay on chip across frames, planned over the whole scenario.

By default every frame of every model streams its constants (weights, bias, requantisation
tables) from the weights memory, as a model compiled alone does. Keeping a model's constants
resident in the SRAM scratchpad saves those reads every frame, but the bytes they occupy are
taken from every model's scratchpad: each model is scheduled again for the smaller SRAM (the
schedule stage's own search, so its cycles and energy follow).

`plan_constants` picks the resident models for a reserve of ``capacity`` bytes: the most
energy saved per second (bytes read per frame x rate x energy per byte saved), a greedy by
saving per byte, kept against the best single model (the classic 1/2-approximation of the
knapsack; tests compare it with the exhaustive choice). `reserves` lists the reserves a
scenario tries; tessel.scenario.run keeps the one of lowest average power that misses no more
deadlines than none.

What the plan does not model: the one-time load of the resident constants at start-up, and
the cycles of a resident model's weight loads, which stay those of its schedule (the
transfers move the same bytes, from on chip; a conservative figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessel.arch import NpuArch
from tessel.isa import Opcode
from tessel.isa.footprint import accesses
from tessel.schedule.resident_rewrite import all_instructions
from tessel.schedule.result import Schedule

RESERVE_SHARES = (0, 1 / 8, 1 / 4, 3 / 8, 1 / 2)  # of the SRAM, tried by `reserves`
SRAM_GRANULE = 1024  # onchip.sram_bytes is a multiple of this


@dataclass(frozen=True)
class Candidate:
    name: str
    nbytes: int  # its constants (the blob)
    saving_pj_per_s: float  # energy saved per second when resident


@dataclass(frozen=True)
class ConstantsPlan:
    reserve: int  # SRAM bytes set aside for resident constants
    resident: tuple[str, ...]  # models whose constants stay on chip
    resident_bytes: int

    @property
    def sram_left(self) -> int:
        return self.reserve - self.resident_bytes


NO_RESIDENCY = ConstantsPlan(0, (), 0)


def constant_reads(schedule: Schedule) -> int:
    """Bytes one frame reads from the constant blob (the extents of its DMA loads that fall
    in the blob's range of the weights memory)."""
    blob = len(schedule.constants.blob)
    total = 0
    for step in schedule.steps:
        for ins in all_instructions(step.work):
            if ins.opcode is Opcode.DMA_LOAD:
                ext = accesses(ins)[0]
                if ext.mem == schedule.constants.memory and ext.hi <= blob:
                    total += ext.hi - ext.lo
    return total


def saving_per_byte_pj(arch: NpuArch, weights_memory: int) -> float:
    """Energy saved per constant byte read from the SRAM instead of the weights memory."""
    mem = arch.offchip[weights_memory]
    return arch.energy.offchip_byte_pj(mem.kind) - arch.energy.sram_read_byte_pj


def plan_constants(candidates: Sequence[Candidate], capacity: int) -> ConstantsPlan:
    """The resident set for ``capacity`` bytes (see the module docstring)."""
    useful = [c for c in candidates if c.saving_pj_per_s > 0 and 0 < c.nbytes <= capacity]
    greedy, used = [], 0
    for c in sorted(useful, key=lambda c: (-c.saving_pj_per_s / c.nbytes, c.name)):
        if used + c.nbytes <= capacity:
            greedy.append(c)
            used += c.nbytes
    best_one = max(useful, key=lambda c: (c.saving_pj_per_s, c.name), default=None)
    if best_one is not None and best_one.saving_pj_per_s > sum(c.saving_pj_per_s
                                                               for c in greedy):
        greedy = [best_one]
    names = tuple(sorted(c.name for c in greedy))
    return ConstantsPlan(capacity, names, sum(c.nbytes for c in greedy))


def reserves(arch: NpuArch) -> list[int]:
    """SRAM reserves to try: shares of the scratchpad, in whole granules."""
    sram = arch.onchip.sram_bytes
    return sorted({int(sram * s) // SRAM_GRANULE * SRAM_GRANULE for s in RESERVE_SHARES})
