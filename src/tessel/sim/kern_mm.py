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

from typing import Any

import numpy as np

from tessel.isa.fields import AccMode
from tessel.sim import jit
from tessel.sim.fastpath import (
    I8,
    AccStore,
    Pool,
    PoolKept,
    Step,
    Views,
    _contiguous,
    memory_tensor,
    memory_view,
)
from tessel.sim.state import I32, MachineState

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
