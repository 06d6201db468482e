"""The NPU's timing rules, once: when each instruction of the four engine queues starts and
ends, given its cycles, the dependency tokens, the DMA channels and the memories' data ports.
The simulator's timing (tessel.sim.timing: one row per instruction) and the compiler's step
estimate (tessel.schedule.estimate: one row per compute tile or transfer) both run `run`.

Rules (docs/architecture.md, "Simulator"):

* every engine starts at cycle 0 and runs its queue in order; MATRIX and VECTOR run one
  instruction at a time (start = end of the previous one);
* a WAIT takes the next token of its semaphore (one producer and one consumer each; the k-th
  WAIT takes the k-th SIGNAL's token) and ends at ``max(ready, token time) + CONTROL_CYCLES``;
  a SIGNAL's token is available at its end; on a DMA engine SIGNAL and END wait for all the
  engine's transfers;
* a DMA engine issues at most one transfer per cycle and keeps up to ``channels`` in flight; a
  transfer waits for the transfers of its engine in flight that it conflicts with (operand
  boxes, `boxes`, that overlap with either writing);
* a transfer on memory ``m`` has a latency phase (``lats[m]``; latencies of concurrent
  transfers overlap) then a data phase (its cycles minus the latency); each memory has one data
  port, granted to transfers (of both DMA engines) in the order they issue.

The loop runs each compute engine as far as its tokens allow, then issues the DMA transfer that
can issue first (DMA_IN on a tie), and repeats: compute engines share nothing but tokens, so
this gives the times an event loop in start order gives.

Rows (flat, ``COLS`` ints each; ``bounds[e]``: engine e's first row, ``bounds[4]``: the end):

    WAIT    0  key
    SIGNAL  1  key  wake mask
    WORK    2  term
    XFER    3  term  memory  first box  end of boxes
    TILE    4  wait key  second wait key or -1  term  signal key or -1  signal key or -1  wake
    END     5

``vals[term]``: a term's cycles; ``sig_off[key]``: the key's first slot in the token buffer;
``boxes[BOX * first:BOX * end]``: the transfer's operand boxes, ``BOX`` ints each (space,
memory, first byte, end byte, written). A
TILE is a compute tile as the estimate keeps it (its WAITs, its instructions as one term, its
SIGNALs); a wake mask names the engines a token may unblock.

`run` is written once: compiled (ahead of time, tessel.sim.jit) inside `run_arrays` on int64
arrays, or its Python source on lists (`run_lists`: what a process runs until the compiled
form pays off, and with kernels off); `time_rows` calls either. The per-row `starts` / `ends`
are filled when the caller asks. Results in `out` (`OUT_*`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.costs import CONTROL_CYCLES
from tessel.isa.fields import Engine
from tessel.isa.limits import ALL_ENGINES_MASK, NUM_ENGINES
from tessel.sim import jit

ROW_WAIT, ROW_SIGNAL, ROW_WORK, ROW_XFER, ROW_TILE, ROW_END = range(6)
COLS = 8
BOX = 5  # space, memory, first byte, end byte, written
ENGINES = NUM_ENGINES
DMA_IN, MATRIX, VECTOR, DMA_OUT = (int(e) for e in (Engine.DMA_IN, Engine.MATRIX, Engine.VECTOR,
                                                    Engine.DMA_OUT))
ALL_ENGINES = ALL_ENGINES_MASK
NOT_YET = 1 << 62  # no non-control op has started
# out[]: the last end of any row, the latest time an engine's queue got to, the first start of
# a non-control row, the last end of a non-control row, 1 when an engine did not reach the end
# of its queue, busy cycles per engine (compute: their work; DMA: cycles with a transfer in
# flight), and per engine the row it got to (its bound's end when it finished)
OUT_TOP, OUT_MAX_READY, OUT_FIRST, OUT_LAST_WORK, OUT_BLOCKED, OUT_BUSY = range(6)
OUT_PC = OUT_BUSY + ENGINES
OUT_LEN = OUT_PC + ENGINES


@jit.helper
def _issue_time(ready: int, fly: Any, base: int, nfly: int, channels: int) -> int:
    """When a DMA engine ready at `ready` issues its next transfer: the `channels`-th latest end
    among its transfers in flight then (`fly[base:base + nfly]`), or `ready` if fewer."""
    if nfly < channels:
        return ready
    n = 0
    for i in range(nfly):
        if fly[base + i] > ready:
            n += 1
    if n < channels:
        return ready
    # the channels-th largest live end: drop the (n - channels) ... here n == channels always
    # (a transfer issues only when fewer than `channels` are in flight), so the smallest
    best = -1
    for i in range(nfly):
        x = fly[base + i]
        if x > ready and (best < 0 or x < best):
            best = x
    rank = n - channels  # live ends smaller than the answer
    while rank > 0:  # (not reached by `run`; kept exact for any caller)
        nxt = -1
        for i in range(nfly):
            x = fly[base + i]
            if x > best and (nxt < 0 or x < nxt):
                nxt = x
        best = nxt
        rank -= 1
    return best


@jit.helper
def run(rows: Any, bounds: Any, sig_off: Any, vals: Any, lats: Any, channels: int, boxes: Any,
        sigs: Any, nsig: Any, taken: Any, pc: Any, ready: Any, busy: Any, last_end: Any,
        fly: Any, fly_row: Any, nfly: Any, span_lo: Any, span_hi: Any, port: Any, starts: Any, ends: Any,
        out: Any) -> None:
    """Time the queues (see the module docstring) in the state buffers given (made by
    `run_arrays` / `run_lists`); fills `out`, and `starts` / `ends` per row when they are not
    empty."""
    record = len(starts) > 0
    first = NOT_YET
    last_work = 0
    pending = ALL_ENGINES
    while True:
        while pending:  # run what the tokens allow, until every engine is blocked
            for oi in range(ENGINES):
                e = (MATRIX, VECTOR, DMA_IN, DMA_OUT)[oi]
                if not (pending >> e) & 1:
                    continue
                pending &= ~(1 << e)
                k, r, nq = pc[e], ready[e], bounds[e + 1]
                while k < nq:
                    b = k * COLS
                    kind = rows[b]
                    s0 = r
                    if kind == ROW_TILE:
                        w = rows[b + 1]
                        t0 = taken[w]
                        if t0 >= nsig[w]:
                            break
                        w1 = rows[b + 2]
                        if w1 >= 0:
                            t1 = taken[w1]
                            if t1 >= nsig[w1]:
                                break
                            x = sigs[sig_off[w] + t0]
                            r = (x if x > r else r) + CONTROL_CYCLES
                            x = sigs[sig_off[w1] + t1]
                            r = (x if x > r else r) + CONTROL_CYCLES
                            taken[w] = t0 + 1
                            taken[w1] = t1 + 1
                        else:
                            x = sigs[sig_off[w] + t0]
                            r = (x if x > r else r) + CONTROL_CYCLES
                            taken[w] = t0 + 1
                        c = vals[rows[b + 3]]
                        if c:
                            if r < first:
                                first = r
                            r += c
                            busy[e] += c
                            if r > last_work:
                                last_work = r
                        for j in (4, 5):
                            s = rows[b + j]
                            if s >= 0:
                                r += CONTROL_CYCLES
                                sigs[sig_off[s] + nsig[s]] = r
                                nsig[s] += 1
                        pending |= rows[b + 6]
                    elif kind == ROW_WAIT:
                        a = rows[b + 1]
                        t0 = taken[a]
                        if t0 >= nsig[a]:
                            break
                        x = sigs[sig_off[a] + t0]
                        s0 = x if x > r else r
                        r = s0 + CONTROL_CYCLES
                        taken[a] = t0 + 1
                    elif kind == ROW_SIGNAL or kind == ROW_END:
                        x = last_end[e]
                        s0 = x if x > r else r
                        r = s0 + CONTROL_CYCLES
                        if kind == ROW_SIGNAL:
                            s = rows[b + 1]
                            sigs[sig_off[s] + nsig[s]] = r
                            nsig[s] += 1
                            pending |= rows[b + 2]
                    elif kind == ROW_WORK:
                        c = vals[rows[b + 1]]
                        if c:
                            if r < first:
                                first = r
                            r += c
                            busy[e] += c
                        if r > last_work:
                            last_work = r
                    else:
                        break
                    if record:
                        starts[k] = s0
                        ends[k] = r
                    k += 1
                pc[e] = k
                ready[e] = r
        # the next transfer: the DMA engine that can issue first (DMA_IN on a tie)
        c0 = c1 = -1
        for i in range(2):
            e = DMA_IN if i == 0 else DMA_OUT
            k = pc[e]
            if k < bounds[e + 1] and rows[k * COLS] == ROW_XFER:
                t = _hazard_time(rows, k, ready[e], boxes, fly, fly_row, e * (channels + 1),
                                 nfly[e])
                if nfly[e] >= channels:
                    t = _issue_time(t, fly, e * (channels + 1), nfly[e], channels)
                if i == 0:
                    c0 = t
                else:
                    c1 = t
        if c0 < 0 and c1 < 0:
            break
        i = 0 if c1 < 0 or 0 <= c0 <= c1 else 1
        best = DMA_IN if i == 0 else DMA_OUT
        t = c0 if i == 0 else c1
        other_t = c1 if i == 0 else c0
        k, nq = pc[best], bounds[best + 1]
        base = best * (channels + 1)
        end_max = last_end[best]
        issued = t
        while True:  # this engine's transfers, while they issue before the other's
            b = k * COLS
            mem = rows[b + 2]
            lat = lats[mem]
            data = vals[rows[b + 1]] - lat
            if t < first:
                first = t
            x = t + lat
            p = port[mem]
            end = (x if x > p else p) + data
            port[mem] = end
            if end > last_work:
                last_work = end
            if nfly[best] >= channels:
                m = 0
                for j in range(nfly[best]):
                    if fly[base + j] > t:
                        fly[base + m] = fly[base + j]
                        fly_row[base + m] = fly_row[base + j]
                        m += 1
                nfly[best] = m
            fly[base + nfly[best]] = end
            fly_row[base + nfly[best]] = k
            nfly[best] += 1
            if end > end_max:
                end_max = end
            if t > span_hi[best]:
                busy[best] += span_hi[best] - span_lo[best]
                span_lo[best] = t
                span_hi[best] = end
            elif end > span_hi[best]:
                span_hi[best] = end
            if record:
                starts[k] = t
                ends[k] = end
            k += 1
            issued = t + 1
            if k >= nq or rows[k * COLS] != ROW_XFER:
                break
            t = _hazard_time(rows, k, issued, boxes, fly, fly_row, base, nfly[best])
            if nfly[best] >= channels:
                t = _issue_time(t, fly, base, nfly[best], channels)
            if other_t >= 0 and (t > other_t or (t == other_t and i == 1)):
                break
        ready[best] = issued
        pc[best] = k
        last_end[best] = end_max
        pending = 1 << best
    top = 0
    max_ready = 0
    blocked = 0
    for e in range(ENGINES):
        if e == DMA_IN or e == DMA_OUT:
            busy[e] += span_hi[e] - span_lo[e]
        if pc[e] < bounds[e + 1]:
            blocked = 1
        if ready[e] > max_ready:
            max_ready = ready[e]
        if last_end[e] > top:
            top = last_end[e]
        out[OUT_BUSY + e] = busy[e]
        out[OUT_PC + e] = pc[e]
    out[OUT_TOP] = top if top > max_ready else max_ready
    out[OUT_MAX_READY] = max_ready
    out[OUT_FIRST] = first
    out[OUT_LAST_WORK] = last_work
    out[OUT_BLOCKED] = blocked


@jit.helper
def _hazard_time(rows: Any, k: int, t: int, boxes: Any, fly: Any, fly_row: Any, base: int,
                 nfly: int) -> int:
    """`t`, or later: the end of each transfer in flight (`fly[base:base + nfly]`, its row in
    `fly_row`) that the transfer of row k conflicts with."""
    b = k * COLS
    lo, hi = rows[b + 3], rows[b + 4]
    if lo == hi:
        return t
    for j in range(nfly):
        end = fly[base + j]
        if end > t and _conflict(boxes, lo, hi, rows[fly_row[base + j] * COLS + 3],
                                 rows[fly_row[base + j] * COLS + 4]):
            t = end
    return t


@jit.helper
def _conflict(boxes: Any, lo: int, hi: int, lo2: int, hi2: int) -> bool:
    """Two transfers' boxes overlap in one memory with either writing."""
    for x in range(lo, hi):
        a = x * BOX
        for y in range(lo2, hi2):
            c = y * BOX
            if (boxes[a] == boxes[c] and boxes[a + 1] == boxes[c + 1]
                    and (boxes[a + 4] != 0 or boxes[c + 4] != 0)
                    and boxes[a + 2] < boxes[c + 3] and boxes[c + 2] < boxes[a + 3]):
                return True
    return False


