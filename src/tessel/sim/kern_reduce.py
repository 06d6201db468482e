"""REDUCE (along the innermost dimension) and UNARY as compiled loops (``tessel.sim.jit``), for
the simulator's fast path when kernels are on; ``tessel.sim.fastreduce``'s numpy forms when
they are off, for batches and for REDUCE along another axis.

Why: a transformer's REDUCE and UNARY tiles are small (a layer norm's 22 x 192 sums, a
softmax's 40 row maxima, 22-40 reciprocals or reciprocal square roots), so their numpy forms
are a few passes at numpy's per-call floor each: 7-12 us a REDUCE, 13-17 us a UNARY on ViT.
One loop is one call's floor.

The kernels are ``vector.exec_reduce`` / ``exec_unary`` written out in exact int64:

    SUM:    sat32(sum(x - zp))           SUMSQ: sat32(sum(clip(x - zp, -2^16, 2^16)^2))
    MAX / MIN: of x, in x's type
    RECIP:  x > 0: min((2^fb + x // 2) // x, INT32_MAX), else INT32_MAX
    RSQRT:  x > 0: min(isqrt(2^(2 fb) // x), INT32_MAX), else INT32_MAX

int64 holds every sum: at most 65535 terms (a dimension field) of ``|x - zp| <= 2^32`` or of
``2^32`` (a clipped square). ``isqrt`` is the float64 square root corrected by one each way
(``fastreduce.isqrt64``'s argument). A row is reduced into a local before its one store and a
UNARY element is read before it is written, so the caller passes a destination that does not
overlap the source (or is the same pattern, for UNARY: ``build_unary``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tessel.isa.fields import ReduceOp, UnaryOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import jit
from tessel.sim.fastpath import Step, Views, _eview, with_batches
from tessel.sim.prepare import Op
from tessel.sim.state import I32, NP_DTYPE, MachineState, extent
from tessel.sim.vector import exec_reduce, exec_unary

I64 = np.int64
_SUM, _SUMSQ, _MAX = int(ReduceOp.SUM), int(ReduceOp.SUMSQ), int(ReduceOp.MAX)
SQ_CLIP = 1 << 16  # SUMSQ's clip of |x - zp| (vector.exec_reduce)


@jit.kernel
def reduce_rows(x, op, zp, out):
    """``out[i2, i1] = REDUCE(x[i2, i1, :])`` (the module docstring), ``x`` 3-D, ``out`` 2-D:
    int32 for SUM / SUMSQ, ``x``'s type for MAX / MIN. One loop per op (the op is the same
    for the whole tile: no select per element)."""
    n2, n1, n0 = x.shape
    for i2 in range(n2):
        for i1 in range(n1):
            row = x[i2, i1]
            if op == _SUM:
                s = np.int64(0)
                for i in range(n0):
                    s += np.int64(row[i])
                s -= n0 * zp
                out[i2, i1] = min(max(s, INT32_MIN), INT32_MAX)
            elif op == _SUMSQ:
                s = np.int64(0)
                for i in range(n0):
                    v = min(max(np.int64(row[i]) - zp, -SQ_CLIP), SQ_CLIP)
                    s += v * v
                out[i2, i1] = min(s, INT32_MAX)
            elif op == _MAX:
                m = row[0]
                for i in range(1, n0):
                    m = max(m, row[i])
                out[i2, i1] = m
            else:
                m = row[0]
                for i in range(1, n0):
                    m = min(m, row[i])
                out[i2, i1] = m


@jit.kernel
def unary(x, recip, fb, out):
    """``out = RECIP(x)`` or ``RSQRT(x)`` with ``fb`` fraction bits (the module docstring),
    element by element; ``x`` / ``out`` int32, 3-D."""
    one, two = np.int64(1) << fb, np.int64(1) << (2 * fb)
    n2, n1, n0 = x.shape
    for i2 in range(n2):
        for i1 in range(n1):
            for i0 in range(n0):
                v = np.int64(x[i2, i1, i0])
                y = np.int64(INT32_MAX)
                if v > 0:
                    if recip:
                        r = (one + (v >> 1)) // v
                    else:
                        t = two // v
                        r = np.int64(np.sqrt(np.float64(t)))
                        if r * r > t:
                            r -= 1
                        if (r + 1) * (r + 1) <= t:
                            r += 1
                    y = min(r, y)
                out[i2, i1, i0] = y


def build_reduce(op: Op, numpy_step: Callable[[], Step | None]) -> Step | None:
    """REDUCE along d0 by ``reduce_rows`` on one sample, when the destination misses the
    source's bytes; None: ``numpy_step()`` decides (another axis, an overlap)."""
    f = op.f
    shape = (f["d2"], f["d1"], f["d0"])
    if 0 in shape or f["axis"] != 0:
        return None
    dt = NP_DTYPE[f["dtype"]]
    out_dt = I32 if f["op"] in (ReduceOp.SUM, ReduceOp.SUMSQ) else dt
    src = (f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"]))
    dst = (f["dst_addr"], (f["dst_s1"], f["dst_s0"]))
    lo, hi = extent(src[0], shape, src[1], dt.itemsize)
    dlo, dhi = extent(dst[0], shape[:2], dst[1], out_dt.itemsize)
    if not (hi <= dlo or dhi <= lo):
        return None
    run, rop, zp = reduce_rows.compiled, I64(f["op"]), I64(f["in_zp"])
    views = Views(lambda state: (_eview(state.sram, src[0], shape, src[1], dt),
                                 _eview(state.sram, dst[0], shape[:2], dst[1], out_dt)))

    def step(state: MachineState) -> None:
        x, y = views.get(state)
        run(x, rop, zp, y)
    return with_batches(step, numpy_step, lambda s: exec_reduce(s, f))


def build_unary(op: Op, numpy_step: Callable[[], Step | None]) -> Step | None:
    """UNARY by ``unary`` on one sample, when the destination is the source's pattern or
    misses its bytes; None: ``numpy_step()`` decides."""
    f = op.f
    shape = (f["d2"], f["d1"], f["d0"])
    if 0 in shape:
        return None
    src = (f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"]))
    dst = (f["dst_addr"], (f["dst_s2"], f["dst_s1"], f["dst_s0"]))
    lo, hi = extent(src[0], shape, src[1], 4)
    dlo, dhi = extent(dst[0], shape, dst[1], 4)
    if not (src == dst or hi <= dlo or dhi <= lo):
        return None
    run, recip, fb = unary.compiled, f["op"] == UnaryOp.RECIP, I64(f["frac_bits"])
    views = Views(lambda state: (_eview(state.sram, src[0], shape, src[1], I32),
                                 _eview(state.sram, dst[0], shape, dst[1], I32)))

    def step(state: MachineState) -> None:
        x, y = views.get(state)
        run(x, recip, fb, y)
    return with_batches(step, numpy_step, lambda s: exec_unary(s, f))
