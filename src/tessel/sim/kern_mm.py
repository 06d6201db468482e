"""One sample's MATMUL with compiled kernels on (``tessel.sim.jit``): the int8 GEMM
``torch._int_mm`` (``fastpath.int_mm``, checked exact on this host) and one compiled pass for
everything else; ``fastmatmul._one_sample_int8`` when kernels are off.

Why: the GEMM of a transformer tile (197 x 192 x 32) takes 5-10 us; the zero points'
corrections around it took as long again in numpy and torch calls (a GEMM of a row or a
column of ones, copies of the operands with that row / column appended, 3-5 whole-tile int32
passes: 20-40 us a call where both zero points are non-zero). Here they are one pass:

    ACC[i, j] (=, or += for ACCUMULATE) p[i, j] - a_zp colsum(b)[j] - (b_zp rowsum(a)[i] - kab)

with ``p = a @ b`` (int32, exact: ``k <= INT_MM_K_MAX``), ``kab = k a_zp b_zp`` modulo 2^32,
the row and column sums in int32 (exact: at most 65535 int8 terms), the terms in int64 and the
result wrapped to int32 on its store: every term is exact in int64 (``|a_zp colsum| <= 2^31 *
65535 * 128 < 2^55``), so the store is the exact sum modulo 2^32, which is all the accumulator
keeps (the reference's wrap32). The GEMM writes the accumulator itself when it is dense,
overwritten and both zero points are 0 (no pass). With kernels on, ``fastmatmul`` runs this
for one sample's tiles of every size (1-4x faster than its float32 closure even at 8 x 8 x 8).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessel.isa.fields import AccMode
from tessel.sim import jit
from tessel.sim.fastpath import (
    F32,
    I8,
    PACK_MIN_VALUES,
    AccStore,
    PackCache,
    Pool,
    PoolKept,
    Step,
    Views,
    _contiguous,
    memory_tensor,
    memory_view,
)
from tessel.sim.matrix import F32_EXACT, chunk_len
from tessel.sim.state import I32, MachineState, extent

I64 = np.int64


@jit.helper
def wrap32(v):
    """``v`` modulo 2^32 in int32's range (the compiled store truncates alike; uncompiled,
    numpy refuses an int64 outside int32)."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@jit.kernel
def zero_point_pass(p, a, b, za, zb, kab, acc, accumulate):
    """``acc = p - za colsum(b) - (zb rowsum(a) - kab)`` (``accumulate``: ``acc +=`` that),
    int64 sums, each store wrapped to int32 (the module docstring)."""
    m, n = acc.shape
    k = a.shape[1]
    sums = np.zeros(n, I32)  # int8 sums of at most 65535 terms: exact in int32
    if za != 0:  # four rows a pass: a row of B is short (16-64), its loop's overhead is not
        k4 = k - k % 4
        for kk in range(0, k4, 4):
            b0, b1, b2, b3 = b[kk], b[kk + 1], b[kk + 2], b[kk + 3]
            for j in range(n):
                sums[j] += np.int32(b0[j]) + np.int32(b1[j]) + np.int32(b2[j]) + np.int32(b3[j])
        for kk in range(k4, k):
            br = b[kk]
            for j in range(n):
                sums[j] += br[j]
    col = sums.astype(I64) * za
    for i in range(m):
        row = np.int64(0)
        if zb != 0:
            ar = a[i]
            s = np.int32(0)
            for kk in range(k):
                s += ar[kk]
            row = np.int64(s) * zb - kab
        pr, yr = p[i], acc[i]
        if accumulate:
            for j in range(n):
                yr[j] = wrap32(np.int64(yr[j]) + pr[j] - col[j] - row)
        else:
            for j in range(n):
                yr[j] = wrap32(np.int64(pr[j]) - col[j] - row)


def kab_term(k: int, a_zp: int, b_zp: int) -> np.int64:
    """``k a_zp b_zp`` modulo 2^32, as a signed int64 in int32's range."""
    return I64((k * a_zp * b_zp + 2**31) % 2**32 - 2**31)