@jit.kernel(signature="void(i8[:], i8[:], i8[:], i8[:], i8[:], i8, i8[:], i8[:], i8[:], "
                      "i8[:])")
def run_arrays(rows: Any, bounds: Any, sig_off: Any, vals: Any, lats: Any, channels: int,
               boxes: Any, starts: Any, ends: Any, out: Any) -> None:
    """`run` on int64 arrays, its state made here (the compiled form)."""
    keys = sig_off.shape[0] - 1
    sigs = np.zeros(max(sig_off[keys], 1), np.int64)
    nsig = np.zeros(max(keys, 1), np.int64)
    taken = np.zeros(max(keys, 1), np.int64)
    pc = bounds[:ENGINES].copy()
    ready = np.zeros(ENGINES, np.int64)
    busy = np.zeros(ENGINES, np.int64)
    last_end = np.zeros(ENGINES, np.int64)
    fly = np.zeros(ENGINES * (channels + 1), np.int64)
    fly_row = np.zeros(ENGINES * (channels + 1), np.int64)
    nfly = np.zeros(ENGINES, np.int64)
    span_lo = np.full(ENGINES, -1, np.int64)
    span_hi = np.full(ENGINES, -1, np.int64)
    port = np.zeros(max(lats.shape[0], 1), np.int64)
    run(rows, bounds, sig_off, vals, lats, channels, boxes, sigs, nsig, taken, pc, ready,
        busy, last_end, fly, fly_row, nfly, span_lo, span_hi, port, starts, ends, out)


