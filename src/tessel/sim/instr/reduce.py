"""REDUCE and UNARY: docs/isa.md's reductions along one axis and int32 reciprocals, compiled
loops in exact int64:

    SUM:    sat32(sum(x - zp))           SUMSQ: sat32(sum(clip(x - zp, -2^16, 2^16)^2))
    MAX / MIN: of x, in x's type
    RECIP:  x > 0: min((2^fb + x // 2) // x, INT32_MAX), else INT32_MAX
    RSQRT:  x > 0: min(isqrt(2^(2 fb) // x), INT32_MAX), else INT32_MAX

int64 holds every sum: at most 65535 terms (a dimension field) of ``|x - zp| <= 2^32`` or of
``2^32`` (a clipped square: ``|x - zp| >= 2^16`` squares above INT32_MAX, so the saturated
sum is INT32_MAX either way). ``(2^fb + x // 2) // x`` is ``rounding_div(2^fb, x)`` for
``x > 0``; ``isqrt`` is the float64 square root corrected by one each way (``v <= 2^62``:
the rounded root is within one of the exact one, and ``(r + 1)^2`` stays inside int64).

REDUCE reads its source as a view whose last axis is the reduced one (any axis, any
strides), UNARY element by element; a destination sharing bytes with the source (for UNARY:
other than being its very pattern) gets a copy of the source first, as docs/isa.md reads
every input before writing.
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fields import ReduceOp, UnaryOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import jit
from tessel.sim.hostmem import I32, Step, Views, bindable, disjoint, view
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import NP_DTYPE, MachineState, extent

I64 = np.int64
_SUM, _SUMSQ, _MAX = int(ReduceOp.SUM), int(ReduceOp.SUMSQ), int(ReduceOp.MAX)
SQ_CLIP = 1 << 16


@jit.kernel
def reduce_rows(x, op, zp, out):
    """``out[s, j, i] = REDUCE(x[s, j, i, :])`` (the module docstring): int32 for SUM /
    SUMSQ, ``x``'s type for MAX / MIN. One loop per op (the tile's: no select per
    element)."""
    ns, n2, n1, n0 = x.shape
    for s in range(ns):
        for i2 in range(n2):
            for i1 in range(n1):
                row = x[s, i2, i1]
                if op == _SUM:
                    t = np.int64(0)
                    for i in range(n0):
                        t += np.int64(row[i])
                    t -= n0 * zp
                    out[s, i2, i1] = min(max(t, INT32_MIN), INT32_MAX)
                elif op == _SUMSQ:
                    t = np.int64(0)
                    for i in range(n0):
                        v = min(max(np.int64(row[i]) - zp, -SQ_CLIP), SQ_CLIP)
                        t += v * v
                    out[s, i2, i1] = min(t, INT32_MAX)
                elif op == _MAX:
                    m = row[0]
                    for i in range(1, n0):
                        m = max(m, row[i])
                    out[s, i2, i1] = m
                else:
                    m = row[0]
                    for i in range(1, n0):
                        m = min(m, row[i])
                    out[s, i2, i1] = m


@jit.kernel
def unary(x, recip, fb, out):
    """``out = RECIP(x)`` or ``RSQRT(x)`` with ``fb`` fraction bits (the module docstring),
    element by element; ``x`` / ``out`` int32 ``(samples, n2, n1, n0)``."""
    one, two = np.int64(1) << fb, np.int64(1) << (2 * fb)
    ns, n2, n1, n0 = x.shape
    for s in range(ns):
        for i2 in range(n2):
            for i1 in range(n1):
                for i0 in range(n0):
                    v = np.int64(x[s, i2, i1, i0])
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
                    out[s, i2, i1, i0] = y


def build_reduce(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    dims = [f["d0"], f["d1"], f["d2"]]
    axis = f["axis"]
    lo, hi = [k for k in range(3) if k != axis]
    dt = NP_DTYPE[f["dtype"]]
    out_dt = I32 if f["op"] in (ReduceOp.SUM, ReduceOp.SUMSQ) else dt
    src_s = [f["src_s0"], f["src_s1"], f["src_s2"]]
    # the source as (hi, lo, axis): the kept dimensions in the destination's order, the
    # reduced one last
    shape = (dims[hi], dims[lo], dims[axis])
    strides = (src_s[hi], src_s[lo], src_s[axis])
    src_addr, dst_addr = f["src_addr"], f["dst_addr"]
    dst_shape, dst_s = (dims[hi], dims[lo]), (f["dst_s1"], f["dst_s0"])
    copy = not disjoint(extent(src_addr, shape, strides, dt.itemsize),
                        extent(dst_addr, dst_shape, dst_s, out_dt.itemsize))
    run, rop, zp = jit.compiled(reduce_rows), I64(f["op"]), I64(f["in_zp"])
    views = Views(lambda state: (view(state.sram, src_addr, shape, strides, dt),
                                 view(state.sram, dst_addr, dst_shape, dst_s, out_dt)))

    def step(state: MachineState) -> None:
        x, y = views.get(state)
        run(x.copy() if copy else x, rop, zp, y)

    def bind(state: MachineState) -> object:
        x, y = views.get(state)
        return None if copy else jit.bound(run, x, rop, zp, y)
    return bindable(step, bind)


def build_unary(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    shape = (f["d2"], f["d1"], f["d0"])
    src = (f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"]))
    dst = (f["dst_addr"], (f["dst_s2"], f["dst_s1"], f["dst_s0"]))
    copy = src != dst and not disjoint(extent(src[0], shape, src[1], 4),
                                       extent(dst[0], shape, dst[1], 4))
    run, recip, fb = jit.compiled(unary), f["op"] == UnaryOp.RECIP, I64(f["frac_bits"])
    views = Views(lambda state: (view(state.sram, src[0], shape, src[1], I32),
                                 view(state.sram, dst[0], shape, dst[1], I32)))

    def step(state: MachineState) -> None:
        x, y = views.get(state)
        run(x.copy() if copy else x, recip, fb, y)

    def bind(state: MachineState) -> object:
        x, y = views.get(state)
        return None if copy else jit.bound(run, x, recip, fb, y)
    return bindable(step, bind)
