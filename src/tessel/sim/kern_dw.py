"""DWCONV as one compiled loop (``tessel.sim.jit``), for the simulator's fast path when kernels
are on; ``tessel.sim.fastdw`` (numpy einsums over a float32 frame) when they are off.

The kernel sums ``(x - in_zp) * w`` over the kernel positions inside the input tile (the
padding contributes 0, as in ``matrix.exec_dwconv``) in int32, exact: at most 15 * 15
products of ``|x - zp| <= 383`` and ``|w| <= 128``, below 2^24. It works an output row at a
time in a row buffer: for each kernel position, a column stride of 1 over dense input columns
is one long run of multiply-adds (the position's weights repeated along the output row once
per call), any other stride a run of ``ch`` per output column; the row then overwrites or is
added to the accumulator (int32, wrapping). Operands are flat views of the memories with
strides in elements (one signature), checked against the memories' sizes once per state.
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fields import AccMode
from tessel.isa.footprint import WINDOW_FACTOR
from tessel.sim import fastdw, jit
from tessel.sim.fastpath import I8, Step, Views, _frame_parts
from tessel.sim.kern_rq import flat
from tessel.sim.prepare import Op
from tessel.sim.state import I32, MachineState, Trap, extent
from tessel.sim.window import Geometry

I64 = np.int64
# the fields of ``dwconv_tile``'s ``geo``, in order
GEO = ("x0", "xsh", "xsw", "w0", "wsh", "wsw", "a0", "asr", "in_h", "in_w", "ch", "kh", "kw",
       "sh", "sw", "dh", "dw", "pt", "pl", "oh", "ow", "zp", "accumulate")


@jit.kernel
def dwconv_tile(x, w, acc, geo):
    """One DWCONV: ``x`` (int8 SRAM), ``w`` (int8 SRAM) and ``acc`` (int32 accumulator) flat,
    ``geo`` the int64 fields of ``GEO`` (offsets and strides in elements)."""
    x0, xsh, xsw, w0, wsh, wsw, a0, asr = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], \
        geo[6], geo[7]
    in_h, in_w, ch, kh, kw, sh, sw = geo[8], geo[9], geo[10], geo[11], geo[12], geo[13], geo[14]
    dh, dw, pt, pl, oh, ow, zp, accumulate = geo[15], geo[16], geo[17], geo[18], geo[19], \
        geo[20], geo[21], geo[22]
    wide = ow * ch
    wt = np.empty((kh * kw, wide), np.int32)  # each position's weights along an output row
    for ky in range(kh):
        for kx in range(kw):
            wr = w[w0 + ky * wsh + kx * wsw:w0 + ky * wsh + kx * wsw + ch]
            for ox in range(ow):
                for c in range(ch):
                    wt[ky * kw + kx, ox * ch + c] = wr[c]
    buf = np.empty(wide, np.int32)
    dense = sw == 1 and xsw == ch  # a position's inputs along the row: one run
    for oy in range(oh):
        buf[:] = 0
        for ky in range(kh):
            iy = oy * sh - pt + ky * dh
            if iy < 0 or iy >= in_h:
                continue
            for kx in range(kw):
                off = kx * dw - pl  # input column of output column ox: ox * sw + off
                lo = max(0, (-off + sw - 1) // sw)
                hi = min(ow, (in_w - 1 - off) // sw + 1)
                if lo >= hi:
                    continue
                wr = wt[ky * kw + kx]
                if dense:
                    base = x0 + iy * xsh + (lo + off) * ch
                    n = (hi - lo) * ch
                    xr = x[base:base + n]
                    br = buf[lo * ch:lo * ch + n]
                    ws = wr[lo * ch:lo * ch + n]
                    for j in range(n):
                        br[j] += (np.int32(xr[j]) - zp) * ws[j]
                    continue
                for ox in range(lo, hi):
                    base = x0 + iy * xsh + (ox * sw + off) * xsw
                    xr = x[base:base + ch]
                    br = buf[ox * ch:ox * ch + ch]
                    for c in range(ch):
                        br[c] += (np.int32(xr[c]) - zp) * wr[c]
        for ox in range(ow):
            base = a0 + (oy * ow + ox) * asr
            ar = acc[base:base + ch]
            br = buf[ox * ch:ox * ch + ch]
            if accumulate:
                for c in range(ch):
                    ar[c] = np.int32(np.int64(ar[c]) + br[c])  # wraps
            else:
                for c in range(ch):
                    ar[c] = br[c]


def build_dwconv(op: Op, sram_bytes: int, cache: dict) -> Step | None:
    """The DWCONV closure: the kernel's when kernels are on (``jit.enabled``, read as the
    program's closures are built), else ``fastdw``'s (``cache``: its weight rows); None for
    the reference handler (a trap, an all-padding tile, no outputs)."""
    if not jit.enabled():
        return fastdw.build_dwconv(op, sram_bytes, cache)
    f = op.f
    g = Geometry.of(f)
    ch = f["ch"]
    rows, cols = g.needed()
    if rows * cols * ch > WINDOW_FACTOR * sram_bytes or _frame_parts(g) is None or \
            0 in (g.oh, g.ow, ch):
        return None
    run = dwconv_tile.compiled
    in_addr, w_addr, acc_addr = f["in_addr"], f["w_addr"], 4 * f["acc_addr"]
    vals = dict(x0=in_addr, xsh=f["in_stride_h"], xsw=f["in_stride_w"], w0=w_addr,
                wsh=g.kw * f["w_stride_k"], wsw=f["w_stride_k"], a0=f["acc_addr"],
                asr=f["acc_stride"], in_h=g.in_h, in_w=g.in_w, ch=ch, kh=g.kh, kw=g.kw,
                sh=g.sh, sw=g.sw, dh=g.dh, dw=g.dw, pt=g.pt, pl=g.pl, oh=g.oh, ow=g.ow,
                zp=f["in_zp"], accumulate=int(f["mode"] == AccMode.ACCUMULATE))
    geo = np.array([vals[k] for k in GEO], I64)
    x_lo, x_end = extent(in_addr, (g.in_h, g.in_w, ch), (vals["xsh"], vals["xsw"], 1), 1)
    w_lo, w_end = extent(w_addr, (g.kh, g.kw, ch), (vals["wsh"], vals["wsw"], 1), 1)
    acc_lo, acc_end = extent(acc_addr, (g.oh * g.ow, ch), (4 * vals["asr"], 4), 4)

    def operands(state: MachineState, sample: int | None = None) -> tuple:
        if min(x_lo, w_lo, acc_lo) < 0 or max(x_end, w_end) > state.sram.shape[-1] or \
                acc_end > state.acc_bytes.shape[-1]:
            raise Trap("operand outside its memory")  # the reference handler says which
        x = flat(state, "sram", 0, I8, sample)
        return x, x, flat(state, "acc_bytes", 0, I32, sample)
    views = Views(operands)

    def step(state: MachineState) -> None:
        if state.batch is None:
            x, w, acc = views.get(state)
            run(x, w, acc, geo)
            return
        for n in range(state.sram.shape[0]):  # each sample's weights: its own
            x, w, acc = operands(state, n)
            run(x, w, acc, geo)
    return step
