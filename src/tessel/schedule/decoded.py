"""The estimate of a step whose constants code generation stores as weight streams (a target
with the weight decoder, ``wdecoder.enabled``; tessel.emit.compress): each DMA_LOAD that reads
a range of the constant pool whole, in order, into contiguous SRAM is timed as the DMA_LOAD_W
that replaces it when the range's stream pays (the same rule,
`tessel.isa.decoded_load.pays`), its cost read from the stream's real length. The schedule
stage re-estimates its placed steps with it (their cycles and energy events), so the
estimates it records (and `tessel estimate`) are those of the program the simulator runs.

Each range's stream length is found once (`StreamSizes`, `weight_codec.stream_size`: the
encoder's length without writing the stream). The mapping search ranks a step's candidates
before their constants are placed, by their raw loads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterator, Sequence

from tessel.arch import NpuArch
from tessel.isa import Instruction, Opcode
from tessel.isa.decoded_load import (
    constant_reads,
    contiguous_load,
    decoded_load,
    eligible,
    pays,
    stored,
)
from tessel.isa.weight_codec import stream_size
from tessel.ops.step import GroupWork, Slots, StepWork, TileWork, top_slots
from tessel.schedule.estimate import CostCache, Estimate, estimate_step
from tessel.schedule.events import EventTally


class StreamSizes:
    """The weight stream lengths of a constant pool's ranges, found on first use, and the
    DMA_LOAD_W each whole-range load of the pool becomes when its stream pays: the loads of
    the steps `works` whose ranges nothing else among them reads (`decoded_load.eligible`)."""

    def __init__(self, blob: bytes, memory: int, arch: NpuArch, works: Sequence[StepWork]):
        self.blob, self.memory, self.arch = bytes(blob), memory, arch
        self.sizes: dict[tuple[int, int], int] = {}
        self._swaps: dict[Instruction, Instruction] = {}
        self._users: dict[tuple[int, int], list[Instruction]] = {}
        pinned = []
        for work in works:
            for i in _instructions(work):
                for r, whole in constant_reads(i, memory, len(self.blob)):
                    if whole:
                        self._users.setdefault(r, []).append(i)
                    else:
                        pinned.append(r)
        self.eligible = set(eligible(self._users, pinned))

    def stored_bytes(self) -> int:
        """The pool's length as code generation stores it: each range that pays for all its
        loads as its stream (`decoded_load.stored`)."""
        total = len(self.blob)
        for lo, hi in self.eligible:
            size = self.size(lo, hi)
            if pays(size, hi - lo, self._users[(lo, hi)], self.arch):
                total -= hi - lo - stored(size, hi - lo)
        return total

    def size(self, lo: int, hi: int) -> int:
        n = self.sizes.get((lo, hi))
        if n is None:
            n = self.sizes[(lo, hi)] = _stream_size(self.blob[lo:hi],
                                                      self.arch.sparse.enabled)
        return n

    def decoded(self, ins: Instruction) -> Instruction:
        """`ins`, or the DMA_LOAD_W code generation gives it."""
        if ins.opcode is not Opcode.DMA_LOAD or ins.mem != self.memory:
            return ins
        got = self._swaps.get(ins)
        if got is None:
            got = ins
            r = contiguous_load(ins)
            if r in self.eligible:
                size = self.size(*r)
                if pays(size, r[1] - r[0], [ins], self.arch):
                    got = decoded_load(ins, size, r[1] - r[0])
            self._swaps[ins] = got
        return got

    def all_decoded(self, instrs: Sequence[Instruction]) -> list[Instruction]:
        return [self.decoded(i) for i in instrs]

    def work(self, work: StepWork) -> StepWork:
        """`work` with its loads of the pool as code generation emits them: the tiles whose
        loads decode get keys of their own (their costs follow their streams' lengths)."""
        slots = top_slots(work.shape)

        def group_fn(g: int, slot: int) -> GroupWork:
            gr = work.group_fn(g, slot)
            return GroupWork(self.all_decoded(gr.weight_loads), self.all_decoded(gr.param_loads),
                             gr.vector_setup, gr.tile_count)

        def tile_fn(g: int, t: int, s: Slots) -> TileWork:
            tile = work.tile_fn(g, t, s)
            return TileWork(self.all_decoded(tile.loads), tile.matrix, tile.vector, tile.stores,
                            [(self.decoded(a), b) for a, b in tile.copies])

        def tile_key(g: int, t: int) -> Hashable:
            tile = work.tile_fn(g, t, slots)
            mine = tuple(self.decoded(i).ext_addr for i in tile.loads + [a for a, _ in tile.copies]
                         if self.decoded(i) is not i)
            return (work.tile_key(g, t), mine) if mine else work.tile_key(g, t)

        return StepWork(work.shape, work.group_count, group_fn, tile_fn,
                        tile_key if work.tile_key is not None else None, None)

    def step(self, work: StepWork, prefetched: bool, prefetch: Sequence[Instruction],
             cost: CostCache) -> tuple[Estimate, EventTally]:
        """`estimate_step` of the step as emitted and compressed, and its energy events."""
        decoded = self.work(work)
        est = estimate_step(decoded, self.arch, cache=cost, prefetched=prefetched,
                            prefetch=self.all_decoded(prefetch))
        return est, EventTally(decoded)


def _instructions(work: StepWork) -> Iterator[Instruction]:
    """The DMA instructions of every group and tile of `work` (its compute reads no
    off-chip memory)."""
    slots = top_slots(work.shape)
    for g in range(work.group_count):
        group = work.group_fn(g, 0)
        yield from group.weight_loads
        yield from group.param_loads
        for t in range(group.tile_count):
            tile = work.tile_fn(g, t, slots)
            yield from tile.loads
            yield from tile.stores
            for pair in tile.copies:
                yield from pair


_SIZES: dict[tuple[bytes, bool], int] = {}  # (digest of a range's bytes, 2:4) -> stream length


def _stream_size(data: bytes, sparse: bool) -> int:
    """`stream_size(data, nibbles=True, sparse=sparse)`, remembered by the bytes' digest: the
    schedule stage plans a model more than once (and estimates and compiles of one model meet
    the same weights)."""
    key = (hashlib.blake2b(data, digest_size=16).digest(), sparse)
    n = _SIZES.get(key)
    if n is None:
        if len(_SIZES) >= 1 << 16:
            _SIZES.clear()
        n = _SIZES[key] = stream_size(data, nibbles=True, sparse=sparse)
    return n
