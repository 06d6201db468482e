"""A step's energy events (`tessel.isa.costs.Events`): the events of every instruction of the
step as emitted (every group, every tile), which `tessel estimate` turns into joules.

An instruction's events, like its cycles, depend only on its cost key (`isa.costs.cost_key`:
the fields `instruction_cost` reads, never an address), so a step's events on any NPU follow
from its arch-free tally (`EventTally`): how many of its instructions have each cost key. The
schedule stage shares a tally across design points whose steps are alike (schedule/plan.py
`_placed`), so each NPU only prices the tally's few distinct keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tessel.arch import NpuArch
from tessel.isa import Engine, Instruction
from tessel.isa.costs import Events, cost_key
from tessel.ops.step import StepWork, top_slots
from tessel.schedule.estimate import CostCache


def step_events(work: StepWork, arch: NpuArch, tally: EventTally | None = None) -> Events:
    """Energy events of every instruction of a step (`tally`: the step's, if the caller has
    it)."""
    return (tally if tally is not None else EventTally(work)).events(arch)


Rows = tuple[tuple[Instruction, Engine | None, int], ...]


class EventTally:
    """A step's instructions counted by cost key (and engine): arch-free. Counted on first use
    from the step's work into `shared` (a one-item list: steps whose counts are known to be
    equal share it, and only the first to be asked counts); tiles with the same `tile_key`
    have the same instructions up to addresses, so each key's tile is counted once and
    multiplied by its tiles."""

    def __init__(self, work: StepWork, shared: list[Rows | None] | None = None):
        self._work = work
        self._shared: list[Rows | None] = shared if shared is not None else [None]

    def rows(self) -> Rows:
        """(an instruction, the engine its cost is taken on (None: its own), how many of the
        step's instructions share its cost key there), in first-met order."""
        rows = self._shared[0]
        if rows is None:
            rows = self._shared[0] = _tally(self._work)
        return rows

    def events(self, arch: NpuArch) -> Events:
        """The step's events on `arch`."""
        cost = CostCache(arch).cost  # (instruction costs memoised by their fields, per arch)
        total = _EventSum()
        for ins, engine, n in self.rows():
            total.add(cost(ins, engine).events, n)
        return total.events()


def _tally(work: StepWork) -> Rows:
    counts: dict[tuple, list[Any]] = {}  # (cost key, engine) -> [instruction, engine, count]

    def count(instrs: list[Instruction], engine: Engine | None, times: int,
              into: dict[tuple, list[Any]]) -> None:
        for ins in instrs:
            key = (cost_key(ins, engine), engine)
            row = into.get(key)
            if row is None:
                into[key] = [ins, engine, times]
            else:
                row[2] += times

    tiles: dict[Any, list[Any]] = {}  # tile key -> [its counts, how many tiles have it]
    top = top_slots(work.shape)
    for g in range(work.group_count):
        group = work.group_fn(g, 0)
        count(group.weight_loads + group.param_loads, None, 1, counts)
        count(group.vector_setup, Engine.VECTOR, 1, counts)
        for t in range(group.tile_count):
            key = work.tile_key(g, t) if work.tile_key is not None else (g, t)
            got = tiles.get(key)
            if got is not None:
                got[1] += 1
                continue
            tile = work.tile_fn(g, t, top)
            own: dict[tuple, list[Any]] = {}
            count(tile.loads + tile.matrix + tile.stores
                  + [i for pair in tile.copies for i in pair], None, 1, own)
            count(tile.vector, Engine.VECTOR, 1, own)
            tiles[key] = [own, 1]
    for own, n in tiles.values():
        for key, (ins, engine, k) in own.items():
            row = counts.get(key)
            if row is None:
                counts[key] = [ins, engine, k * n]
            else:
                row[2] += k * n
    return tuple((ins, engine, n) for ins, engine, n in counts.values())


_COUNTS = tuple(f.name for f in dataclasses.fields(Events)
                if not isinstance(getattr(Events(), f.name), tuple))
_PER_MEMORY = tuple(f.name for f in dataclasses.fields(Events)
                    if isinstance(getattr(Events(), f.name), tuple))


class _EventSum:
    """Events added up in place (Events + Events builds a new value per addition)."""

    def __init__(self) -> None:
        self.counts = [0] * len(_COUNTS)
        self.per_memory: list[list[int]] = [[] for _ in _PER_MEMORY]

    def add(self, ev: Events, times: int = 1) -> None:
        """`times` x the events `ev`."""
        counts = self.counts
        for i, name in enumerate(_COUNTS):
            counts[i] += getattr(ev, name) * times
        for acc, name in zip(self.per_memory, _PER_MEMORY, strict=True):
            for m, x in enumerate(getattr(ev, name)):
                if m == len(acc):
                    acc.append(0)
                acc[m] += x * times

    def events(self) -> Events:
        values: dict[str, Any] = dict(zip(_COUNTS, self.counts, strict=True))
        values.update((n, tuple(a)) for n, a in zip(_PER_MEMORY, self.per_memory, strict=True))
        return Events(**values)
