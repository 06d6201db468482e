"""Functional semantics of the vector engine's instructions (docs/isa.md section 4), bit-exact.

Requantisation and rounding follow ``tessel.isa.fixedpoint``; the hot paths (REQUANT,
ELTWISE) use its unchecked in-place form ``tessel.sim.fastfix``, tested equal to it;
intermediates are int64 and clipped where the pseudocode's unbounded integers could overflow
int64 without changing the saturated result (documented at each clip).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import AccSrc, DType, EltOp, LutMode, ParamMode, PoolOp, ReduceOp, UnaryOp
from tessel.isa.fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    MAX_SHIFT,
    MIN_SHIFT,
    rounding_div,
)
from tessel.sim.fastfix import mbqm_inplace, requant_apply, requant_plan
from tessel.sim.matrix import uniform
from tessel.sim.state import I32, NP_DTYPE, MachineState, Trap, acc_view, nd, pattern
from tessel.sim.window import Geometry, check_nonempty, input_tile, windows

F = dict[str, Any]
I64 = np.int64


def _clamp(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Clamp a freshly computed int64 array in place (np.clip's wrapper costs more than the work
    on the small arrays of one instruction)."""
    np.maximum(x, lo, out=x)
    np.minimum(x, hi, out=x)
    return x


def _sat32(x: np.ndarray) -> np.ndarray:
    return _clamp(np.asarray(x, I64), INT32_MIN, INT32_MAX)


def _dims(f: F, n: int) -> list[int]:
    return [f[f"d{k}"] for k in range(n)]


def _operand(state: MachineState, f: F, pre: str, n: int, dtype: np.dtype) -> np.ndarray:
    return pattern(state.sram, f[f"{pre}_addr"], _dims(f, n),
                   [f[f"{pre}_s{k}"] for k in range(n)], dtype)


def exec_requant(state: MachineState, f: F) -> None:
    rows, ch = f["rows"], f["ch"]
    p = ch if f["param_mode"] == ParamMode.PER_CHANNEL else 1
    params = nd(state.sram, f["param_addr"], (3, p), (4 * p, 4), I32)
    if params.ndim == 3:  # a batch: the parameters are constants, the same in every sample
        if not uniform(params):
            _per_sample(exec_requant, state, f)
            return
        params = params[0]
    dt = NP_DTYPE[f["out_dtype"]]
    # the parameters' checks and constants, once per distinct parameter block in a run
    cache = state.requant_cache
    if cache is None:
        cache = state.requant_cache = {}
    key = (params.tobytes(), f["out_zp"], f["act_min"], f["act_max"])
    plan = cache.get(key)
    if plan is None:
        bias, q31, shift = params.astype(I64)
        if (q31 < 0).any() or (shift < MIN_SHIFT).any() or (shift > MAX_SHIFT).any():
            bad = int(np.argmax((q31 < 0) | (shift < MIN_SHIFT) | (shift > MAX_SHIFT)))
            raise Trap(f"parameter entry {bad}: multiplier {int(q31[bad])} / shift "
                       f"{int(shift[bad])} outside [0, 2^31) / [{MIN_SHIFT}, {MAX_SHIFT}]")
        plan = cache[key] = requant_plan(bias, q31, shift, f["out_zp"], f["act_min"],
                                         f["act_max"])
    if f["src"] == AccSrc.ACC:
        x = acc_view(state, f["src_addr"], rows, ch, f["src_stride"])
    else:
        x = nd(state.sram, f["src_addr"], (rows, ch), (f["src_stride"], 4), I32)
    y = requant_apply(x, plan, dt)
    nd(state.sram, f["dst_addr"], (rows, ch), (f["dst_stride"], dt.itemsize), dt)[...] = y


def _span(dtype: np.dtype, zp: int) -> int:
    """The largest |x - zp| over every value x of an integer dtype."""
    info = np.iinfo(dtype)
    return max(abs(int(info.min) - zp), abs(int(info.max) - zp))


