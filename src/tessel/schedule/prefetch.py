"""Prefetch of a step's first group (weights, requantisation parameters, tables) while the
previous step runs. docs/backend.md, "Steps, rings and tokens".

A group's loads of constants never read the previous step's results, so DMA_IN may issue
step k's group-0 loads during step k-1, once step k-1's own loads are issued, if they write
SRAM that step k-1 never touches. Every step allocates its SRAM from address 0
(`SramPlan`), so `plan_prefetch` moves step k as a whole (every SRAM operand of its own,
`shift_step`) above step k-1's working SRAM when its group-0 slot would overlap it, within
the SRAM below every on-chip-resident tensor; steps then alternate between the bottom of SRAM
and above their neighbour. A step is not prefetched when it is the first of its NPU region,
when its group 0 loads nothing or loads anything but constants (a weights-stationary matmul
keeps its input activation as group data), or when it does not fit.

The token protocol: the prefetching step's end also waits for DMA_IN's STEP_DONE_TOKEN, which
DMA_IN signals after the prefetch loads have landed (emit/streams.py), so each step still
starts with no transfer in flight and no token outstanding, and its estimate
(`estimate_step(..., prefetched=, prefetch=)`) is the time of its own program from an idle
start, as before: the prefetch loads are timed in the step that issues them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tessel.arch import NpuArch
from tessel.isa import Instruction
from tessel.isa.footprint import Space, accesses
from tessel.ops.step import GroupWork, Slots, StepWork, TileWork, top_slots
from tessel.schedule.estimate import CostCache, Estimate, estimate_step

SHIFT_ALIGN = 64  # bytes: a moved step keeps every SRAM address aligned as SramPlan's and more

# operand (footprint.Access.what) -> the instruction field holding its SRAM base address
_FIELD = {"sram": "sram_addr", "in": "in_addr", "w": "w_addr", "a": "a_addr", "b": "b_addr",
          "src": "src_addr", "params": "param_addr", "dst": "dst_addr", "out": "out_addr"}


class NotShiftable(Exception):
    """An operand of the step cannot be moved (partly in a resident tensor, field range)."""


@dataclass(frozen=True)
class StepPrefetch:
    """What `plan_prefetch` decided for one step."""

    shift: int  # bytes every SRAM operand of the step's own moves up
    prefetched: bool  # its group-0 loads are issued by the previous step


def _align(n: int) -> int:
    return -(-n // SHIFT_ALIGN) * SHIFT_ALIGN


def _inside(lo: int, hi: int, keep: Sequence[tuple[int, int]]) -> bool | None:
    """True if [lo, hi) lies in a kept range, False if it misses all, None if it straddles."""
    for a, b in keep:
        if a <= lo and hi <= b:
            return True
        if lo < b and a < hi:
            return None
    return False


def _shift(instrs: Sequence[Instruction], delta: int, keep: Sequence[tuple[int, int]]
           ) -> list[Instruction]:
    out = []
    for ins in instrs:
        moved = {}
        for a in accesses(ins):
            if a.space is not Space.SRAM:
                continue
            inside = _inside(a.lo, a.hi, keep) if keep else False
            if inside is None or a.what not in _FIELD:
                raise NotShiftable(f"{ins.opcode.name}: operand {a.what} cannot be moved")
            if not inside:
                f = _FIELD[a.what]
                moved[f] = getattr(ins, f) + delta
        try:
            out.append(ins.replace(**moved) if moved else ins)
        except Exception as exc:  # a moved field beyond its range
            raise NotShiftable(str(exc)) from exc
    return out


def shift_step(work: StepWork, delta: int, keep: Sequence[tuple[int, int]] = ()) -> StepWork:
    """`work` with every SRAM operand outside the `keep` ranges (resident tensors it reads or
    writes in place) moved up by `delta` bytes; costs are unchanged (addresses cost nothing)."""
    if delta == 0:
        return work

    def group_fn(g: int, slot: int) -> GroupWork:
        gr = work.group_fn(g, slot)
        return GroupWork(_shift(gr.weight_loads, delta, keep), _shift(gr.param_loads, delta, keep),
                         _shift(gr.vector_setup, delta, keep), gr.tile_count)

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        tile = work.tile_fn(g, t, s)
        copies = [tuple(_shift(list(pair), delta, keep)) for pair in tile.copies]
        return TileWork(_shift(tile.loads, delta, keep), _shift(tile.matrix, delta, keep),
                        _shift(tile.vector, delta, keep), _shift(tile.stores, delta, keep),
                        copies)

    return StepWork(work.shape, work.group_count, group_fn, tile_fn, work.tile_key)


def group0_loads(work: StepWork) -> list[Instruction]:
    """The loads `plan_prefetch` moves into the previous step (group 0, slot 0)."""
    if work.group_count == 0:
        return []
    gr = work.group_fn(0, 0)
    return gr.weight_loads + gr.param_loads


def own_hull(work: StepWork, keep: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """[0, hi): hi is one past the highest SRAM byte the step touches outside `keep` (every
    group and tile at the highest slot of each ring: `SramPlan` lays a ring's slots out
    upwards); None if it touches none. The range starts at 0 whatever the lowest byte
    touched, which only claims more. Raises NotShiftable when an operand straddles a kept
    range."""
    sh = work.shape
    s = top_slots(sh)
    hi = -1

    def visit(instrs: Sequence[Instruction]) -> None:
        nonlocal hi
        for ins in instrs:
            for a in accesses(ins):
                if a.space is not Space.SRAM:
                    continue
                inside = _inside(a.lo, a.hi, keep) if keep else False
                if inside is None:
                    raise NotShiftable(f"{ins.opcode.name}: operand {a.what} straddles a "
                                       "resident tensor")
                if not inside and a.hi > hi:
                    hi = a.hi

    for g in range(work.group_count):
        gr = work.group_fn(g, s.group)
        for instrs in (gr.weight_loads, gr.param_loads, gr.vector_setup):
            visit(instrs)
        for t in range(gr.tile_count):
            tile = work.tile_fn(g, t, s)
            for instrs in (tile.loads, tile.matrix, tile.vector, tile.stores):
                visit(instrs)
    return (0, hi) if hi >= 0 else None


# (step index, its work, its kept ranges) -> own_hull(work, kept ranges)
HullFn = Callable[[int, StepWork, Sequence[tuple[int, int]]], tuple[int, int] | None]


def reads_constants_only(loads: Sequence[Instruction], memory: int, end: int) -> bool:
    """Whether every load reads the constant pool (bytes [0, end) of off-chip `memory`): data
    no step writes. A group can also hold an activation (a weights-stationary matmul's
    resident input), which the previous step may still be writing."""
    for ins in loads:
        ext = accesses(ins)[0]
        if ext.space is not Space.OFFCHIP or ext.mem != memory or ext.hi > end:
            return False
    return True


def plan_prefetch(works: Sequence[StepWork], regions: Sequence[int],
                  keeps: Sequence[Sequence[tuple[int, int]]], limit: int,
                  constants: tuple[int, int], hulls: HullFn | None = None
                  ) -> list[StepPrefetch]:
    """Per step, its SRAM shift and whether the previous step prefetches its group 0.

    works[k]: step k as it will be emitted (residency rewrite done); regions[k]: its NPU
    region; keeps[k]: SRAM ranges of the resident tensors step k touches (never moved);
    limit: the lowest SRAM address of any resident tensor (the SRAM size if none): every
    moved step and every prefetch stays below it, so no live resident is overwritten;
    constants: (memory, end) of the constant pool: only loads of constants are prefetched.
    Greedy in program order, deterministic: step k stays at 0 if its group-0 slot misses
    step k-1's working SRAM, else moves just above it if it fits below `limit`.
    hulls(k, works[k], keeps[k]): `own_hull(works[k], keeps[k])` if the caller knows it."""
    hull_of = hulls if hulls is not None else lambda _, work, keep: own_hull(work, keep)
    out: list[StepPrefetch] = []
    prev: tuple[int, int] | None = None  # step k-1's own SRAM [lo, hi) as emitted
    for k, work in enumerate(works):
        try:
            hull = hull_of(k, work, keeps[k])
        except NotShiftable:
            out.append(StepPrefetch(0, False))
            prev = None
            continue
        loads = group0_loads(work)
        decided = StepPrefetch(0, False)
        if (k and regions[k] == regions[k - 1] and loads and hull is not None
                and prev is not None and reads_constants_only(loads, *constants)):
            try:
                boxes = [a for ins in loads for a in accesses(ins) if a.space is Space.SRAM]
                if any(_inside(a.lo, a.hi, keeps[k]) is not False for a in boxes):
                    raise NotShiftable("a group load writes a resident tensor")
                for delta in (0, _align(prev[1])):
                    if hull[1] + delta > limit:
                        continue
                    if all(a.hi + delta <= prev[0] or prev[1] <= a.lo + delta for a in boxes):
                        _shift(loads, delta, keeps[k])  # the fields can hold the move
                        decided = StepPrefetch(delta, True)
                        break
            except NotShiftable:
                decided = StepPrefetch(0, False)
        out.append(decided)
        prev = (0, 0) if hull is None else (hull[0] + decided.shift, hull[1] + decided.shift)
    return out


@dataclass(frozen=True)
class PlannedStep:
    """A step as the emit stage emits it: moved, and with its prefetch role (emit/step.py)."""

    work: StepWork
    prefetched: bool  # its group-0 loads are issued by the previous step
    prefetch: tuple[Instruction, ...]  # the next step's group-0 loads this step issues
    unmoved: StepWork | None = None  # the step before its SRAM shift (the same costs)
    shift: int = 0  # bytes its SRAM operands moved up (`plan_prefetch`)

    def estimate(self, arch: NpuArch, cache: CostCache | None = None) -> Estimate:
        """`estimate_step` of the step as emitted (of its unmoved work: a shift changes
        addresses only, which cost nothing, and the unmoved tiles are already built)."""
        work = self.unmoved if self.unmoved is not None else self.work
        return estimate_step(work, arch, cache=cache, prefetched=self.prefetched,
                             prefetch=self.prefetch)


def plan_steps(works: Sequence[StepWork], regions: Sequence[int],
               keeps: Sequence[Sequence[tuple[int, int]]] | None, sram_bytes: int,
               constants: tuple[int, int], enabled: bool = True,
               hulls: HullFn | None = None) -> list[PlannedStep]:
    """`plan_prefetch` applied: every step moved, each given the next step's group-0 loads
    when that step is prefetched. keeps: per step, the SRAM ranges of the resident tensors
    it touches (None: no residency); enabled=False gives the steps unchanged."""
    if not enabled:
        return [PlannedStep(w, False, ()) for w in works]
    keeps = keeps if keeps is not None else [[] for _ in works]
    limit = min((a for kp in keeps for a, _ in kp), default=sram_bytes)
    plan = plan_prefetch(works, regions, keeps, limit, constants, hulls)
    moved = [shift_step(w, p.shift, keeps[k]) for k, (w, p) in enumerate(zip(works, plan,
                                                                               strict=True))]
    return [PlannedStep(w, plan[k].prefetched,
                        tuple(group0_loads(moved[k + 1]))
                        if k + 1 < len(moved) and plan[k + 1].prefetched else (), works[k],
                        plan[k].shift)
            for k, w in enumerate(moved)]
