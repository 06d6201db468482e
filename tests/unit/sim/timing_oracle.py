"""An independent formulation of the NPU's timing rules, for tests only: a global event loop
that issues, at each step, the instruction of any engine that can start first (docs/
architecture.md, "Simulator"), with its own in-flight lists, conflict checks and semaphore
counts. tessel.sim.clock runs the same rules as a greedy per-engine loop; the tests hold the two
equal instruction by instruction."""

from __future__ import annotations

from tessel.errors import TesselSimError
from tessel.isa.fields import Engine
from tessel.isa.footprint import Access
from tessel.isa.table import Opcode
from tessel.sim.functional import SEM_MAX, deadlock_message
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.timing import InstrTimes, OpTiming, op_timings


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


class EventLoop:
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


def event_loop_times(prep: PreparedProgram) -> InstrTimes:
    return EventLoop(prep).run()