def one_sample(f: dict[str, Any], mm: Any, store: AccStore) -> Step:
    """One sample's MATMUL: ``mm`` (``torch._int_mm`` with ``out=``) on the SRAM operands
    (pooled dense copies where they are strided), into the accumulator itself when that is
    all (dense, overwritten, zero points 0), else into a pooled int32 buffer that
    ``zero_point_pass`` reads. Views kept (``Views``)."""
    m, n, k = f["m"], f["n"], f["k"]
    a_key = ("sram", f["a_addr"], (m, k), (f["a_stride_m"], f["a_stride_k"]), I8)
    b_key = ("sram", f["b_addr"], (k, n), (f["b_stride_k"], f["b_stride_n"]), I8)
    acc_key = ("acc_bytes", store.offset, store.shape, store.strides, I32)
    a_dense, b_dense = _contiguous((m, k), a_key[3], 1), _contiguous((k, n), b_key[3], 1)
    accumulate = f["mode"] == AccMode.ACCUMULATE
    za, zb = I64(f["a_zp"]), I64(f["b_zp"])
    kab = kab_term(k, f["a_zp"], f["b_zp"])
    # the GEMM into the accumulator when that is all; else into a buffer the pass reads (a
    # pass in place would not vectorise: its output is its input)
    direct = not (za or zb or accumulate) and _contiguous((m, n), store.strides, 4)
    run = zero_point_pass.compiled

    def make_pooled(pool: Pool) -> tuple:
        """The dense copies (None: the operand is read in place) and the GEMM's output."""
        import torch

        ac = None if a_dense else pool.get(("mmk_a8", m, k), (m, k), I8)
        bc = None if b_dense else pool.get(("mmk_b8", k, n), (k, n), I8)
        out = None if direct else pool.get(("mmk_out", m, n), (m, n), I32)
        return tuple((x, None if x is None else torch.from_numpy(x)) for x in (ac, bc, out))
    pooled = PoolKept(make_pooled)

    def make(state: MachineState) -> tuple:
        (ac, tac), (bc, tbc), (out, tout) = pooled.get(state.pool)
        a8, b8, acc = (memory_view(state, key) for key in (a_key, b_key, acc_key))
        return (a8, ac, memory_tensor(state, a_key) if tac is None else tac,
                b8, bc, memory_tensor(state, b_key) if tbc is None else tbc,
                acc, acc if out is None else out,
                memory_tensor(state, acc_key) if tout is None else tout)
    views = Views(make)

    def step_mm(state: MachineState) -> None:
        a8, ac, ta, b8, bc, tb, acc, p, tp = views.get(state)
        if ac is not None:
            np.copyto(ac, a8)
            a8 = ac
        if bc is not None:
            np.copyto(bc, b8)
            b8 = bc
        mm(ta, tb, out=tp)
        if not direct:
            run(p, a8, b8, za, zb, kab, acc, accumulate)
    return step_mm


# ---- no exact, fast int8 GEMM on this host: the float32 GEMM of exact integers -------------
@jit.kernel
def pack_rows(src, zp, out):
    """``out`` (m, k) float32 = ``src - zp`` (int8 ``src``, any strides; exact: |v| <= 383).
    Returns ``max_i sum_k |src[i, k] - zp|`` (int64, exact), for the bound ``float_sample``
    needs. (The subtraction is float32's and the sum int64's: an int64 -> float32 conversion
    does not vectorise on AVX2, ~4x slower.)"""
    m, k = src.shape
    fz = np.float32(zp)
    l1 = 0
    for i in range(m):
        sr, orow = src[i], out[i]
        s = 0
        for kk in range(k):
            x = sr[kk]
            orow[kk] = np.float32(x) - fz
            s += abs(x - zp)
        l1 = max(l1, s)
    return l1


@jit.kernel
def pack_cols(src, zp, out):
    """``pack_rows`` for the GEMM's right operand (one flat loop when both are dense):
    returns ``max |src - zp|`` (0 when empty) instead, from the int8 minimum and maximum."""
    k, n = src.shape
    fz = np.float32(zp)
    lo, hi = np.int8(127), np.int8(-128)
    if src.strides[1] == 1 and src.strides[0] == n and out.strides == (4 * n, 4):
        sf, of = src.ravel(), out.ravel()
        for j in range(k * n):
            x = sf[j]
            of[j] = np.float32(x) - fz
            lo, hi = min(lo, x), max(hi, x)
    else:
        for kk in range(k):
            sr, orow = src[kk], out[kk]
            for j in range(n):
                x = sr[j]
                orow[j] = np.float32(x) - fz
                lo, hi = min(lo, x), max(hi, x)
    if k * n == 0:
        return 0
    return max(abs(np.int64(lo) - zp), abs(np.int64(hi) - zp))


@jit.kernel
def store_f32(acc, r, add):
    """``acc`` (m, n) int32 = the exact integers ``r`` (float32, below 2^24); ``add``: ``acc =
    wrap32(acc + r)``."""
    m, n = acc.shape
    for i in range(m):
        ar, rr = acc[i], r[i]
        if add:
            for j in range(n):
                ar[j] = np.int32(np.int64(ar[j]) + np.int64(rr[j]))  # wraps
        else:
            for j in range(n):
                ar[j] = np.int32(rr[j])


