"""When each engine works on which layer: the simulator's timing schedule grouped by layer.

The timing model is data-independent (``tessel.sim.timing.instr_times``), so a compiled model's
timeline needs no inputs. Instructions are attributed to layers by the index ranges the
compiler records in ``metadata["layers"]`` (``first`` / ``last`` per engine); instructions
outside every range (the final END, for example) belong to no layer (``PROGRAM_LAYER``).

One ``EngineSlice`` is a maximal run of consecutive instructions of one layer on one engine:
it spans its first work instruction's start to its last work instruction's end (control
instructions, WAIT / SIGNAL / END, only count), and lists the *bursts* in which the engine
actually ran work instructions (the union of their intervals; gaps are stalls on tokens or
bandwidth). A DMA engine keeps several transfers in flight, so the next layer's first
transfer can start before the previous layer's last one ends: a slice is clipped to start
where the previous slice on its engine ended, so slices of one engine never overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tessel.isa.costs import instruction_cost
from tessel.isa.fields import Engine
from tessel.isa.footprint import Space, accesses
from tessel.isa.table import Opcode
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.profile import layer_label
from tessel.sim.prepare import PreparedProgram, prepared
from tessel.sim.timing import DMA_OPS, InstrTimes, instr_times, op_timings

PROGRAM_LAYER = "(program)"  # name of instructions outside every layer's range
CONTROL = frozenset({Opcode.WAIT, Opcode.SIGNAL, Opcode.END})


@dataclass(frozen=True)
class EngineSlice:
    """A run of consecutive instructions of one layer on one engine."""

    engine: Engine
    layer: str  # the layer's name (module path, else IR name: profile.layer_label)
    layer_index: int  # position in metadata["layers"], -1 for PROGRAM_LAYER
    start: int  # cycle
    end: int
    instructions: int  # all instructions of the run, control included
    opcodes: tuple[tuple[str, int], ...]  # work instructions per opcode name
    bursts: tuple[tuple[int, int], ...]  # [start, end) cycles with work running, sorted

    @property
    def busy_cycles(self) -> int:
        return sum(e - s for s, e in self.bursts)


@dataclass(frozen=True)
class Transfer:
    """The data phase of one DMA transfer on off-chip memory ``mem`` (cycles [start, end))."""

    mem: int
    start: int
    end: int
    nbytes: int


@dataclass(frozen=True)
class Timeline:
    """Slices per engine (in queue order), DMA data phases and the total cycle count."""

    compiled: CompiledModel
    total_cycles: int
    slices: tuple[EngineSlice, ...]
    transfers: tuple[Transfer, ...]

    def on(self, engine: Engine) -> tuple[EngineSlice, ...]:
        return tuple(s for s in self.slices if s.engine == engine)

    @cached_property
    def sram_peaks(self) -> SramPeaks:
        return sram_peaks(self.compiled)

    def bandwidth(self, bins: int = 400) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(bin edges in cycles, average bytes/cycle per bin per off-chip memory name)."""
        total = max(self.total_cycles, 1)
        edges = np.unique(np.linspace(0, total, min(bins, total) + 1).round().astype(np.int64))
        out = {}
        for idx, mem in enumerate(self.compiled.arch.offchip):
            tr = [t for t in self.transfers if t.mem == idx and t.end > t.start]
            done = np.zeros(len(edges))
            if tr:
                s = np.array([t.start for t in tr], np.float64)[:, None]
                e = np.array([t.end for t in tr], np.float64)[:, None]
                b = np.array([t.nbytes for t in tr], np.float64)[:, None]
                done = (b * np.clip((edges[None, :] - s) / (e - s), 0.0, 1.0)).sum(axis=0)
            out[mem.name] = np.diff(done) / np.diff(edges)
        return edges, out


@dataclass(frozen=True)
class SramPeaks:
    """On-chip memory use: the highest address + 1 touched by any instruction (overall and per
    layer), and per layer its working set: the scratchpad bytes its instructions touch (the
    union of their operand boxes: what the layer itself needs, resident tensors it reads or
    writes included)."""

    sram_bytes: int
    acc_bytes: int
    per_layer_sram: tuple[int, ...]  # highest byte + 1, in metadata["layers"] order
    per_layer_working_set: tuple[int, ...] = ()  # bytes touched, same order

    @property
    def largest_working_set(self) -> tuple[int, int]:
        """(bytes, layer index) of the layer with the largest working set ((0, -1): none)."""
        ws = self.per_layer_working_set
        if not ws:
            return 0, -1
        k = max(range(len(ws)), key=lambda k: (ws[k], -k))
        return ws[k], k


