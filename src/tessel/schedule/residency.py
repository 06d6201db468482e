"""On-chip residency planner (issue 10 point 2), the placement core: which activations stay
in the SRAM scratchpad from their producer step to their last consumer step, and where.

Input: per tensor a lifetime interval of steps [start, end] (inclusive), its size and the
cycles residency would save (from the cost model: the producer's and consumers' estimates
with and without the DRAM round trip); per step the top of its working SRAM (the highest
SRAM byte any of its instructions touches, `working_set_top`). A resident tensor is placed
above the working sets of every step of its lifetime and away from every other resident
tensor alive at the same time, so no instruction of those steps can touch it.

Greedy and deterministic: tensors in order of decreasing saving (ties: earlier start, then
name), each placed best-fit (the smallest free gap that holds it, at the gap's top end); a
tensor that saves nothing or finds no gap is spilled to DRAM (the reason is recorded).

The step rewrite that uses the plan: tessel.codegen.resident (behind
`CompileOptions.on_chip_residency`); docs/backend.md ("On-chip residency").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tessel.codegen.context import ALIGN, align
from tessel.codegen.resident import NotResidentCapable, Resident, all_instructions, rewrite_step
from tessel.codegen.step import CostCache, StepWork, estimate_step
from tessel.isa import Instruction
from tessel.isa.footprint import Space, accesses


@dataclass(frozen=True)
class Lifetime:
    """Tensor `name` is written by step `start` and last read by step `end` (inclusive)."""

    name: str
    start: int
    end: int
    nbytes: int
    saving: int  # estimated cycles saved when resident (<= 0: never resident)

    def overlaps(self, other: Lifetime) -> bool:
        return not (other.end < self.start or self.end < other.start)


@dataclass(frozen=True)
class ResidencyPlan:
    sram: dict[str, int]  # resident tensor -> SRAM byte address
    spilled: dict[str, str]  # tensor kept in DRAM -> why


def working_set_top(instrs: Iterable[Instruction]) -> int:
    """One past the highest SRAM byte the instructions touch (0 if none), aligned."""
    top = 0
    for ins in instrs:
        for a in accesses(ins):
            if a.space is Space.SRAM:
                top = max(top, a.hi)
    return align(top, ALIGN)


def plan_residency(tensors: Sequence[Lifetime], floors: Sequence[int], sram_bytes: int
                   ) -> ResidencyPlan:
    """Addresses for the tensors worth keeping on chip; `floors[s]` = working-set top of step
    s. Residents never overlap each other while both alive, never go below the floor of any
    step of their lifetime nor beyond `sram_bytes`."""
    placed: list[tuple[Lifetime, int]] = []
    sram: dict[str, int] = {}
    spilled: dict[str, str] = {}
    for t in sorted(tensors, key=lambda t: (-t.saving, t.start, t.name)):
        if t.saving <= 0:
            spilled[t.name] = "no cycles saved"
            continue
        floor = align(max(floors[t.start:t.end + 1], default=0), ALIGN)
        busy = sorted((a, a + align(o.nbytes)) for o, a in placed if o.overlaps(t))
        addr = _best_fit(busy, floor, sram_bytes, align(t.nbytes))
        if addr is None:
            spilled[t.name] = (f"{t.nbytes} bytes do not fit above the working SRAM "
                               f"({floor} bytes) of steps {t.start}..{t.end}")
            continue
        sram[t.name] = addr
        placed.append((t, addr))
    return ResidencyPlan(sram, spilled)


def _best_fit(busy: list[tuple[int, int]], lo: int, hi: int, size: int) -> int | None:
    """Top-aligned address of `size` bytes in the smallest gap of [lo, hi) between `busy`
    intervals (sorted) that holds it; None if none does."""
    gaps, cur = [], lo
    for b0, b1 in busy:
        if b0 > cur:
            gaps.append((cur, min(b0, hi)))
        cur = max(cur, b1)
    if cur < hi:
        gaps.append((cur, hi))
    fits = [(g1 - g0, -g1, g0, g1) for g0, g1 in gaps if g1 - g0 >= size]
    if not fits:
        return None
    _, _, g0, g1 = min(fits)
    addr = (g1 - size) // ALIGN * ALIGN
    return addr if addr >= g0 else None


def plan_step_residents(works: Sequence[StepWork], writes: Sequence[str | None],
                        reads: Sequence[set[str]], regions: Sequence[int], dram: dict,
                        excluded: set[str], arch) -> tuple[list[list[Resident]], dict]:
    """Per step, the resident tensors it touches; and the plan (`ResidencyPlan`).

    works[s]: step s as emitted; writes[s] / reads[s]: the arena tensor (root) it produces
    and those it reads; excluded: program inputs / outputs (they stay where [memory] says)."""
    cache = CostCache(arch)
    floors = [working_set_top(all_instructions(w)) for w in works]
    base = [estimate_step(w, arch, cache=cache).cycles for w in works]
    lifetimes = []
    for p, name in enumerate(writes):
        if name is None or name in excluded:
            continue
        users = [s for s in range(len(works)) if name in reads[s]]
        if not users or any(regions[s] != regions[p] or s <= p for s in users):
            continue
        t = dram[name]
        if _align16(t.nbytes) > arch.onchip.sram_bytes:
            continue
        res = [Resident(t.memory, t.address, t.address + t.nbytes, arch.onchip.sram_bytes
                        - _align16(t.nbytes))]
        saving = 0
        try:
            for s in [p, *users]:
                saving += base[s] - estimate_step(rewrite_step(works[s], res), arch,
                                                  cache=cache).cycles
        except NotResidentCapable:
            saving = 0
        lifetimes.append(Lifetime(name, p, max(users), t.nbytes, saving))
    plan = plan_residency(lifetimes, floors, arch.onchip.sram_bytes)
    per_step: list[list[Resident]] = [[] for _ in works]
    for lt in lifetimes:
        if lt.name in plan.sram:
            t = dram[lt.name]
            r = Resident(t.memory, t.address, t.address + t.nbytes, plan.sram[lt.name])
            for s in range(lt.start, lt.end + 1):
                if s == lt.start or lt.name in reads[s]:
                    per_step[s].append(r)
    return per_step, plan


def _align16(n: int) -> int:
    return -(-n // 16) * 16
