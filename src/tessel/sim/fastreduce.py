"""The fast path's REDUCE and UNARY closures (``tessel.sim.fastpath`` explains how
instructions become closures), equal to ``vector.exec_reduce`` / ``vector.exec_unary``.

REDUCE along the innermost dimension of int8 / int16 values: SUM as one float32
matrix-vector product with ones when every partial sum is an integer below 2^24 (``count *
max |x - zp| < 2^24``: exact in any summation order), SUMSQ as the float64 squares of
``x - zp`` times ones when ``|x - zp| <= 2^16`` (the reference's clip then changes nothing and
every partial sum is an integer below ``65535 * 2^32 < 2^53``); the saturation to int32 only
where ``count`` times the largest term can exceed it. Other axes and int32 values: int64
passes as the reference. UNARY: numpy int64 passes, ``RECIP`` the rounding division
``(2^fb + x // 2) // x`` and ``RSQRT`` ``isqrt(2^(2 fb) // x)`` (float sqrt then one
correction each way: its error is far below one; up to RSQRT_SCALAR_MAX elements Python's
``isqrt``), both INT32_MAX for ``x <= 0`` and capped at INT32_MAX (docs/isa.md). Views are
kept per state (``Views``). With compiled kernels on (``tessel.sim.jit``) one sample's REDUCE
along d0 and UNARY are instead one compiled loop each (``tessel.sim.kern_reduce``); the forms
here run batches, other axes, and every tile with kernels off.
"""

from __future__ import annotations

from math import isqrt

import numpy as np

from tessel.isa.fields import ReduceOp, UnaryOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import jit, kern_reduce
from tessel.sim.fastpath import Step, Views, _eview
from tessel.sim.matrix import F32_EXACT
from tessel.sim.prepare import Op
from tessel.sim.state import I32, NP_DTYPE, MachineState
from tessel.sim.vector import _span

I64 = np.int64
RSQRT_SCALAR_MAX = 64  # RSQRT of up to this many elements: Python integers (measured faster)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def build_reduce(op: Op) -> Step | None:
    """The REDUCE closure (kernels on: ``kern_reduce``'s where it applies), or None."""
    if jit.enabled():
        step = kern_reduce.build_reduce(op, lambda: numpy_reduce(op))
        if step is not None:
            return step
    return numpy_reduce(op)


def numpy_reduce(op: Op) -> Step | None:
    """The REDUCE closure of numpy passes (the module docstring), or None."""
    f = op.f
    dims = [f["d0"], f["d1"], f["d2"]]
    if 0 in dims:
        return None
    dt = NP_DTYPE[f["dtype"]]
    shape = (f["d2"], f["d1"], f["d0"])
    src_addr, src_s = f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"])
    axis = -1 - f["axis"]
    rop, zp = ReduceOp(f["op"]), f["in_zp"]
    lo, hi = [n for k, n in enumerate(dims) if k != f["axis"]]
    summing = rop in (ReduceOp.SUM, ReduceOp.SUMSQ)
    out_dt = I32 if summing else dt
    dst_addr, dst_s = f["dst_addr"], (f["dst_s1"], f["dst_s0"])
    count = dims[f["axis"]]
    span = _span(dt, zp)
    # SUMSQ: |x - zp| >= 2^16 squares above INT32_MAX (as the reference, clipped to 2^16)
    clip_sq = span > 2**16
    small = dt.itemsize <= 2 and f["axis"] == 0
    if rop == ReduceOp.SUM:
        exact_float = small and count * span < F32_EXACT
        sat = count * span > INT32_MAX
    else:
        exact_float = small and not clip_sq
        sat = count * min(span, 2**16) ** 2 > INT32_MAX
    views = Views(lambda state: (_eview(state.sram, src_addr, shape, src_s, dt),
                                 _eview(state.sram, dst_addr, (hi, lo), dst_s, out_dt)))
    ones, ones64 = np.ones(count, F32), np.ones(count, F64)

    def step_float(state: MachineState) -> None:
        """SUM / SUMSQ of int8 / int16 along d0 in exact float arithmetic."""
        x, dst = views.get(state)
        if rop == ReduceOp.SUM:
            v = np.subtract(x, zp, dtype=F32) if zp else x.astype(F32)
            y = v @ ones
        else:
            v = np.subtract(x, zp, dtype=F64) if zp else x.astype(F64)
            y = np.multiply(v, v, out=v) @ ones64
        if sat:
            if rop == ReduceOp.SUM:
                np.maximum(y, INT32_MIN, out=y)
            np.minimum(y, INT32_MAX, out=y)
        np.copyto(dst, y.reshape(dst.shape), casting="unsafe")  # exact integers

    if summing and exact_float:
        return step_float

    def step(state: MachineState) -> None:
        x, dst = views.get(state)
        if rop == ReduceOp.SUM:  # sum(x - zp) = sum(x) - n zp, exact in int64
            y = np.sum(x, axis=axis, dtype=I64)
            if zp:
                y -= count * zp
        elif rop == ReduceOp.SUMSQ:
            v = np.subtract(x, zp, dtype=I64)
            if clip_sq:
                np.clip(v, -(2**16), 2**16, out=v)
            np.multiply(v, v, out=v)
            y = v.sum(axis=axis)
        else:
            y = x.max(axis=axis) if rop == ReduceOp.MAX else x.min(axis=axis)
        if summing:
            np.maximum(y, INT32_MIN, out=y)
            np.minimum(y, INT32_MAX, out=y)
        dst[...] = y
    return step


