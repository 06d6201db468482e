"""The timing model: when each instruction starts and ends, given costs, tokens and bandwidth.

Rules (docs/architecture.md, "Simulator", states them for readers):

* every engine starts at cycle 0 and issues its queue in order; MATRIX and VECTOR run one
  instruction at a time (start = end of the previous one); costs come from
  ``tessel.isa.costs.instruction_cost``;
* a DMA engine issues at most one transfer per cycle and keeps up to ``dma.channels`` in
  flight; a transfer waits for an earlier in-flight transfer of its engine whose operand boxes
  overlap its own with either writing; SIGNAL and END on a DMA engine wait for all its
  transfers;
* a transfer of ``B`` bytes on memory ``m`` has a latency phase (``latency_cycles``; latencies
  of concurrent transfers overlap) then a data phase of ``ceil(B / min(bw_m, SRAM_BW))``
  cycles. Each off-chip memory has one data port: data phases of all transfers on it (both
  DMA engines) are serialised first come, first served. Alone, a transfer costs exactly
  ``dma_cost``;
* SIGNAL costs 1 cycle and its token is available at its end; the k-th WAIT on a semaphore
  takes the k-th SIGNAL's token (one producer and one consumer per semaphore), so it ends at
  ``max(ready, token time) + 1``;
* total cycles = the end of the last non-control instruction (in a compiled program, the last
  DMA_STORE byte written).

Instructions are scheduled globally in order of start time (an event loop), so the shared
data ports are granted in the order transfers become ready.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselSimError
from tessel.isa.costs import instruction_cost
from tessel.isa.fields import Engine
from tessel.isa.footprint import Access, accesses
from tessel.isa.table import Opcode
from tessel.sim.functional import SEM_MAX, deadlock_message
from tessel.sim.prepare import Op, PreparedProgram

DMA_OPS = frozenset({Opcode.DMA_LOAD, Opcode.DMA_STORE})


@dataclass(frozen=True, slots=True)
class OpTiming:
    """Static timing facts of one instruction (cost alone; DMA latency / data split)."""

    cycles: int
    latency: int = 0
    mem: int = -1
    boxes: tuple[Access, ...] = ()


@dataclass(frozen=True)
class InstrTimes:
    """Start and end cycle of every instruction (per engine, in queue order)."""

    starts: tuple[tuple[int, ...], ...]
    ends: tuple[tuple[int, ...], ...]
    total_cycles: int


def op_timings(prep: PreparedProgram) -> tuple[tuple[OpTiming, ...], ...]:
    """Per-instruction static timing, computed once per prepared program."""
    cached = prep.cache.get("op_timings")
    if cached is not None:
        return cached
    arch = prep.arch
    out = []
    for e, queue in enumerate(prep.queues):
        row = []
        for op in queue:
            cyc = instruction_cost(op.instr, arch, Engine(e)).cycles if op.error is None else 1
            if op.opcode in DMA_OPS and op.error is None:
                lat = arch.offchip[op.f["mem"]].latency_cycles
                row.append(OpTiming(cyc, lat, op.f["mem"], accesses(op.instr)))
            else:
                row.append(OpTiming(cyc))
        out.append(tuple(row))
    prep.cache["op_timings"] = tuple(out)
    return prep.cache["op_timings"]


def _conflict(a: tuple[Access, ...], b: tuple[Access, ...]) -> bool:
    for x in a:
        for y in b:
            if (x.space == y.space and x.mem == y.mem and (x.write or y.write)
                    and x.lo < y.hi and y.lo < x.hi):
                return True
    return False


class _Engine:
    """Run-time state of one engine's queue in the event loop."""

    __slots__ = ("queue", "times", "pc", "ready", "inflight", "starts", "ends", "is_dma")

    def __init__(self, queue: tuple[Op, ...], times: tuple[OpTiming, ...], is_dma: bool):
        self.queue, self.times, self.is_dma = queue, times, is_dma
        self.pc, self.ready = 0, 0
        self.inflight: list[tuple[int, tuple[Access, ...]]] = []  # (end, boxes)
        self.starts = [0] * len(queue)
        self.ends = [0] * len(queue)


