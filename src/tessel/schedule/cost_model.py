"""Cost models behind one interface (STYLE.md #8): what the mapping search
(tessel.schedule.search_cache) asks for a candidate step's cycles.

* `AnalyticalCostModel`: `estimate_step` (codegen/step_estimate.py), the per-instruction costs of
  docs/isa.md run through the step's queues and tokens by the simulator's timing rules, with
  one `CostCache` of instruction costs; what `compile`, `estimate`, `advise` and `explore` use.
* `SimulatedCostModel`: the step emitted alone (codegen/emit.py `emit_step`) into a
  one-step program, timed by the simulator's timing model (sim/timing.py) without running
  any data through it; cycles as the profile counts a layer (runtime/profile.py): from the
  step's first non-control instruction to its last instruction's end. Slow (an event loop
  over every instruction); for checking the search against the simulator on small graphs.

Both read the same `sample` (the first `sample` tiles of the first two groups, the time
scaled by the share of tiles run, as `estimate_step` does) and `prefetched` / `prefetch`
(as `emit_step`). The estimator claims exactness per step, so on every step both models
give the same cycles; tests/unit/schedule/test_cost_model.py checks it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tessel.arch import NpuArch
from tessel.codegen.emit import emit_step
from tessel.codegen.step import Estimate, GroupWork, StepWork
from tessel.codegen.step_estimate import CostCache, StepProgram, estimate_step, limit, scaled, time_program
from tessel.codegen.streams import Streams
from tessel.errors import TesselSimError
from tessel.isa import Engine, Instruction, Opcode

_CONTROL = (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)


class CostModelKind(enum.Enum):
    """Which cost model a search used (part of the search cache's key)."""

    ANALYTICAL = "analytical"
    SIMULATED = "simulated"


@runtime_checkable
class CostModel(Protocol):
    """Cycles of one step's work on `arch`. `kind` keys the search cache; `prunable`: the
    closed-form lower bounds of tessel.schedule.prerank hold for its estimates (the search
    prunes with them only then)."""

    kind: CostModelKind
    prunable: bool

    def estimate(self, work: StepWork, arch: NpuArch, *, sample: int | None = None,
                 prefetched: bool = False, prefetch: Sequence[Instruction] = ()
                 ) -> Estimate: ...


class AnalyticalCostModel:
    """`estimate_step` with one instruction-cost memo (renewed when the NPU changes)."""

    kind = CostModelKind.ANALYTICAL
    prunable = True  # prerank's bounds are lower bounds of estimate_step

    def __init__(self) -> None:
        self._cost: CostCache | None = None

    def cost_cache(self, arch: NpuArch) -> CostCache:
        """The memo of the estimates on `arch` (a new one when the NPU changes)."""
        if self._cost is None or self._cost.arch is not arch:
            self._cost = CostCache(arch)
        return self._cost

    def estimate(self, work: StepWork, arch: NpuArch, *, sample: int | None = None,
                 prefetched: bool = False, prefetch: Sequence[Instruction] = ()
                 ) -> Estimate:
        return estimate_step(work, arch, sample=sample, cache=self.cost_cache(arch),
                             prefetched=prefetched, prefetch=prefetch)

    def program(self, work: StepWork, arch: NpuArch, *, sample: int | None = None
                ) -> StepProgram:
        """The arch-free program `estimate` times (`time(program(work, arch), arch) ==
        estimate(work, arch)`); valid on every NPU with `arch`'s search_cache.program_key."""
        return StepProgram(work, sample, self.cost_cache(arch).tiles)

    def time(self, prog: StepProgram, arch: NpuArch) -> Estimate:
        return time_program(prog, self.cost_cache(arch))


class SimulatedCostModel:
    """The step alone on the simulator's timing model (see the module docstring). `runs`:
    how many steps it timed (tests check the search went through it)."""

    kind = CostModelKind.SIMULATED
    prunable = False  # prerank bounds estimate_step; not assumed of the simulator

    def __init__(self) -> None:
        self.runs = 0

    def estimate(self, work: StepWork, arch: NpuArch, *, sample: int | None = None,
                 prefetched: bool = False, prefetch: Sequence[Instruction] = ()
                 ) -> Estimate:
        self.runs += 1
        if sample is None:
            total, busy = simulate_step(work, arch, prefetched=prefetched, prefetch=prefetch)
            return Estimate(total, limit(busy, total), busy)
        run, counts = _sampled(work, sample)
        total, busy = simulate_step(run, arch, prefetched=prefetched, prefetch=prefetch)
        run_tiles = sum(min(sample, c) for c in counts)
        if run_tiles:  # estimate_step's scale of a sampled estimate
            total, busy = scaled(total, busy, counts, work.group_count, run_tiles)
        return Estimate(total, limit(busy, total), busy)


def simulate_step(work: StepWork, arch: NpuArch, *, prefetched: bool = False,
                  prefetch: Sequence[Instruction] = ()) -> tuple[int, dict[Engine, int]]:
    """(cycles, busy cycles per engine) of `work` emitted alone and timed by the simulator's
    timing model: cycles from the first non-control instruction's start to the last
    instruction's end (the closing WAIT and END of the program excluded); busy: compute
    engines the summed durations of their instructions, DMA engines the cycles with a
    transfer in flight."""
    # (the simulator and the binary format: imported here, so that the analytical model's
    # users, a design-space exploration worker above all, do not pay their import)
    from tessel.binary import TslProgram
    from tessel.sim.prepare import prepare
    from tessel.sim.timing import instr_times

    streams = Streams()
    emit_step(work, streams, prefetched=prefetched, prefetch=prefetch)
    lengths = {e: len(streams.queues[e]) for e in Engine}
    prep = prepare(TslProgram(arch.arch_hash_bytes, streams.finish()), arch)
    for e in Engine:  # a data-independent trap: the step could not run as emitted
        for op in prep.queues[e][:lengths[e]]:
            if op.error is not None:
                raise TesselSimError(f"{op.where()}: {op.error}")
    sched = instr_times(prep)
    start, end = None, 0
    busy = dict.fromkeys(Engine, 0)
    for e in Engine:
        spans = []
        for i in range(lengths[e]):
            s, t = sched.starts[e][i], sched.ends[e][i]
            end = max(end, t)
            if prep.queues[e][i].opcode in _CONTROL:
                continue
            start = s if start is None else min(start, s)
            spans.append((s, t))
        busy[e] = _union(spans) if e in (Engine.DMA_IN, Engine.DMA_OUT) else sum(
            t - s for s, t in spans)
    return (0 if start is None else end - start), busy


def _union(spans: list[tuple[int, int]]) -> int:
    out, lo, hi = 0, -1, -1
    for s, t in sorted(spans):
        if s > hi:
            out += hi - lo
            lo, hi = s, t
        else:
            hi = max(hi, t)
    return out + hi - lo


def _sampled(work: StepWork, sample: int) -> tuple[StepWork, list[int]]:
    """The step cut to what estimate_step's sample runs (the first `sample` tiles of the first
    two groups), and the full tile counts of those groups."""
    groups = min(2, work.group_count)
    counts = [work.group_fn(g, 0).tile_count for g in range(groups)]

    def group_fn(g: int, slot: int) -> GroupWork:
        group = work.group_fn(g, slot)
        return dataclasses.replace(group, tile_count=min(sample, group.tile_count))

    return dataclasses.replace(work, group_count=groups, group_fn=group_fn), counts


def default_cost_model(model: CostModel | None) -> CostModel:
    """`model`, or a new analytical one (None: what the search does by default)."""
    return model if model is not None else AnalyticalCostModel()
