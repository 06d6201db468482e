"""The timing loop of a step's program (`schedule.estimate._run`) as one compiled kernel
(``tessel.sim.jit``): the same rules, op by op, on the program flattened to an int64 table.

`schedule.estimate._run` stays the reference (and what runs when kernels are off,
``TESSEL_SIM_KERNELS=0``); tests/unit/ops/test_step_kernel.py checks both give the same
cycles and busy cycles on every program of the zoo's searches. The design-space exploration
times each candidate's arch-free program once per NPU, so this loop is most of what a point
costs once programs are shared across points (docs/analysis.md).

Table rows (one per op, the engines' queues one after another; ``starts[e]``: engine e's first
row, ``starts[NUM_ENGINES]``: the end), 7 columns, the first the row's kind:

    WAIT    0  key
    SIGNAL  1  key  wake mask
    WORK    2  term
    XFER    3  term memory
    TILE    4  wait key  second wait key or -1  term  signal key or -1  signal key or -1  wake mask
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fields import Engine
from tessel.isa.limits import ALL_ENGINES_MASK, NUM_ENGINES
from tessel.sim import jit

COLS = 7
WAIT, SIGNAL, WORK, XFER, TILE = range(5)  # the row kinds (column 0)
# engine numbers as plain ints (numba freezes module-level ints and tuples into the kernel)
DMA_IN, DMA_OUT = int(Engine.DMA_IN), int(Engine.DMA_OUT)
# compute engines first, then the DMA engines' control ops
ORDER = tuple(int(e) for e in (Engine.MATRIX, Engine.VECTOR, Engine.DMA_IN, Engine.DMA_OUT))


@jit.helper
def _issue_time(ready: int, fly: np.ndarray, nfly: int, channels: int) -> int:
    """step._issue_time over the first `nfly` entries of `fly` (the channels-th largest end
    after `ready`, or `ready` if fewer are in flight then)."""
    if nfly < channels:
        return ready
    n = 0
    low = np.int64(-1)
    for i in range(nfly):
        x = fly[i]
        if x > ready:
            n += 1
            if low < 0 or x < low:
                low = x
    if n < channels:
        return ready
    if n == channels:  # (the loop keeps at most `channels` in flight: always this case)
        return low
    live = np.empty(n, np.int64)
    n = 0
    for i in range(nfly):
        if fly[i] > ready:
            live[n] = fly[i]
            n += 1
    live = np.sort(live)
    return live[n - channels]


@jit.kernel(signature="void(i8[:, :], i8[:], i8[:], i8[:], i8[:], i8, i8[:])")
def run(ops: np.ndarray, starts: np.ndarray, sig_off: np.ndarray, vals: np.ndarray,
        lats: np.ndarray, channels: int, out: np.ndarray) -> None:
    """schedule.estimate._run: out[0] = total cycles, out[1 + e] = engine e's busy cycles."""
    nk = sig_off.shape[0] - 1
    sigs = np.empty(max(sig_off[nk], 1), np.int64)
    nsig = np.zeros(max(nk, 1), np.int64)
    taken = np.zeros(max(nk, 1), np.int64)
    pc = starts[:NUM_ENGINES].copy()
    ready = np.zeros(NUM_ENGINES, np.int64)
    busy = np.zeros(NUM_ENGINES, np.int64)
    last_end = np.zeros(NUM_ENGINES, np.int64)
    fly = np.zeros((NUM_ENGINES, channels + 1), np.int64)
    nfly = np.zeros(NUM_ENGINES, np.int64)
    span_lo = np.full(NUM_ENGINES, -1, np.int64)
    span_hi = np.full(NUM_ENGINES, -1, np.int64)
    port = np.zeros(lats.shape[0], np.int64)
    first = np.int64(1) << 62
    pending = ALL_ENGINES_MASK
    while True:
        while pending:
            for oi in range(NUM_ENGINES):
                e = ORDER[oi]
                if not (pending >> e) & 1:
                    continue
                pending &= ~(1 << e)
                k, r, nq = pc[e], ready[e], starts[e + 1]
                while k < nq:
                    kind = ops[k, 0]
                    if kind == TILE:
                        w = ops[k, 1]
                        t0 = taken[w]
                        if t0 >= nsig[w]:
                            break
                        w1 = ops[k, 2]
                        if w1 >= 0:
                            t1 = taken[w1]
                            if t1 >= nsig[w1]:
                                break
                            x = sigs[sig_off[w] + t0]
                            r = (x if x > r else r) + 1
                            x = sigs[sig_off[w1] + t1]
                            r = (x if x > r else r) + 1
                            taken[w] = t0 + 1
                            taken[w1] = t1 + 1
                        else:
                            x = sigs[sig_off[w] + t0]
                            r = (x if x > r else r) + 1
                            taken[w] = t0 + 1
                        c = vals[ops[k, 3]]
                        if c:
                            if r < first:
                                first = r
                            r += c
                            busy[e] += c
                        for j in (4, 5):
                            s = ops[k, j]
                            if s >= 0:
                                r += 1
                                sigs[sig_off[s] + nsig[s]] = r
                                nsig[s] += 1
                        pending |= ops[k, 6]
                    elif kind == WAIT:
                        a = ops[k, 1]
                        t0 = taken[a]
                        if t0 >= nsig[a]:
                            break
                        x = sigs[sig_off[a] + t0]
                        r = (x if x > r else r) + 1
                        taken[a] = t0 + 1
                    elif kind == SIGNAL:
                        x = last_end[e]
                        r = (x if x > r else r) + 1
                        s = ops[k, 1]
                        sigs[sig_off[s] + nsig[s]] = r
                        nsig[s] += 1
                        pending |= ops[k, 2]
                    elif kind == WORK:
                        c = vals[ops[k, 1]]
                        if c:
                            if r < first:
                                first = r
                            r += c
                            busy[e] += c
                    else:
                        break
                    k += 1
                pc[e] = k
                ready[e] = r
        c0 = c1 = np.int64(-1)
        for i in range(2):
            e = DMA_IN if i == 0 else DMA_OUT
            k = pc[e]
            if k < starts[e + 1] and ops[k, 0] == XFER:
                t = ready[e] if nfly[e] < channels else _issue_time(ready[e], fly[e], nfly[e],
                                                                      channels)
                if i == 0:
                    c0 = t
                else:
                    c1 = t
        if c0 < 0 and c1 < 0:
            break
        i = 0 if c1 < 0 or 0 <= c0 <= c1 else 1  # DMA_IN first on a tie
        best = DMA_IN if i == 0 else DMA_OUT
        t = c0 if i == 0 else c1
        other_t = c1 if i == 0 else c0
        k, nq = pc[best], starts[best + 1]
        end_max = last_end[best]
        issued = t
        while True:
            ti, mem = ops[k, 1], ops[k, 2]
            lat = lats[mem]
            data = vals[ti] - lat
            if t < first:
                first = t
            x = t + lat
            p = port[mem]
            end = (x if x > p else p) + data
            port[mem] = end
            if nfly[best] >= channels:
                m = 0
                for j in range(nfly[best]):
                    if fly[best, j] > t:
                        fly[best, m] = fly[best, j]
                        m += 1
                nfly[best] = m
            fly[best, nfly[best]] = end
            nfly[best] += 1
            if end > end_max:
                end_max = end
            if t > span_hi[best]:
                busy[best] += span_hi[best] - span_lo[best]
                span_lo[best] = t
                span_hi[best] = end
            elif end > span_hi[best]:
                span_hi[best] = end
            k += 1
            issued = t + 1
            if k >= nq or ops[k, 0] != XFER:
                break
            t = issued if nfly[best] < channels else _issue_time(issued, fly[best], nfly[best],
                                                                 channels)
            if other_t >= 0 and (t > other_t or (t == other_t and i == 1)):
                break
        ready[best] = issued
        pc[best] = k
        last_end[best] = end_max
        pending = 1 << best
    for e in (DMA_IN, DMA_OUT):
        busy[e] += span_hi[e] - span_lo[e]
    for e in range(NUM_ENGINES):
        if pc[e] < starts[e + 1]:
            out[0] = -1  # the token protocol does not complete
            return
    top = max(ready.max(), last_end.max())
    out[0] = top - min(first, ready.max())
    for e in range(NUM_ENGINES):
        out[1 + e] = busy[e]