def float_sample(f: dict[str, Any], store: AccStore, batch: Step) -> Step:
    """One sample's MATMUL where this host has no fast exact int8 GEMM (``fastpath.int_mm``
    None) and kernels are on: ``pack_rows`` / ``pack_cols`` write ``a - a_zp`` and ``b - b_zp``
    as float32 and return the bound's two factors in the same pass, numpy's ``dot`` (its BLAS)
    multiplies them, ``store_f32`` writes the accumulator. One GEMM when ``k <= chunk_len`` or
    ``max_i sum_k |a| * max |b| < 2^24`` (every partial sum an integer below 2^24: exact in any
    order), else K in chunks of ``chunk_len`` (each exact by the static bound), added with
    int32 wrap-around: the exact sum modulo 2^32, which is what the accumulator keeps.

    Operands of ``fastpath.PACK_MIN_VALUES`` values and more are packed into buffers of their
    own and kept in the pool's ``PackCache`` with a copy of the SRAM bytes they span: a
    transformer's activations serve every output-column chunk of a layer (one MATMUL per
    chunk, the same A), its weights every run; a reuse compares those bytes first and packs
    again in place on any difference. ``batch``: the closure a batch runs."""

    m, n, k = f["m"], f["n"], f["k"]
    a_s, b_s = (f["a_stride_m"], f["a_stride_k"]), (f["b_stride_k"], f["b_stride_n"])
    a_key = ("sram", f["a_addr"], (m, k), a_s, I8)
    b_key = ("sram", f["b_addr"], (k, n), b_s, I8)
    acc_key = ("acc_bytes", store.offset, store.shape, store.strides, I32)
    a_span, b_span = extent(f["a_addr"], (m, k), a_s, 1), extent(f["b_addr"], (k, n), b_s, 1)
    za, zb = I64(f["a_zp"]), I64(f["b_zp"])
    chunk = chunk_len(f["a_zp"], f["b_zp"])
    add = f["mode"] == AccMode.ACCUMULATE
    keep_a, keep_b = m * k >= PACK_MIN_VALUES, k * n >= PACK_MIN_VALUES
    ka, kb = ("mmf_a", *a_key[1:4], f["a_zp"]), ("mmf_b", *b_key[1:4], f["b_zp"])
    rows, cols, put = pack_rows.compiled, pack_cols.compiled, store_f32.compiled
    pooled = PoolKept(lambda pool: (None if keep_a else pool.get(("mmf_a", m, k), (m, k), F32),
                                    None if keep_b else pool.get(("mmf_b", k, n), (k, n), F32),
                                    pool.get(("mmf_out", m, n), (m, n), F32)))

    def make(state: MachineState) -> tuple:
        return (state.sram, *(memory_view(state, key) for key in (a_key, b_key, acc_key)),
                *pooled.get(state.pool))
    views = Views(make)

    def kept(packs: PackCache, key: tuple, sram: np.ndarray, span: tuple[int, int],
             src: np.ndarray, zp: np.int64, shape: tuple[int, int],
             pack: Callable[..., int]) -> tuple[np.ndarray, int]:
        data = sram[span[0]:span[1]].tobytes()
        entry = packs.get(key)
        if entry is None or entry[0] != data:  # (the bytes differ: packed again, in place)
            buf = entry[1] if entry is not None else np.empty(shape, F32)
            entry = packs.put(key, (data, buf, pack(src, zp, buf)))
        return entry[1], entry[2]

    def step(state: MachineState) -> None:
        if state.batch is not None:
            batch(state)
            return
        sram, a8, b8, acc, a, b, r = views.get(state)
        packs = state.pool.packs
        if keep_a:
            a, l1 = kept(packs, ka, sram, a_span, a8, za, (m, k), rows)
        else:
            l1 = rows(a8, za, a)
        if keep_b:
            b, bm = kept(packs, kb, sram, b_span, b8, zb, (k, n), cols)
        else:
            bm = cols(b8, zb, b)
        if k <= chunk or l1 * bm < F32_EXACT:
            put(acc, np.dot(a, b, out=r), add)
            return
        for lo in range(0, k, chunk):  # each chunk exact by the static bound (chunk_len)
            put(acc, np.dot(a[:, lo:lo + chunk], b[lo:lo + chunk], out=r), add or lo > 0)
    return step
