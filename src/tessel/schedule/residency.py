"""On-chip residency planner, the placement core: which activations stay
in the SRAM scratchpad from their producer step to their last consumer step, and where.

Input: per tensor a lifetime interval of steps [start, end] (inclusive), its size and the
cycles residency would save (from the cost model: the producer's and consumers' estimates
with and without the DRAM round trip); per step the top of its working SRAM (the highest
SRAM byte any of its instructions touches, `resident.sram_top`, aligned). A resident tensor is placed
above the working sets of every step of its lifetime and away from every other resident
tensor alive at the same time, so no instruction of those steps can touch it.

Greedy and deterministic: tensors in one order (decreasing saving, decreasing size, program
order or decreasing saving per byte), each placed by one rule (best-fit at the gap's top end,
highest, lowest); a tensor that saves nothing or finds no gap is spilled to DRAM (the reason
is recorded). Every order x rule is tried and the plan saving the most cycles is kept.

The step rewrite that uses the plan: tessel.schedule.resident_rewrite (behind
`CompileOptions.on_chip_residency`); docs/backend.md ("On-chip residency").
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tessel.isa import Opcode
from tessel.isa.footprint import accesses
from tessel.ops.context import ALIGN, align
from tessel.ops.step import StepWork
from tessel.schedule.estimate import CostCache, estimate_step
from tessel.schedule.resident_rewrite import (
    NotResidentCapable,
    Resident,
    all_instructions,
    rewrite_step,
    sram_top,
)


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
    part: dict[str, int] = field(default_factory=dict)  # partly resident -> bytes on chip


def largest_gap(placed: Sequence[tuple[Lifetime, int, int]], t: Lifetime, floors: Sequence[int],
                sram_bytes: int) -> tuple[int, int]:
    """The largest free SRAM interval [lo, hi) above the floors of `t`'s lifetime and away
    from every placed (lifetime, address, bytes) alive with it ((x, x) if none)."""
    floor = align(max(floors[t.start:t.end + 1], default=0), ALIGN)
    busy = sorted((a, a + align(n)) for o, a, n in placed if o.overlaps(t))
    best, cur = (floor, floor), floor
    for b0, b1 in busy + [(sram_bytes, sram_bytes)]:
        if min(b0, sram_bytes) - cur > best[1] - best[0]:
            best = (cur, min(b0, sram_bytes))
        cur = max(cur, b1)
    return best


def plan_residency(tensors: Sequence[Lifetime], floors: Sequence[int], sram_bytes: int
                   ) -> ResidencyPlan:
    """Addresses for the tensors worth keeping on chip; `floors[s]` = working-set top of step
    s. Residents never overlap each other while both alive, never go below the floor of any
    step of their lifetime nor beyond `sram_bytes`. The greedy placement is run in every
    order and placement rule of `STRATEGIES`; the plan saving the most cycles is kept (ties:
    the first strategy)."""
    best = None
    for order, rule in STRATEGIES:
        plan = _greedy(sorted(tensors, key=order), floors, sram_bytes, rule)
        total = sum(t.saving for t in tensors if t.name in plan.sram)
        if best is None or total > best[0]:
            best = (total, plan)
    assert best is not None
    return best[1]


class Rule(enum.Enum):
    """Where a tensor goes among the free gaps above the floors of its lifetime."""

    BEST_FIT_TOP = "best-fit-top"  # the smallest gap that holds it, at the gap's top end
    HIGHEST = "highest"  # as high as possible
    LOWEST = "lowest"  # as low as possible (just above the working sets)


_ORDERS = (
    lambda t: (-t.saving, t.start, t.name),  # most cycles saved first
    lambda t: (-t.nbytes, t.start, t.name),  # biggest first (fragments least)
    lambda t: (t.start, -t.saving, t.name),  # in program order (ping-pong between the ends)
    lambda t: (-t.saving / max(t.nbytes, 1), t.start, t.name),  # most saved per byte first
)
STRATEGIES = tuple((o, r) for o in _ORDERS for r in Rule)


def _greedy(tensors: Sequence[Lifetime], floors: Sequence[int], sram_bytes: int, rule: Rule
            ) -> ResidencyPlan:
    placed: list[tuple[Lifetime, int]] = []
    sram: dict[str, int] = {}
    spilled: dict[str, str] = {}
    for t in tensors:
        if t.saving <= 0:
            spilled[t.name] = "no cycles saved"
            continue
        floor = align(max(floors[t.start:t.end + 1], default=0), ALIGN)
        busy = sorted((a, a + align(o.nbytes)) for o, a in placed if o.overlaps(t))
        addr = _fit(busy, floor, sram_bytes, align(t.nbytes), rule)
        if addr is None:
            spilled[t.name] = (f"{t.nbytes} bytes do not fit above the working SRAM "
                               f"({floor} bytes) of steps {t.start}..{t.end} beside the "
                               f"residents alive then")
            continue
        sram[t.name] = addr
        placed.append((t, addr))
    return ResidencyPlan(sram, spilled)


def _fit(busy: list[tuple[int, int]], lo: int, hi: int, size: int, rule: Rule) -> int | None:
    """Aligned address of `size` bytes in a gap of [lo, hi) between `busy` intervals (sorted)
    chosen by `rule`; None if no gap holds it."""
    gaps, cur = [], lo
    for b0, b1 in busy:
        if b0 > cur:
            gaps.append((cur, min(b0, hi)))
        cur = max(cur, b1)
    if cur < hi:
        gaps.append((cur, hi))
    fits = [(g0, g1) for g0, g1 in gaps
            if align(g0, ALIGN) + size <= g1 and (g1 - size) // ALIGN * ALIGN >= g0]
    if not fits:
        return None
    if rule is Rule.LOWEST:
        return align(fits[0][0], ALIGN)
    if rule is Rule.HIGHEST:
        g0, g1 = fits[-1]
    else:
        _, _, g0, g1 = min((g1 - g0, -g1, g0, g1) for g0, g1 in fits)
    return (g1 - size) // ALIGN * ALIGN


def plan_step_residents(works: Sequence[StepWork], writes: Sequence[str | None],
                        reads: Sequence[set[str]], regions: Sequence[int], dram: dict,
                        excluded: set[str], arch, base: Sequence[int],
                        cache: CostCache | None = None, tops: Sequence[int] | None = None,
                        cycles: Callable[[int, list[Resident]], int] | None = None
                        ) -> tuple[list[list[Resident]], ResidencyPlan]:
    """Per step, the resident tensors it touches; and the plan (`ResidencyPlan`).

    works[s]: step s as emitted; writes[s] / reads[s]: the arena tensor (root) it produces
    and those it reads; excluded: program inputs / outputs (they stay where [memory] says);
    base[s]: step s's estimated cycles without residents (the search's estimate); cache: the
    instruction costs the estimates share (with the caller's other estimates); tops[s]:
    `resident.sram_top` of works[s]'s `all_instructions` if the caller knows it (computed
    here if None); cycles(s, res): step s's estimated cycles with the residents `res`,
    raising NotResidentCapable if it cannot have them (None: `rewrite_step(works[s], res,
    keyed=True)` estimated here)."""
    cache = cache if cache is not None and cache.arch is arch else CostCache(arch)
    if cycles is None:
        def cycles(s: int, res: list[Resident]) -> int:
            return estimate_step(rewrite_step(works[s], res, keyed=True), arch,
                                 cache=cache).cycles
    tops = tops if tops is not None else [sram_top(all_instructions(w)) for w in works]
    floors = [align(max(t, 0), ALIGN) for t in tops]  # per step: its working-set top
    dma_memo: dict[int, list] = {}

    def dmas(s: int) -> list:
        """Step s's DMAs: (opcode, ext access) of each (partial residency's cuts and reads)."""
        got = dma_memo.get(s)
        if got is None:
            got = dma_memo[s] = [(ins.opcode, accesses(ins)[0])
                                 for ins in all_instructions(works[s])
                                 if ins.opcode in (Opcode.DMA_LOAD, Opcode.DMA_STORE)]
        return got

    lifetimes = []
    why: dict[str, str] = {}
    partial: list[tuple[str, int, list[int]]] = []  # (tensor, producer, consumers)
    users_of: dict[str, list[int]] = {}
    for p, name in enumerate(writes):
        if name is None or name in excluded:
            continue
        users = [s for s in range(len(works)) if name in reads[s]]
        if not users or any(regions[s] != regions[p] or s <= p for s in users):
            why[name] = "read by no later NPU step of its region" if not users else \
                "read outside its producer's region"
            continue
        t = dram[name]
        if _align16(t.nbytes) > arch.onchip.sram_bytes:
            why[name] = f"{t.nbytes} bytes: bigger than the SRAM"
            partial.append((name, p, users))
            continue
        res = [Resident(t.memory, t.address, t.address + t.nbytes, arch.onchip.sram_bytes
                        - _align16(t.nbytes))]
        saving = 0
        try:
            for s in [p, *users]:
                saving += base[s] - cycles(s, res)
        except NotResidentCapable as exc:
            saving = 0
            why[name] = f"step {s}: {exc}"
        lifetimes.append(Lifetime(name, p, max(users), t.nbytes, saving))
        users_of[name] = users
    sram = arch.onchip.sram_bytes
    plan = plan_residency(lifetimes, floors, sram)
    chosen = {}
    for lt in lifetimes:
        if lt.name in plan.sram:
            t = dram[lt.name]
            chosen[lt.name] = (lt, Resident(t.memory, t.address, t.address + t.nbytes,
                                            plan.sram[lt.name]))
        elif "do not fit" in plan.spilled[lt.name]:
            partial.append((lt.name, lt.start, users_of[lt.name]))
    # partial residency: the largest prefix of a spilled tensor that fits the largest free
    # gap of its lifetime, cut where no store of its producer straddles (biggest first)
    placed = [(lt, r.sram, lt.nbytes) for lt, r in chosen.values()]
    part: dict[str, int] = {}
    for name, p, users in sorted(partial, key=lambda c: (-dram[c[0]].nbytes, c[0])):
        t, lt = dram[name], Lifetime(name, p, max(users), dram[name].nbytes, 0)
        g0, g1 = largest_gap(placed, lt, floors, sram)
        cut = max((c for c in _cuts(dmas(p), t) if _align16(c) <= g1 - g0), default=0)
        if cut <= 0:
            why[name] = (f"no prefix of it fits the largest free gap ({g1 - g0} bytes) of steps "
                         f"{p}..{max(users)} between its producer's stores")
            continue
        r = Resident(t.memory, t.address, t.address + cut, (g1 - _align16(cut)) // 16 * 16,
                     True, _dram_reads([dmas(s) for s in users], t, t.address + cut))
        saving = 0
        try:
            for s in [p, *users]:
                saving += base[s] - cycles(s, [r])
        except NotResidentCapable as exc:
            why[name] = f"{cut} bytes on chip: step {s}: {exc}"
            continue
        if saving <= 0:
            why[name] = f"{cut} bytes on chip save no cycles"
            continue
        lt = Lifetime(name, p, max(users), cut, saving)
        placed.append((lt, r.sram, cut))
        chosen[name] = (lt, r)
        part[name] = cut
    plan = ResidencyPlan(plan.sram, {k: v for k, v in {**plan.spilled, **why}.items()
                                     if k not in part}, part)
    per_step: list[list[Resident]] = [[] for _ in works]
    for name in sorted(chosen, key=lambda n: (chosen[n][0].start, n)):
        lt, r = chosen[name]
        for s in range(lt.start, lt.end + 1):
            if s == lt.start or lt.name in reads[s]:
                per_step[s].append(r)
    return per_step, plan


def _ext_ranges(dmas: list, t, opcode: Opcode) -> list[tuple[int, int]]:
    """Off-chip [lo, hi) of every DMA (opcode, ext access) of a step touching tensor `t`."""
    lo, hi = t.address, t.address + t.nbytes
    return [(e.lo, e.hi) for op, e in dmas
            if op is opcode and e.mem == t.memory and e.lo < hi and lo < e.hi]


def _cuts(producer: list, t) -> list[int]:
    """Prefix sizes of `t` (bytes) at which no store of its producer (its DMAs) straddles."""
    spans = sorted(_ext_ranges(producer, t, Opcode.DMA_STORE))
    out, reach, k = [], 0, 0
    for c in sorted({b for _, b in spans}):
        while k < len(spans) and spans[k][0] < c:
            reach = max(reach, spans[k][1])
            k += 1
        if reach <= c and t.address < c <= t.address + t.nbytes:
            out.append(c - t.address)
    return out


def _dram_reads(consumers: Sequence[list], t, cut: int) -> tuple[tuple[int, int], ...]:
    """Merged off-chip ranges the consumers (their DMAs) still load from DRAM when `t` is
    resident below the address `cut` (every load of `t` not wholly below it)."""
    spans = sorted({r for w in consumers
                    for r in _ext_ranges(w, t, Opcode.DMA_LOAD)
                    if not (t.address <= r[0] and r[1] <= cut)})
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _align16(n: int) -> int:
    return -(-n // 16) * 16