class TimingModel:
    """Event loop over the four queues of a prepared program."""

    def __init__(self, prep: PreparedProgram):
        self.prep = prep
        timings = op_timings(prep)
        self.engines = [_Engine(q, t, Engine(e) in (Engine.DMA_IN, Engine.DMA_OUT))
                        for e, (q, t) in enumerate(zip(prep.queues, timings, strict=True))]
        self.channels = prep.arch.dma_channels
        self.port_free = [0] * len(prep.arch.offchip)
        self.signals: dict[tuple[int, int, int], list[int]] = {}
        self.taken: dict[tuple[int, int, int], int] = {}

    def _candidate(self, e: int, eng: _Engine) -> int | None:
        """Earliest start of the engine's next instruction, or None if it is blocked."""
        op = eng.queue[eng.pc]
        t = eng.ready
        code = op.opcode
        if code is Opcode.WAIT:
            key = (int(op.f["engine"]), e, op.f["token"])
            k = self.taken.get(key, 0)
            sig = self.signals.get(key, ())
            return max(t, sig[k]) if k < len(sig) else None
        if not eng.is_dma or not eng.inflight:
            return t
        ends = [end for end, _ in eng.inflight]
        if code is not Opcode.DMA_LOAD and code is not Opcode.DMA_STORE:
            return max(t, max(ends))  # SIGNAL / END wait for every transfer
        boxes = eng.times[eng.pc].boxes
        for end, other in eng.inflight:
            if end > t and _conflict(boxes, other):
                t = end
        busy = sorted((end for end in ends if end > t), reverse=True)
        if len(busy) >= self.channels:
            t = busy[self.channels - 1]
        return t

    def _issue(self, e: int, eng: _Engine, t: int) -> None:
        op, tm = eng.queue[eng.pc], eng.times[eng.pc]
        code = op.opcode
        if code is Opcode.DMA_LOAD or code is Opcode.DMA_STORE:
            data = tm.cycles - tm.latency
            begin = max(t + tm.latency, self.port_free[tm.mem])
            end = self.port_free[tm.mem] = begin + data
            eng.inflight = [x for x in eng.inflight if x[0] > t]
            eng.inflight.append((end, tm.boxes))
            eng.ready = t + 1
        else:
            end = t + tm.cycles
            eng.ready = end
            if code is Opcode.WAIT:
                key = (int(op.f["engine"]), e, op.f["token"])
                self.taken[key] = self.taken.get(key, 0) + 1
            elif code is Opcode.SIGNAL:
                self._signal((e, int(op.f["engine"]), op.f["token"]), end, op)
        eng.starts[eng.pc], eng.ends[eng.pc] = t, end
        eng.pc += 1

    def _signal(self, key: tuple[int, int, int], end: int, op: Op) -> None:
        sig = self.signals.setdefault(key, [])
        sig.append(end)
        if len(sig) - self.taken.get(key, 0) > SEM_MAX:
            raise TesselSimError(f"{op.where()}: token {key[2]} count from {Engine(key[0]).name} "
                                 f"to {Engine(key[1]).name} would exceed {SEM_MAX}")

    def run(self) -> InstrTimes:
        live = [(e, eng) for e, eng in enumerate(self.engines) if eng.queue]
        while live:
            best, best_t = None, None
            for e, eng in live:
                t = self._candidate(e, eng)
                if t is not None and (best_t is None or t < best_t):
                    best, best_t = (e, eng), t
            if best is None:
                pcs = [eng.pc for eng in self.engines]
                raise TesselSimError(deadlock_message(self.prep.queues, pcs, None))
            self._issue(best[0], best[1], best_t)
            if best[1].pc == len(best[1].queue):
                live.remove(best)
        return InstrTimes(tuple(tuple(x.starts) for x in self.engines),
                        tuple(tuple(x.ends) for x in self.engines), self._total())

    def _total(self) -> int:
        work = [end for eng in self.engines for op, end in zip(eng.queue, eng.ends, strict=True)
                if op.opcode not in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)]
        return max(work, default=0)


def instr_times(prep: PreparedProgram) -> InstrTimes:
    """Run the timing model over a prepared program."""
    return TimingModel(prep).run()


def busy_cycles(starts: tuple[int, ...], ends: tuple[int, ...], queue: tuple[Op, ...],
                total: int) -> int:
    """Cycles in [0, total) in which the engine runs at least one instruction (END excluded)."""
    iv = sorted((s, min(e, total)) for s, e, op in zip(starts, ends, queue, strict=True)
                if op.opcode is not Opcode.END and s < total)
    busy, cur_s, cur_e = 0, -1, -1
    for s, e in iv:
        if s > cur_e:
            busy += max(0, cur_e - cur_s)
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return busy + max(0, cur_e - cur_s)


def events_matrix(prep: PreparedProgram) -> np.ndarray:
    """int64 [instruction, event] counts (see ``stats.EVENT_COLUMNS``), cached."""
    cached = prep.cache.get("events")
    if cached is not None:
        return cached
    from tessel.sim.stats import event_row

    rows = [event_row(instruction_cost(op.instr, prep.arch, op.engine).events,
                      len(prep.arch.offchip))
            for op in prep.ops if op.opcode not in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)]
    width = len(event_row(None, len(prep.arch.offchip)))
    mat = np.array(rows, dtype=np.int64).reshape(-1, width)
    prep.cache["events"] = mat
    return mat