def _rescaled(x: np.ndarray, zp: int, left: int) -> np.ndarray:
    # |x - zp| may reach 2^32; clipping to +-2^31 first keeps x << 31 inside int64 and does not
    # change sat32((x - zp) * 2^left) (anything clipped saturates either way)
    t = np.subtract(x, zp, dtype=I64)
    span = _span(x.dtype, zp)
    if span > 2**31:  # int32 x only: |x - zp| <= 2^31 + 2^15 for int8 / int16 x
        _clamp(t, -(2**31), 2**31)
        span = 2**31
    t <<= left
    if span << left > INT32_MAX:  # else every value is already inside int32: sat32 is a no-op
        _clamp(t, INT32_MIN, INT32_MAX)
    return t


def exec_eltwise(state: MachineState, f: F) -> None:
    a = _operand(state, f, "a", 3, NP_DTYPE[f["a_dtype"]])
    b = _operand(state, f, "b", 3, NP_DTYPE[f["b_dtype"]])
    op = f["op"]
    if op == EltOp.MUL:
        # clipping each factor to +-2^31 keeps the product in int64 and its sat32 unchanged;
        # both are skipped where the dtypes' ranges show they change nothing
        spans = []
        factors = []
        for x, zp in ((a, f["a_zp"]), (b, f["b_zp"])):
            t = np.subtract(x, zp, dtype=I64)
            span = _span(x.dtype, zp)
            if span > 2**31:
                _clamp(t, -(2**31), 2**31)
                span = 2**31
            spans.append(span)
            factors.append(t)
        r = np.multiply(factors[0], factors[1], out=factors[0])
        if spans[0] * spans[1] > INT32_MAX:
            _clamp(r, INT32_MIN, INT32_MAX)
    else:
        left = f["left_shift"]
        ra = mbqm_inplace(_rescaled(a, f["a_zp"], left), f["a_mult"], f["a_shift"])
        rb = mbqm_inplace(_rescaled(b, f["b_zp"], left), f["b_mult"], f["b_shift"])
        if op in (EltOp.MAX, EltOp.MIN):  # both inside int32 (MBQM's range): so is the result
            r = (np.maximum if op == EltOp.MAX else np.minimum)(ra, rb)
        else:
            r = _sat32((np.add if op == EltOp.ADD else np.subtract)(ra, rb))
    y = mbqm_inplace(np.ascontiguousarray(r, dtype=I64), f["out_mult"], f["out_shift"])
    y += f["out_zp"]
    _clamp(y, f["act_min"], f["act_max"])
    dt = NP_DTYPE[f["out_dtype"]]
    _operand(state, f, "out", 3, dt)[...] = y.astype(dt)


def exec_lut(state: MachineState, f: F) -> None:
    lut, base = state.lut, f["lut_base"]
    if f["lut_mode"] == LutMode.I8_256:
        x = _operand(state, f, "src", 3, np.dtype("<i1"))
        y = _gather(lut, x.astype(np.intp) + (base + 128)).astype(np.int8)  # wrap8
        _operand(state, f, "dst", 3, np.dtype("<i1"))[...] = y
        return
    x = _operand(state, f, "src", 3, np.dtype("<i2")).astype(I64)
    idx = (x >> 7) + (256 + base)  # arithmetic shift: 0 .. 511
    off = x & 0x7F
    lo = _gather(lut, idx).astype(I64)
    slope = ((_gather(lut, idx + 1).astype(I64) - lo + 32768) & 0xFFFF) - 32768  # wrap16
    y = (lo + ((slope * off + 64) >> 7)).astype(np.int16)  # >> floors; astype wraps (wrap16)
    _operand(state, f, "dst", 3, np.dtype("<i2"))[...] = y