def build_timeline(compiled: CompiledModel) -> Timeline:
    """Run the timing model once and group its schedule by layer and engine."""
    prep = prepared(compiled.program, compiled.arch)
    sched = instr_times(prep)
    owners = _owners(prep, compiled.program.metadata.get("layers", []))
    names = [layer_label(info["name"], info.get("loc", ""))
             for info in compiled.program.metadata.get("layers", [])]
    slices: list[EngineSlice] = []
    for e in Engine:
        slices.extend(_engine_slices(prep, sched, e, owners[e], names))
    return Timeline(compiled, sched.total_cycles, tuple(slices), _transfers(prep, sched))


def _owners(prep: PreparedProgram, layers: list[dict]) -> dict[Engine, np.ndarray]:
    """Layer index of every instruction per engine (-1: no layer)."""
    out = {}
    for e in Engine:
        own = np.full(len(prep.queues[e]), -1, dtype=np.int64)
        for k, info in enumerate(layers):
            lo, hi = int(info["first"][e.name]), int(info["last"][e.name])
            own[max(lo, 0):hi + 1] = k
        out[e] = own
    return out


def _engine_slices(prep: PreparedProgram, sched: InstrTimes, e: Engine, owner: np.ndarray,
                   names: list[str]) -> list[EngineSlice]:
    queue, starts, ends = prep.queues[e], sched.starts[e], sched.ends[e]
    out: list[EngineSlice] = []
    floor, i = 0, 0
    while i < len(queue):
        j = i
        while j < len(queue) and owner[j] == owner[i]:
            j += 1
        work = [k for k in range(i, j) if queue[k].opcode not in CONTROL]
        if work:
            piece = _slice(e, int(owner[i]), names, queue[i:j], work, starts, ends, floor)
            if piece is not None:
                out.append(piece)
                floor = piece.end
        i = j
    return out


def _slice(e: Engine, k: int, names: list[str], run, work: list[int], starts, ends,
           floor: int) -> EngineSlice | None:
    """The slice of one run, clipped to start at ``floor`` (None if nothing is left)."""
    iv = sorted((max(starts[w], floor), ends[w]) for w in work)
    bursts: list[list[int]] = []
    for s, t in iv:
        if t <= s:
            continue
        if bursts and s <= bursts[-1][1]:
            bursts[-1][1] = max(bursts[-1][1], t)
        else:
            bursts.append([s, t])
    if not bursts:
        return None
    counts: dict[str, int] = {}
    for op in run:
        if op.opcode not in CONTROL:
            counts[op.opcode.name] = counts.get(op.opcode.name, 0) + 1
    return EngineSlice(e, names[k] if k >= 0 else PROGRAM_LAYER, k, bursts[0][0],
                       max(b[1] for b in bursts), len(run), tuple(sorted(counts.items())),
                       tuple((s, t) for s, t in bursts))


def _transfers(prep: PreparedProgram, sched: InstrTimes) -> tuple[Transfer, ...]:
    """Data phases of every DMA transfer: the last (cycles - latency) cycles of each."""
    timings = op_timings(prep)
    out = []
    for e in (Engine.DMA_IN, Engine.DMA_OUT):
        for i, op in enumerate(prep.queues[e]):
            if op.opcode not in DMA_OPS or op.error is not None:
                continue
            tm = timings[e][i]
            ev = instruction_cost(op.instr, prep.arch, op.engine).events
            nbytes = ev.offchip_read_bytes[tm.mem] + ev.offchip_write_bytes[tm.mem]
            end = sched.ends[e][i]
            out.append(Transfer(tm.mem, end - (tm.cycles - tm.latency), end, nbytes))
    return tuple(out)


def sram_peaks(compiled: CompiledModel) -> SramPeaks:
    """Scratchpad and accumulator high-water marks, and each layer's scratchpad working set,
    from every instruction's operand boxes."""
    prep = prepared(compiled.program, compiled.arch)
    layers = compiled.program.metadata.get("layers", [])
    owners = _owners(prep, layers)
    per_layer = [0] * len(layers)
    boxes: list[list[tuple[int, int]]] = [[] for _ in layers]
    sram = acc = 0
    for e in Engine:
        for i, op in enumerate(prep.queues[e]):
            if op.opcode in CONTROL:
                continue
            for a in accesses(op.instr):
                if a.space is Space.SRAM:
                    sram = max(sram, a.hi)
                    k = int(owners[e][i])
                    if k >= 0:
                        per_layer[k] = max(per_layer[k], a.hi)
                        boxes[k].append((a.lo, a.hi))
                elif a.space is Space.ACC:
                    acc = max(acc, a.hi)
    return SramPeaks(sram, 4 * acc, tuple(per_layer), tuple(_union_bytes(b) for b in boxes))


def _union_bytes(ranges: list[tuple[int, int]]) -> int:
    """Bytes covered by the [lo, hi) ranges (overlaps counted once)."""
    total, end = 0, None
    for lo, hi in sorted(ranges):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total