def run_lists(rows: list[int], bounds: list[int], sig_off: list[int], vals: Any,
              lats: Any, channels: int, boxes: Any, starts: list[int], ends: list[int],
              out: list[int]) -> None:
    """`run`'s Python source on lists, its state made here (as `run_arrays` does)."""
    keys = len(sig_off) - 1
    n = max(len(lats), 1)
    fly = ENGINES * (channels + 1)
    run(rows, bounds, sig_off, vals, lats, channels, boxes, [0] * max(sig_off[keys], 1),
        [0] * max(keys, 1), [0] * max(keys, 1), list(bounds[:ENGINES]), [0] * ENGINES,
        [0] * ENGINES, [0] * ENGINES, [0] * fly, [0] * fly, [0] * ENGINES, [-1] * ENGINES,
        [-1] * ENGINES, [0] * n, starts, ends, out)


EMPTY = np.zeros(0, np.int64)


def time_rows(rows: Any, bounds: Any, sig_off: Any, vals: Any, lats: Any, channels: int, *,
              boxes: Any = None, record: bool = False, compiled: bool = False
              ) -> tuple[Any, Any, Any]:
    """(out, starts, ends) of `run` over the queues: the compiled kernel on int64 arrays when
    `compiled` (the caller passes arrays for `rows`, `bounds`, `sig_off`, `boxes`), else its
    Python source on lists. `record`: fill per-row starts and ends."""
    n = int(bounds[ENGINES]) if record else 0
    if compiled:
        starts = np.zeros(n, np.int64) if record else EMPTY
        ends = np.zeros(n, np.int64) if record else EMPTY
        out = np.zeros(OUT_LEN, np.int64)
        run_arrays.compiled(rows, bounds, sig_off, np.asarray(vals, np.int64),
                            np.asarray(lats, np.int64), channels,
                            EMPTY if boxes is None else boxes, starts, ends, out)
        return out, starts, ends
    starts, ends, outl = [0] * n, [0] * n, [0] * OUT_LEN
    run_lists(rows, bounds, sig_off, vals, lats, channels, () if boxes is None else boxes,
              starts, ends, outl)
    return outl, starts, ends