def _gather(lut: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``lut[idx]``; a batch (``lut`` 2-D, ``idx`` with a leading batch axis): per sample."""
    if lut.ndim == 1:
        return lut[idx]
    rows = np.arange(lut.shape[0]).reshape((-1,) + (1,) * (idx.ndim - 1))
    return lut[rows, idx]


def _per_sample(handler, state: MachineState, f: F) -> None:
    """Run a handler on each sample of a BatchState in turn (memories: row views)."""
    for k in range(state.batch):
        one = MachineState.__new__(MachineState)
        one.arch, one.offchip = state.arch, [m[k] for m in state.offchip]
        one.sram, one.acc_bytes, one.lut_bytes = state.sram[k], state.acc_bytes[k], \
            state.lut_bytes[k]
        one.lut = state.lut[k]
        handler(one, f)


def exec_lut_load(state: MachineState, f: F) -> None:
    n, base = f["count"], f["lut_base"]
    state.lut[..., base:base + n] = nd(state.sram, f["src_addr"], (n,), (2,), np.dtype("<i2"))


def exec_pool(state: MachineState, f: F) -> None:
    g = Geometry.of(f)
    dt = NP_DTYPE[f["dtype"]]
    tile = input_tile(state, f, f["ch"], dt)
    rows, cols = check_nonempty(g, "POOL")
    if f["op"] == PoolOp.MAX:
        y = windows(tile, g, I64, fill=INT32_MIN).max(axis=(-3, -2))
    else:
        total = windows(tile, g, I64, fill=0).sum(axis=(-3, -2))
        y = rounding_div(total, (rows[:, None] * cols[None, :])[:, :, None])
    w = dt.itemsize
    out = nd(state.sram, f["out_addr"], (g.oh, g.ow, f["ch"]),
             (f["out_stride_h"], f["out_stride_w"], w), dt)
    out[...] = np.clip(y, f["act_min"], f["act_max"])


def exec_reduce(state: MachineState, f: F) -> None:
    dt = NP_DTYPE[f["dtype"]]
    x = _operand(state, f, "src", 3, dt)  # axes ([batch,] i2, i1, i0)
    axis = -1 - f["axis"]
    op = f["op"]
    if op in (ReduceOp.SUM, ReduceOp.SUMSQ):
        v = x.astype(I64) - f["in_zp"]
        if op == ReduceOp.SUMSQ:
            # |v| >= 2^16 squares above INT32_MAX, so the saturated sum is INT32_MAX either way
            v = np.clip(v, -(2**16), 2**16)
            v = v * v
        y, out_dt = _sat32(v.sum(axis=axis)), I32
    else:
        y, out_dt = (x.max(axis=axis) if op == ReduceOp.MAX else x.min(axis=axis)), dt
    dims = _dims(f, 3)
    lo, hi = [n for k, n in enumerate(dims) if k != f["axis"]]
    dst = nd(state.sram, f["dst_addr"], (hi, lo), (f["dst_s1"], f["dst_s0"]), out_dt)
    dst[...] = y.astype(out_dt)


def exec_copy(state: MachineState, f: F) -> None:
    dt = NP_DTYPE[DType(f["dtype"])]
    src = _operand(state, f, "src", 4, dt)
    dst = _operand(state, f, "dst", 4, dt)
    dst[...] = src.copy() if np.may_share_memory(src, dst) else src  # all reads first


def exec_unary(state: MachineState, f: F) -> None:
    x = _operand(state, f, "src", 3, I32).astype(I64)
    pos = x > 0
    safe = np.where(pos, x, 1)
    fb = f["frac_bits"]
    if f["op"] == UnaryOp.RECIP:
        y = rounding_div(np.int64(1) << fb, safe)
    else:
        v = (np.int64(1) << (2 * fb)) // safe
        r = np.floor(np.sqrt(v.astype(np.float64))).astype(I64)
        for _ in range(2):  # float sqrt is within one of isqrt: correct both ways
            r = np.where(r * r > v, r - 1, r)
            r = np.where((r + 1) * (r + 1) <= v, r + 1, r)
        y = r
    y = np.where(pos, np.minimum(y, INT32_MAX), INT32_MAX)
    _operand(state, f, "dst", 3, I32)[...] = y.astype(np.int32)
