"""POOL as one compiled loop (``tessel.sim.jit``), for the simulator's fast path when kernels
are on; ``fastpath._build_pool`` (numpy passes over a padded frame) when they are off.

Per output element, over the kernel positions inside the input tile (every window has one:
the builder leaves tiles with an all-padding window to the reference, which traps): MAX the
largest value (the reference's padding, INT32_MIN, never wins), AVG the int64 sum divided by
the number of those positions with Tessel's division rule (``rounding_div``: halves away
from zero, docs/numerics.md); then the clamp. Operands are flat views of the SRAM with
strides in elements (one signature per type, int8 and int16), checked once per state.
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fields import PoolOp
from tessel.isa.fixedpoint import INT32_MIN
from tessel.isa.footprint import WINDOW_FACTOR
from tessel.sim import jit
from tessel.sim.fastpath import Step, Views, _build_pool, _frame_parts
from tessel.sim.kern_rq import flat
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import NP_DTYPE, MachineState, Trap, extent
from tessel.sim.window import Geometry

I64 = np.int64
# the fields of ``pool_tile``'s ``geo``, in order
GEO = ("x0", "xsh", "xsw", "o0", "osh", "osw", "in_h", "in_w", "ch", "kh", "kw", "sh", "sw",
       "dh", "dw", "pt", "pl", "oh", "ow", "is_max", "lo", "hi")


@jit.kernel
def pool_tile(x, out, geo):
    """One POOL: ``x`` and ``out`` the SRAM as flat arrays of the operand type, ``geo`` the
    int64 fields of ``GEO`` (offsets and strides in elements)."""
    x0, xsh, xsw, o0, osh, osw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    in_h, in_w, ch, kh, kw, sh, sw = geo[6], geo[7], geo[8], geo[9], geo[10], geo[11], geo[12]
    dh, dw, pt, pl, oh, ow = geo[13], geo[14], geo[15], geo[16], geo[17], geo[18]
    is_max, lo, hi = geo[19], geo[20], geo[21]
    acc = np.empty(ch, np.int64)
    for oy in range(oh):
        for ox in range(ow):
            acc[:] = INT32_MIN if is_max else 0
            n_rows = 0
            n_cols = 0
            for ky in range(kh):
                iy = oy * sh - pt + ky * dh
                if iy < 0 or iy >= in_h:
                    continue
                n_rows += 1
                n_cols = 0
                for kx in range(kw):
                    ix = ox * sw - pl + kx * dw
                    if ix < 0 or ix >= in_w:
                        continue
                    n_cols += 1
                    base = x0 + iy * xsh + ix * xsw
                    xr = x[base:base + ch]
                    if is_max:
                        for c in range(ch):
                            acc[c] = max(acc[c], np.int64(xr[c]))
                    else:
                        for c in range(ch):
                            acc[c] += xr[c]
            n = n_rows * n_cols
            base = o0 + oy * osh + ox * osw
            orow = out[base:base + ch]
            for c in range(ch):
                y = acc[c]
                if not is_max:  # rounding_div(y, n): sign(y) floor((|y| + n // 2) / n)
                    mag = (abs(y) + n // 2) // n
                    y = -mag if y < 0 else mag
                orow[c] = min(max(y, lo), hi)


def build_pool(op: Op, prep: PreparedProgram) -> Step | None:
    """The POOL closure: the kernel's when kernels are on (``jit.enabled``, read as the
    program's closures are built) and the strides are whole elements, else
    ``fastpath._build_pool``'s; None for the reference handler (a trap, an all-padding
    window, no outputs)."""
    f = op.f
    sram_bytes = prep.arch.onchip.sram_bytes
    g = Geometry.of(f)
    ch, dt = f["ch"], NP_DTYPE[f["dtype"]]
    it = dt.itemsize
    strides = (f["in_stride_h"], f["in_stride_w"], f["out_stride_h"], f["out_stride_w"])
    x_lo, x_end = extent(f["in_addr"], (g.in_h, g.in_w, ch), strides[:2] + (it,), it)
    o_lo, o_end = extent(f["out_addr"], (g.oh, g.ow, ch), strides[2:] + (it,), it)
    # the kernel writes as it goes: an output the input overlaps takes the numpy form (which
    # reads the whole tile first, as the reference does)
    if not jit.enabled() or any(s % it for s in strides) or (x_lo < o_end and o_lo < x_end) \
            or f["in_addr"] % it != f["out_addr"] % it:
        return _build_pool(op, sram_bytes)
    rows, cols = g.needed()
    vr, vc = g.valid_counts()
    if rows * cols * ch > WINDOW_FACTOR * sram_bytes or _frame_parts(g) is None or \
            0 in (g.oh, g.ow, ch) or not vr.all() or not vc.all():
        return None
    run = pool_tile.compiled
    vals = dict(x0=f["in_addr"] // it, xsh=strides[0] // it, xsw=strides[1] // it,
                o0=f["out_addr"] // it, osh=strides[2] // it, osw=strides[3] // it,
                in_h=g.in_h, in_w=g.in_w, ch=ch, kh=g.kh, kw=g.kw, sh=g.sh, sw=g.sw, dh=g.dh,
                dw=g.dw, pt=g.pt, pl=g.pl, oh=g.oh, ow=g.ow,
                is_max=int(f["op"] == PoolOp.MAX), lo=f["act_min"], hi=f["act_max"])
    geo = np.array([vals[k] for k in GEO], I64)
    addr = f["in_addr"]

    def operands(state: MachineState, sample: int | None = None) -> np.ndarray:
        if min(x_lo, o_lo) < 0 or max(x_end, o_end) > state.sram.shape[-1]:
            raise Trap("operand outside the SRAM")  # the reference handler says which
        return flat(state, "sram", addr, dt, sample)
    views = Views(operands)

    def step(state: MachineState) -> None:
        if state.batch is None:
            mem = views.get(state)
            run(mem, mem, geo)
            return
        for n in range(state.sram.shape[0]):
            mem = operands(state, n)
            run(mem, mem, geo)
    return step
