"""The int16 x int8 / int4 path: CONV and MATMUL with ``in_type`` I16 into wide accumulator
entries, and REQUANT with ``acc_width`` WIDE (docs/isa.md, "The wide accumulator").

A wide entry is a 48-bit two's-complement value held sign-extended in 8 bytes, little-endian:
the accumulator entries ``e`` and ``e + 1`` (``e`` even), read here as one int64 (the
accumulator memory viewed as ``<i8``); its value is the low 48 bits, sign-extended (what an
int32 instruction left in the pair reads so). The result of output (p, c) lives at entry
``acc_addr + p acc_stride + 2 c``.

Products: the int16 activations (gathered from their two SRAM bytes) and the int8 weights (int4
unpacked) as float64 through numpy's BLAS. That GEMM is exact in any summation order: every
product is at most ``2^15 * 2^7 = 2^22`` in magnitude and a reduction has fewer than ``2^24``
terms (``kh kw cin`` or ``k`` within the fields), so every partial sum is an integer below
``2^46 < 2^53``. The sums are then wrapped to 48 bits (``wrap48``), ACCUMULATE adding the old
entry first. REQUANT WIDE is the rule of docs/numerics.md ("The wide requantisation") in int64
numpy: ``|v q15| <= 2^47 * 2^15`` is exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import AccMode, ParamMode
from tessel.isa.fixedpoint import MAX_WIDE_SHIFT, MIN_SHIFT
from tessel.isa.instrs.matrix import WeightType
from tessel.sim.hostmem import I8, Step, flat_rows
from tessel.sim.instr.conv import unpack_int4, weight_nibbles
from tessel.sim.prepare import Op
from tessel.sim.state import NP_DTYPE, MachineState, Trap

I64 = np.int64
U8 = np.dtype(np.uint8)
WIDE = np.dtype("<i8")
ACC_BITS = 48


def wrap48(v: np.ndarray) -> np.ndarray:
    """``v`` modulo 2^48 in the signed 48-bit range."""
    return ((v + (1 << 47)) & ((1 << 48) - 1)) - (1 << 47)


def gather_i16(sram: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """The int16 elements at byte addresses ``addr`` (-1: padding, 0) of every sample's SRAM
    ``sram`` (samples, bytes), as int64 ``(samples, *addr.shape)``."""
    a = np.maximum(addr, 0)
    v = sram[:, a].astype(I64) | (sram[:, a + 1].astype(I64) << 8)
    v = (v ^ 0x8000) - 0x8000
    return np.where(addr >= 0, v, 0)


class WideStore:
    """Where a matrix instruction's wide results go: int64 indices ``(rows, cols)`` into the
    accumulator viewed as ``<i8``, overwritten or added to."""

    def __init__(self, acc_addr: int, acc_stride: int, rows: int, cols: int, mode: int) -> None:
        r, c = np.ix_(np.arange(rows), np.arange(cols))
        self.at = ((acc_addr + r * acc_stride) // 2 + c).astype(I64)
        self.add = mode == AccMode.ACCUMULATE

    def put(self, state: MachineState, sums: np.ndarray) -> None:
        """``sums``: (samples, rows, cols) int64 exact sums."""
        acc = flat_rows(state, "acc_bytes", WIDE)
        if self.add:
            sums = sums + acc[:, self.at]
        acc[:, self.at] = wrap48(sums)


class WideWeights:
    """A matrix instruction's ``(K, N)`` int8 weight matrix from the element indices ``at``
    (nibble indices for int4), per sample."""

    def __init__(self, at: np.ndarray, wt: WeightType, shape: tuple[int, int]) -> None:
        self.at, self.i4, self.shape = at.reshape(-1), wt is WeightType.I4, shape

    def of(self, state: MachineState) -> np.ndarray:
        x = flat_rows(state, "sram", I8)
        if self.i4:
            w = np.stack([unpack_int4(row, self.at) for row in x])
        else:
            w = x[:, self.at]
        return w.reshape(-1, *self.shape).astype(np.float64)


def _products(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact ``a @ w`` per sample (a: (S, M, K) int64, w: (S or 1, K, N) float64) as int64."""
    return np.matmul(a.astype(np.float64), w).astype(I64)