def build_unary(op: Op) -> Step | None:
    """The UNARY closure (kernels on: ``kern_reduce``'s where it applies), or None."""
    if jit.enabled():
        step = kern_reduce.build_unary(op, lambda: numpy_unary(op))
        if step is not None:
            return step
    return numpy_unary(op)


def numpy_unary(op: Op) -> Step | None:
    """The UNARY closure of numpy passes (the module docstring), or None."""
    f = op.f
    shape = (f["d2"], f["d1"], f["d0"])
    if 0 in shape:
        return None
    if f["op"] == UnaryOp.RSQRT and shape[0] * shape[1] * shape[2] <= RSQRT_SCALAR_MAX:
        return _rsqrt_scalar(f, shape)
    src = (f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"]))
    dst = (f["dst_addr"], (f["dst_s2"], f["dst_s1"], f["dst_s0"]))
    fb = f["frac_bits"]
    one, two = I64(1 << fb), I64(1 << (2 * fb))
    recip = f["op"] == UnaryOp.RECIP
    views = Views(lambda state: (_eview(state.sram, src[0], shape, src[1], I32),
                                 _eview(state.sram, dst[0], shape, dst[1], I32)))

    def step(state: MachineState) -> None:
        xv, out = views.get(state)
        x = xv.astype(I64)
        bad = x <= 0
        np.maximum(x, 1, out=x)
        if recip:
            y = x >> 1
            y += one
            y //= x
        else:
            y = isqrt64(two // x)
        np.minimum(y, INT32_MAX, out=y)
        y[bad] = INT32_MAX
        np.copyto(out, y, casting="unsafe")
    return step


def _rsqrt_scalar(f: dict, shape: tuple[int, int, int]) -> Step:
    """RSQRT of a few elements in Python integers: ``isqrt(2^(2 fb) // x)`` for ``x > 0``."""
    src = (f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"]))
    dst = (f["dst_addr"], (f["dst_s2"], f["dst_s1"], f["dst_s0"]))
    two = 1 << (2 * f["frac_bits"])
    views = Views(lambda state: (_eview(state.sram, src[0], shape, src[1], I32),
                                 _eview(state.sram, dst[0], shape, dst[1], I32)))

    def step_scalar(state: MachineState) -> None:
        x, out = views.get(state)
        y = [INT32_MAX if v <= 0 else min(isqrt(two // v), INT32_MAX) for v in x.ravel().tolist()]
        out[...] = np.array(y, np.int32).reshape(x.shape)
    return step_scalar


def isqrt64(v: np.ndarray) -> np.ndarray:
    """``isqrt`` of int64 values in ``[0, 2^62]``: the float64 square root is within one of
    it (``v``'s rounding to 53 bits moves the root by less than 2^-22), so one correction each
    way makes it exact (``(r + 1)^2 <= 2^62 + 2^32 + 1`` stays inside int64)."""
    r = np.sqrt(v, dtype=F64).astype(I64)
    r -= r * r > v
    r += (r + 1) * (r + 1) <= v
    return r
