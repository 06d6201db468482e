"""The simulated cost model: a step emitted alone (`emit_step`) into a one-step program and
timed by the simulator's timing model (sim/timing.py) without running any data through it;
cycles as the profile counts a layer (runtime/profile.py): from the step's first non-control
instruction to its last instruction's end. Slow (an event loop over every instruction); for
checking the search (tessel.schedule.cost_model's `CostModel`) against the simulator on small
graphs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tessel.arch import NpuArch
from tessel.emit.step import emit_step
from tessel.emit.streams import Streams
from tessel.errors import TesselSimError
from tessel.isa import Engine, Instruction, Opcode
from tessel.ops.step import GroupWork, StepWork
from tessel.schedule.cost_model import CostModelKind
from tessel.schedule.estimate import Estimate, limit, scaled

_CONTROL = (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)


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
