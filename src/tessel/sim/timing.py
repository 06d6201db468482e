"""The simulator's timing: when each instruction of a prepared program starts and ends, by the
NPU's timing rules (tessel.sim.clock, which also times the compiler's estimates), one clock
row per instruction: its cost (``tessel.isa.costs.instruction_cost``), the DMA transfers'
memory, latency and operand boxes, the semaphores' tokens.

Total cycles = the end of the last non-control instruction (in a compiled program, the last
DMA_STORE byte written). A semaphore's count above SEM_MAX at a SIGNAL (its tokens not yet
taken, in start order) traps; a program whose engines cannot all reach their END deadlocks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselSimError
from tessel.isa.costs import instruction_cost
from tessel.isa.fields import Engine
from tessel.isa.footprint import Access, Space, accesses
from tessel.isa.table import Opcode
from tessel.sim import clock
from tessel.sim.functional import SEM_MAX, deadlock_message
from tessel.sim.prepare import Op, PreparedProgram

DMA_OPS = frozenset({Opcode.DMA_LOAD, Opcode.DMA_STORE, Opcode.DMA_LOAD_W})
_SPACES = tuple(Space)  # a box's space as its index here


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


def clock_table(prep: PreparedProgram) -> tuple:
    """The program as clock rows (one per instruction, engines in order), computed once per
    prepared program: (rows, bounds, token slots, cycles per row, latencies, boxes, the
    semaphore key of each WAIT / SIGNAL row or -1, the keys' (producer, consumer, token))."""
    cached = prep.cache.get("clock")
    if cached is not None:
        return cached
    timings = op_timings(prep)
    keys: dict[tuple[int, int, int], int] = {}
    rows: list[int] = []
    bounds, vals, boxes, row_key = [0], [], [], []
    nsig: list[int] = []
    for e, (queue, times) in enumerate(zip(prep.queues, timings, strict=True)):
        for op, tm in zip(queue, times, strict=True):
            k = len(vals)
            vals.append(tm.cycles)
            code = op.opcode
            if code is Opcode.WAIT or code is Opcode.SIGNAL:
                peer = int(op.f["engine"])
                sem = (peer, e, op.f["token"]) if code is Opcode.WAIT else (e, peer, op.f["token"])
                key = keys.setdefault(sem, len(keys))
                if key == len(nsig):
                    nsig.append(0)
                row_key.append(key)
                if code is Opcode.WAIT:
                    rows += (clock.ROW_WAIT, key, 0, 0, 0, 0, 0, 0)
                else:
                    nsig[key] += 1
                    rows += (clock.ROW_SIGNAL, key, 1 << peer, 0, 0, 0, 0, 0)
                continue
            row_key.append(-1)
            if code is Opcode.END:
                rows += (clock.ROW_END, 0, 0, 0, 0, 0, 0, 0)
            elif tm.mem >= 0:  # a transfer (DMA_LOAD / DMA_STORE without a static trap)
                first = len(boxes) // clock.BOX
                for x in tm.boxes:
                    boxes += (_SPACES.index(x.space), x.mem, x.lo, x.hi, int(x.write))
                rows += (clock.ROW_XFER, k, tm.mem, first, len(boxes) // clock.BOX, 0, 0, 0)
            else:
                rows += (clock.ROW_WORK, k, 0, 0, 0, 0, 0, 0)
        bounds.append(len(vals))
    off = [0]
    for n in nsig:
        off.append(off[-1] + n)
    lats = [m.latency_cycles for m in prep.arch.offchip]
    sems = tuple(sorted(keys, key=keys.get))
    table = (rows, bounds, off, vals, lats, boxes, row_key, sems)
    prep.cache["clock"] = table
    return table


def instr_times(prep: PreparedProgram) -> InstrTimes:
    """Start and end of every instruction of the prepared program (tessel.sim.clock)."""
    rows, bounds, off, vals, lats, boxes, row_key, sems = clock_table(prep)
    out, starts, ends = clock.time_rows(rows, bounds, off, vals, lats, prep.arch.dma_channels,
                                        boxes=boxes, record=True)
    if out[clock.OUT_BLOCKED]:
        pcs = [out[clock.OUT_PC + e] - bounds[e] for e in range(len(prep.queues))]
        raise TesselSimError(deadlock_message(prep.queues, pcs, None))
    _check_counts(prep, bounds, starts, row_key, sems)
    per = [(tuple(starts[bounds[e]:bounds[e + 1]]), tuple(ends[bounds[e]:bounds[e + 1]]))
           for e in range(len(prep.queues))]
    return InstrTimes(tuple(s for s, _ in per), tuple(x for _, x in per),
                      out[clock.OUT_LAST_WORK])


def _check_counts(prep: PreparedProgram, bounds: list[int], starts: list[int],
                  row_key: list[int], sems: tuple) -> None:
    """A SIGNAL whose semaphore would hold more than SEM_MAX tokens not yet taken when it runs
    (the WAITs that start before it, or at the same cycle on an engine before its own, have
    taken theirs) traps."""
    engine_of = [e for e in range(len(prep.queues)) for _ in range(bounds[e], bounds[e + 1])]
    signals: dict[int, list[int]] = {}
    waits: dict[int, list[tuple[int, int]]] = {}
    for e, queue in enumerate(prep.queues):
        for i, op in enumerate(queue):
            row = bounds[e] + i
            key = row_key[row]
            if key < 0:
                continue
            if op.opcode is Opcode.SIGNAL:
                signals.setdefault(key, []).append(row)
            else:
                waits.setdefault(key, []).append((starts[row], e))
    for key, rows in signals.items():
        taken = sorted(waits.get(key, ()))
        for j, row in enumerate(rows):
            before = bisect.bisect_left(taken, (starts[row], engine_of[row]))
            if j + 1 - before > SEM_MAX:
                p, c, tok = sems[key]
                op = prep.queues[engine_of[row]][row - bounds[engine_of[row]]]
                raise TesselSimError(f"{op.where()}: token {tok} count from {Engine(p).name} "
                                     f"to {Engine(c).name} would exceed {SEM_MAX}")


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
