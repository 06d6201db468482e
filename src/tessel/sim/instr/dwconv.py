"""DWCONV: docs/isa.md's depthwise convolution tile, one compiled loop.

The kernel sums ``(x - in_zp) * w`` over the kernel positions inside the input tile (the
padding contributes 0) in int32, exact: at most 15 * 15 products of ``|x - zp| <= 383`` and
``|w| <= 128``, below 2^24. It works an output row at a time in a row buffer: for each kernel
position, a column stride of 1 over dense input columns is one long run of multiply-adds
(the position's weights repeated along the output row once per call), any other stride a run
of ``ch`` per output column (the position's weights once per call); the row then overwrites
or is added to the accumulator (int32, wrapping). Operands are flat views of every sample's
memories (int8 SRAM, int32 accumulator; offsets and strides in elements), so a batch is a
loop over its samples, each with its own weights. int4 weights (``w_type`` I4) are unpacked
per sample into a dense int8 ``(kh kw, ch)`` block first, which the loop reads in place of
the SRAM.
"""

from __future__ import annotations

import inspect

import numpy as np

from tessel.isa.fields import AccMode
from tessel.isa.instrs.matrix import WeightType
from tessel.sim import jit
from tessel.sim.hostmem import I8, I32, Step, Views, flat_rows
from tessel.sim.instr.conv import unpack_int4
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import MachineState


@jit.helper
def wrap32(v):
    """``v`` modulo 2^32 in int32's range."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@jit.kernel
def dwconv_tile(x, w, acc, x0, xsh, xsw, w0, wsh, wsw, a0, asr, in_h, in_w, ch, kh, kw, sh, sw, dh,
                dw, pt, pl, oh, ow, zp, accumulate):
    """One DWCONV on every sample: ``x`` (int8 SRAM), ``w`` (int8 memory holding the weights:
    the SRAM, or int4 weights unpacked) and ``acc`` (int32 accumulator) flat ``(samples,
    elements)``; then the geometry by name (offsets and strides in elements)."""
    wide = ow * ch
    dense = sw == 1 and xsw == ch  # a position's inputs along the row: one run
    # dense: each position's weights repeated along an output row; else each position's
    # ``ch`` weights once
    wt = np.empty((kh * kw, wide if dense else ch), np.int32)
    buf = np.empty(wide, np.int32)
    for s in range(x.shape[0]):
        xs, wm, accs = x[s], w[s], acc[s]
        for ky in range(kh):
            for kx in range(kw):
                wr = wm[w0 + ky * wsh + kx * wsw:w0 + ky * wsh + kx * wsw + ch]
                for ox in range(ow if dense else 1):
                    for c in range(ch):
                        wt[ky * kw + kx, ox * ch + c] = wr[c]
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
                        xr = xs[base:base + n]
                        br = buf[lo * ch:lo * ch + n]
                        ws = wr[lo * ch:lo * ch + n]
                        for j in range(n):
                            br[j] += (np.int32(xr[j]) - zp) * ws[j]
                        continue
                    for ox in range(lo, hi):
                        base = x0 + iy * xsh + (ox * sw + off) * xsw
                        xr = xs[base:base + ch]
                        br = buf[ox * ch:ox * ch + ch]
                        for c in range(ch):
                            br[c] += (np.int32(xr[c]) - zp) * wr[c]
            for ox in range(ow):
                base = a0 + (oy * ow + ox) * asr
                ar = accs[base:base + ch]
                br = buf[ox * ch:ox * ch + ch]
                if accumulate:
                    for c in range(ch):
                        ar[c] = wrap32(np.int64(ar[c]) + br[c])
                else:
                    for c in range(ch):
                        ar[c] = br[c]


# the geometry arguments of ``dwconv_tile``, in order
GEO = tuple(inspect.signature(dwconv_tile.py).parameters)[3:]


def build(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    vals = dict(x0=f["in_addr"], xsh=f["in_stride_h"], xsw=f["in_stride_w"], w0=f["w_addr"],
                wsh=f["kw"] * f["w_stride_k"], wsw=f["w_stride_k"], a0=f["acc_addr"],
                asr=f["acc_stride"], in_h=f["in_h"], in_w=f["in_w"], ch=f["ch"], kh=f["kh"],
                kw=f["kw"], sh=f["stride_h"], sw=f["stride_w"], dh=f["dil_h"], dw=f["dil_w"],
                pt=f["pad_top"], pl=f["pad_left"], oh=f["out_h"], ow=f["out_w"],
                zp=f["in_zp"], accumulate=int(f["mode"] == AccMode.ACCUMULATE))
    nibbles = None
    if f["w_type"] == WeightType.I4:  # read from the unpacked block: dense, from 0
        t, c = np.ix_(np.arange(f["kh"] * f["kw"]), np.arange(f["ch"]))
        nibbles = (2 * f["w_addr"] + t * f["w_stride_k"] + c).reshape(-1)
        vals.update(w0=0, wsh=f["kw"] * f["ch"], wsw=f["ch"])
    geo = tuple(int(vals[k]) for k in GEO)
    run = jit.compiled(dwconv_tile)
    views = Views(lambda state: (flat_rows(state, "sram", I8), flat_rows(state, "acc_bytes", I32)))

    def step(state: MachineState) -> None:
        x, acc = views.get(state)
        w = x if nibbles is None else np.stack([unpack_int4(row, nibbles) for row in x])
        run(x, w, acc, *geo)
    return step
