"""POOL: docs/isa.md's max / average pooling over an NHWC tile, one compiled loop.

Per output element, over the kernel positions inside the input tile: MAX the largest value,
AVG the int64 sum divided by the number of those positions with Tessel's division rule
(``rounding_div``: halves away from zero, docs/numerics.md); then the clamp. A window with no
position inside the tile traps (decided from the fields alone, when the step is built: the
first such output in loop order is named). The kernel reads the SRAM as a flat array of
elements (strides in elements); an operand whose strides are not whole elements, or an output
that shares bytes with the input, goes through dense host copies.
"""

from __future__ import annotations

import inspect

import numpy as np

from tessel.isa.fields import PoolOp
from tessel.isa.fixedpoint import INT32_MIN
from tessel.sim import jit
from tessel.sim.hostmem import Step, Views, disjoint, flat_rows, view
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import NP_DTYPE, MachineState, Trap, extent


@jit.kernel
def pool_tile(x, out, x0, xsh, xsw, o0, osh, osw, in_h, in_w, ch, kh, kw, sh, sw, dh, dw, pt, pl,
              oh, ow, is_max, lo, hi):
    """One POOL on every sample: ``x`` and ``out`` flat ``(samples, elements)`` memories of
    the operand type; then the geometry by name (offsets and strides in elements)."""
    acc = np.empty(ch, np.int64)
    for s in range(x.shape[0]):
        xs, os = x[s], out[s]
        for oy in range(oh):
            for ox in range(ow):
                acc[:] = INT32_MIN if is_max else 0
                n = 0
                for ky in range(kh):
                    iy = oy * sh - pt + ky * dh
                    if iy < 0 or iy >= in_h:
                        continue
                    for kx in range(kw):
                        ix = ox * sw - pl + kx * dw
                        if ix < 0 or ix >= in_w:
                            continue
                        n += 1
                        base = x0 + iy * xsh + ix * xsw
                        xr = xs[base:base + ch]
                        if is_max:
                            for c in range(ch):
                                acc[c] = max(acc[c], np.int64(xr[c]))
                        else:
                            for c in range(ch):
                                acc[c] += xr[c]
                base = o0 + oy * osh + ox * osw
                orow = os[base:base + ch]
                for c in range(ch):
                    y = acc[c]
                    if not is_max:  # rounding_div(y, n): sign(y) floor((|y| + n // 2) / n)
                        mag = (abs(y) + n // 2) // n
                        y = -mag if y < 0 else mag
                    orow[c] = min(max(y, lo), hi)


# the geometry arguments of ``pool_tile``, in order
GEO = tuple(inspect.signature(pool_tile.py).parameters)[2:]


def empty_window(f: dict) -> tuple[int, int] | None:
    """The first output (in loop order) whose window has no position inside the tile."""
    for oy in range(f["out_h"]):
        if not any(0 <= oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"] < f["in_h"]
                   for ky in range(f["kh"])):
            return oy, 0
        for ox in range(f["out_w"]):
            if not any(0 <= ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"] < f["in_w"]
                       for kx in range(f["kw"])):
                return oy, ox
    return None


def build(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    empty = empty_window(f)
    if empty is not None:
        msg = (f"POOL: the window of output {empty} has no position inside the "
               f"{f['in_h']}x{f['in_w']} input tile")

        def trap(state: MachineState) -> None:
            raise Trap(msg)
        return trap
    ch, dt = f["ch"], NP_DTYPE[f["dtype"]]
    it = dt.itemsize
    in_shape, out_shape = (f["in_h"], f["in_w"], ch), (f["out_h"], f["out_w"], ch)
    in_s = (f["in_stride_h"], f["in_stride_w"], it)
    out_s = (f["out_stride_h"], f["out_stride_w"], it)
    in_addr, out_addr = f["in_addr"], f["out_addr"]
    # whole elements of one flat view, and an output the input does not overlap: in place
    copy_in = (in_s[0] % it or in_s[1] % it or in_addr % it != out_addr % it
               or not disjoint(extent(in_addr, in_shape, in_s, it),
                               extent(out_addr, out_shape, out_s, it)))
    copy_out = bool(out_s[0] % it or out_s[1] % it)
    vals = dict(x0=in_addr // it, xsh=in_s[0] // it, xsw=in_s[1] // it, o0=out_addr // it,
                osh=out_s[0] // it, osw=out_s[1] // it, in_h=f["in_h"], in_w=f["in_w"], ch=ch,
                kh=f["kh"], kw=f["kw"], sh=f["stride_h"], sw=f["stride_w"], dh=f["dil_h"],
                dw=f["dil_w"], pt=f["pad_top"], pl=f["pad_left"], oh=f["out_h"],
                ow=f["out_w"], is_max=int(f["op"] == PoolOp.MAX), lo=f["act_min"],
                hi=f["act_max"])
    if copy_in:  # the input from a dense copy
        vals.update(x0=0, xsh=f["in_w"] * ch, xsw=ch)
    if copy_out:  # the output into a dense buffer, copied out
        vals.update(o0=0, osh=f["out_w"] * ch, osw=ch)
    geo = tuple(int(vals[k]) for k in GEO)
    run = jit.compiled(pool_tile)

    def make(state: MachineState) -> tuple:
        mem = flat_rows(state, "sram", dt, out_addr % it)
        return (mem, view(state.sram, in_addr, in_shape, in_s, dt) if copy_in else None,
                view(state.sram, out_addr, out_shape, out_s, dt) if copy_out else None)
    views = Views(make)

    def step(state: MachineState) -> None:
        mem, x, y = views.get(state)
        ns = mem.shape[0]
        src = mem if x is None else x.copy().reshape(ns, -1)
        if y is None:
            run(src, mem, *geo)
            return
        out = np.empty((ns, int(np.prod(out_shape))), dt)
        run(src, out, *geo)
        y[...] = out.reshape(y.shape)
    return step