def build_conv(op: Op, prep: Any) -> Step:
    """CONV ``in_type`` I16: the im2col matrix of byte addresses (-1: padding, 0), gathered
    as int16, times the weights, wrapped into the wide entries."""
    f = op.f
    oy, ox, ky, kx, ci = np.ix_(*(np.arange(n) for n in (
        f["out_h"], f["out_w"], f["kh"], f["kw"], f["cin"])))
    iy = oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"]
    ix = ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"]
    inside = (iy >= 0) & (iy < f["in_h"]) & (ix >= 0) & (ix < f["in_w"])
    addr = np.where(inside, f["in_addr"] + iy * f["in_stride_h"] + ix * f["in_stride_w"]
                    + 2 * ci, -1)
    m, cout = f["out_h"] * f["out_w"], f["cout"]
    addr = addr.reshape(m, -1).astype(I64)
    k = addr.shape[1]
    wt = WeightType(f["w_type"])
    per = wt.per_byte
    at = weight_nibbles(f, per_byte=per)
    weights = WideWeights(at, wt, (k, cout))
    store = WideStore(f["acc_addr"], f["acc_stride"], m, cout, f["mode"])

    def step(state: MachineState) -> None:
        x = gather_i16(flat_rows(state, "sram", U8), addr)
        store.put(state, _products(x, weights.of(state)))
    return step


def build_matmul(op: Op, prep: Any) -> Step:
    """MATMUL ``in_type`` I16: A (int16 at byte addresses) times B (int8 / int4)."""
    f = op.f
    m, n, k = f["m"], f["n"], f["k"]
    i, t = np.ix_(np.arange(m), np.arange(k))
    addr = (f["a_addr"] + i * f["a_stride_m"] + t * f["a_stride_k"]).astype(I64)
    bt = WeightType(f["b_type"])
    t2, j = np.ix_(np.arange(k), np.arange(n))
    at = (bt.per_byte * f["b_addr"] + t2 * f["b_stride_k"] + j * f["b_stride_n"]).astype(I64)
    weights = WideWeights(at, bt, (k, n))
    store = WideStore(f["acc_addr"], f["acc_stride"], m, n, f["mode"])

    def step(state: MachineState) -> None:
        a = gather_i16(flat_rows(state, "sram", U8), addr)
        store.put(state, _products(a, weights.of(state)))
    return step


def wide_params(raw: np.ndarray, p: int) -> tuple[np.ndarray, ...]:
    """(bias int64, q15, s, half) per channel from a sample's parameter bytes (int64 bias[p],
    then int32 q31[p], shift[p]); traps on a multiplier or shift outside the wide rule's
    range."""
    bias = raw[:8 * p].view("<i8").astype(I64)
    q31 = raw[8 * p:12 * p].view("<i4").astype(I64)
    shift = raw[12 * p:16 * p].view("<i4").astype(I64)
    bad = (q31 < 0) | (shift < MIN_SHIFT) | (shift > MAX_WIDE_SHIFT)
    if bad.any():
        c = int(np.argmax(bad))
        raise Trap(f"parameter entry {c}: multiplier {int(q31[c])} / shift {int(shift[c])} "
                   f"outside [0, 2^31) / [{MIN_SHIFT}, {MAX_WIDE_SHIFT}] (acc_width WIDE)")
    q15 = np.where(q31 < 0x7FFF0000, (q31 + (1 << 15)) >> 16, 0x7FFF)
    s = 15 - shift
    return bias, q15, s, I64(1) << (s - 1)


def build_requant(op: Op, prep: Any) -> Step:
    """REQUANT ``acc_width`` WIDE: ``y = clamp(sat32((sat48(acc + bias) q15 + 2^(s-1)) >> s)
    + out_zp, act_min, act_max)`` per element."""
    f = op.f
    rows, ch = f["rows"], f["ch"]
    r, c = np.ix_(np.arange(rows), np.arange(ch))
    src = ((f["src_addr"] + r * f["src_stride"]) // 2 + c).astype(I64)
    dt = NP_DTYPE[f["out_dtype"]]
    w = dt.itemsize
    dst = (f["dst_addr"] + r * f["dst_stride"] + c * w).astype(I64)
    dst_bytes = (dst[..., None] + np.arange(w)).reshape(rows, ch * w)
    p = ch if f["param_mode"] == ParamMode.PER_CHANNEL else 1
    pa = f["param_addr"]
    zp, lo, hi = f["out_zp"], f["act_min"], f["act_max"]
    lim = 1 << (ACC_BITS - 1)

    def step(state: MachineState) -> None:
        acc = flat_rows(state, "acc_bytes", WIDE)
        sram = flat_rows(state, "sram", U8)
        for s in range(sram.shape[0]):
            bias, q15, sh, half = wide_params(np.ascontiguousarray(sram[s, pa:pa + 16 * p]), p)
            # sat48(acc + bias): the entry's low 48 bits; a bias beyond 2^48 saturates alike
            v = np.clip(wrap48(acc[s, src]) + np.clip(bias, -2 * lim, 2 * lim), -lim, lim - 1)
            t = np.clip((v * q15 + half) >> sh, -(1 << 31), (1 << 31) - 1)
            y = np.clip(t + zp, lo, hi).astype(dt)
            sram[s, dst_bytes] = y.view(U8).reshape(rows, ch * w)
    return step
