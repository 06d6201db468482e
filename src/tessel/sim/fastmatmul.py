"""The fast path's MATMUL closure (``tessel.sim.fastpath`` explains how instructions become
closures and the helpers they share), equal to ``matrix.exec_matmul``.

One sample, with an exact and fast ``torch._int_mm`` on this host (``fastpath.int_mm``): every
tile of at least ``INT_MM_MIN_MACS`` products is one int8 GEMM reading the SRAM operands in place
when they are dense (else a pooled dense copy), writing the accumulator in place when it is
dense and overwritten; the zero points' terms ``- a_zp colsum(b) - b_zp rowsum(a) + k a_zp
b_zp`` are wrapping int32 corrections, the row sums from a column of ones appended to ``b``
and, for an ``a`` of at most ``ONES_ROW_MAX`` bytes, the column sums from a row of ones
appended to (a copy of) ``a``: one GEMM; for a larger ``a`` and a dense ``b`` the column sums'
GEMM (3-10 us: a one-row int8 GEMM is slow) is kept with ``b``'s bytes and reused while they
match (a layer's weights; comparing the bytes costs 0.5-3 us). Smaller tiles, a host
without a fast exact int8 GEMM, and batches run the float32 GEMM of exact integers
(``fastpath._exact_gemm``) or the batch's int8 GEMM as before. With compiled kernels on, one
sample's tiles of every size run ``kern_mm.one_sample`` instead: the int8 GEMM and one compiled
pass for the zero points (1-4x faster than the float32 closure even on 8 x 8 x 8 tiles); on a
host without that GEMM, ``kern_mm.float_sample``: the float32 GEMM with compiled packs (kept
for large operands) and store.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import AccMode
from tessel.sim import jit, kern_mm
from tessel.sim.fastpath import (
    F32,
    I8,
    INT_MM_K_MAX,
    AccStore,
    Pool,
    PoolKept,
    Step,
    Views,
    _acc_write,
    _by_size,
    _contiguous,
    _exact_gemm,
    _int8_max_abs,
    _row_l1_max,
    _uniform,
    _view,
    exact_int_mm,
    int8_gemm,
    int_mm,
    memory_tensor,
    memory_view,
)
from tessel.sim.matrix import chunk_len
from tessel.sim.prepare import Op
from tessel.sim.state import I32, MachineState

I64 = np.int64
ONES_ROW_MAX = 16384  # A of at most this many bytes: copied with a row of ones (no 2nd GEMM)
INT_MM_MIN_MACS = 65536  # kernels off, one sample: smaller tiles float32 (int8 GEMM + corrections ~8 us)


def build_matmul(op: Op) -> Step | None:
    f = op.f
    m, n, k = f["m"], f["n"], f["k"]
    if 0 in (m, n, k):
        return None
    a_addr, a_s, a_zp = f["a_addr"], (f["a_stride_m"], f["a_stride_k"]), f["a_zp"]
    b_addr, b_s, b_zp = f["b_addr"], (f["b_stride_k"], f["b_stride_n"]), f["b_zp"]
    chunk = chunk_len(a_zp, b_zp)
    store = AccStore(f, m, n)

    def step_any(state: MachineState) -> None:
        pool, sram = state.pool, state.sram
        a8 = _view(sram, a_addr, (m, k), a_s, I8)
        ns = a8.shape[0]
        a = pool.get(("mm_a", ns, m, k), (ns, m, k), F32)
        np.subtract(a8, a_zp, out=a, dtype=F32)
        b8 = _view(sram, b_addr, (k, n), b_s, I8)
        if _uniform(b8):  # one sample, or weights: one GEMM of every sample's rows
            b8 = b8[0]
            b = pool.get(("mm_b", k, n), (k, n), F32)
            a = a.reshape(ns * m, k)
            out = pool.get(("out", 1, ns * m, n), (ns * m, n), F32)
        else:  # a batch's activations times activations: one GEMM per sample
            b = pool.get(("mm_b", ns, k, n), (ns, k, n), F32)
            out = pool.get(("mm_out", ns, m, n), (ns, m, n), F32)
        np.subtract(b8, b_zp, out=b, dtype=F32)
        store(state, _exact_gemm(a, b, out, chunk, lambda: _row_l1_max(a, pool),
                                 lambda: _int8_max_abs(b8, b_zp)))

    pooled = PoolKept(lambda pool: (pool.get(("mm_a", 1, m, k), (1, m, k), F32).reshape(m, k),
                                    pool.get(("mm_b", k, n), (k, n), F32),
                                    pool.get(("out", 1, m, n), (m, n), F32)))

    def make(state: MachineState) -> tuple:  # one sample (step_any runs a batch)
        return (memory_view(state, ("sram", a_addr, (m, k), a_s, I8)),
                memory_view(state, ("sram", b_addr, (k, n), b_s, I8)),
                *pooled.get(state.pool),
                memory_view(state, ("acc_bytes", store.offset, store.shape, store.strides, I32)))
    views = Views(make)
    accumulate = store.accumulate

    def step(state: MachineState) -> None:
        """``step_any`` for one sample, its views kept (``Views``)."""
        if state.batch is not None:
            step_any(state)
            return
        a8, b8, a, b, out, acc = views.get(state)
        pool = state.pool
        np.subtract(a8, a_zp, out=a, dtype=F32)
        np.subtract(b8, b_zp, out=b, dtype=F32)
        _acc_write(acc, _exact_gemm(a, b, out, chunk, lambda: _row_l1_max(a, pool),
                                    lambda: _int8_max_abs(b8, b_zp)), accumulate)

    mm = int_mm() if k <= INT_MM_K_MAX else None
    if mm is None:  # kern_mm's float32 kernels when on: one pass per operand, kept packs
        return kern_mm.float_sample(f, store, step_any) if jit.enabled() else step
    mm_out = int_mm_out()

    def step_int(state: MachineState) -> None:
        pool, sram = state.pool, state.sram
        b8 = _view(sram, b_addr, (k, n), b_s, I8)
        if not _uniform(b8):  # a batch's activations times activations: the float GEMMs
            step_any(state)
            return
        a8 = _view(sram, a_addr, (m, k), a_s, I8)
        ns = a8.shape[0]
        ac = pool.get(("mm_a8", ns, m, k), (ns * m, k), I8)
        np.copyto(ac.reshape(ns, m, k), a8)
        bc = pool.get(("mm_b8", k, n), (k, n), I8)
        np.copyto(bc, b8[0])
        store(state, int8_gemm(mm, ac, bc, a_zp, b_zp, pool))

    if mm_out is None:
        return _by_size(step, step_int, m * k * n)
    one = (kern_mm.one_sample if jit.enabled() else _one_sample_int8)(f, mm_out, store)

    def step_int1(state: MachineState) -> None:
        """``step_int`` for one sample (``_one_sample_int8``), a batch as before."""
        if state.batch is not None:
            step_int(state)
        else:
            one(state)
    if m * k * n >= INT_MM_MIN_MACS or jit.enabled():  # kern_mm: 1-4x the float32 one, any size
        return step_int1
    return _by_size(step, step_int, m * k * n)


_INT_MM_OUT: list = []  # [exact_int_mm() if its out= form is exact too, else None], per process


def int_mm_out() -> Any:
    """``exact_int_mm()`` (whatever its speed here: ``build`` asks ``int_mm()`` first) if
    its ``out=`` form (which writes the accumulator in place) gives the exact sums too on
    worst-case operands, else None."""
    fn: Any = exact_int_mm()
    if fn is None:
        return None
    if not _INT_MM_OUT:
        import torch

        ok = True
        try:
            for m, k, n in ((1, 8, 1), (37, 4099, 19), (130, 577, 33)):
                for v in (-128, 127):
                    a = torch.full((m, k), v, dtype=torch.int8)
                    b = torch.full((k, n), -128, dtype=torch.int8)
                    out = torch.zeros((m, n), dtype=torch.int32)
                    fn(a, b, out=out)
                    ok &= bool((out == v * -128 * k).all())
        except Exception:  # a kernel without the out= form
            ok = False
        _INT_MM_OUT.append(fn if ok else None)
    return _INT_MM_OUT[0]


def _one_sample_int8(f: dict[str, Any], mm: Any, store: AccStore) -> Step:
    """One sample's int8 GEMM (the module docstring), its tensors kept (``Views``)."""
    import torch

    m, n, k = f["m"], f["n"], f["k"]
    a_addr, a_s, a_zp = f["a_addr"], (f["a_stride_m"], f["a_stride_k"]), f["a_zp"]
    b_addr, b_s, b_zp = f["b_addr"], (f["b_stride_k"], f["b_stride_n"]), f["b_zp"]
    a_dense, b_dense = _contiguous((m, k), a_s, 1), _contiguous((k, n), b_s, 1)
    ones_col = b_zp != 0  # b gets a column of ones: the GEMM's last column is rowsum(a)
    # a small a gets a row of ones (a copy) when colsum(b) is needed: the GEMM's last row
    ones_row = a_zp != 0 and m * k <= ONES_ROW_MAX
    ma, nb = m + ones_row, n + ones_col
    acc_dense = _contiguous((m, n), store.strides, 4)
    # the GEMM writes the accumulator itself: overwritten, dense, nothing appended
    direct = not store.accumulate and acc_dense and not ones_col and not ones_row
    # k a_zp b_zp modulo 2^32 (with the row sums: both zero points non-zero)
    kab = np.int64((k * a_zp * b_zp + 2**31) % 2**32 - 2**31).astype(np.int32)
    za, zb = np.int32(a_zp), np.int32(b_zp)  # s32 fields: int32 products wrap as the ACC

    def make_pooled(pool: Pool) -> tuple:
        """The buffers (and their torch wrappers) that depend on the pool alone."""
        # the ones row / column is written once: every user of the key writes only the rest
        ac = None if a_dense and not ones_row else pool.get(("mm1_a8", m, k, ones_row),
                                                            (ma, k), I8, fill=1)
        bc = None if b_dense and not ones_col else pool.get(("mm1_b8", k, n, ones_col),
                                                            (k, nb), I8, fill=1)
        out = None if direct else pool.get(("mm1_out", ma, nb), (ma, nb), I32)
        ones = pool.get(("ones8", 1, k), (1, k), I8, fill=1)
        col = pool.get(("mm1_col", nb), (1, nb), I32)
        row = pool.get(("mm1_row", m), (m, 1), I32)

        def wrap(x: np.ndarray | None) -> Any:
            return None if x is None else torch.from_numpy(x)
        parts = (None, None, None) if out is None else (out[:m, :n], out[:m, n:], out[m:, :n])
        return (None if ac is None else ac[:m], None if bc is None else bc[:, :n], wrap(ac),
                wrap(bc), wrap(out), parts, torch.from_numpy(ones), torch.from_numpy(col),
                col[:, :n], row)
    pooled = PoolKept(make_pooled)

    a_key, b_key = ("sram", a_addr, (m, k), a_s, I8), ("sram", b_addr, (k, n), b_s, I8)
    acc_key = ("acc_bytes", store.offset, store.shape, store.strides, I32)

    def make(state: MachineState) -> tuple:
        """One sample's views: the memory ones shared per state (``memory_view``)."""
        am, bn, tac, tbc, tout, parts, tones, tcol, col, row = pooled.get(state.pool)
        tb = memory_tensor(state, b_key) if tbc is None else tbc
        return (memory_view(state, a_key), memory_view(state, b_key), am, bn,
                memory_tensor(state, a_key) if tac is None else tac, tb,
                memory_view(state, acc_key), *parts,
                memory_tensor(state, acc_key) if tout is None else tout, (tones, tb, tcol),
                col, row)
    views = Views(make)
    mode_acc = f["mode"] == AccMode.ACCUMULATE
    # a_zp colsum(b) by its own GEMM (a too large for a row of ones): kept with b's bytes
    memo_col = a_zp != 0 and not ones_row and b_dense
    b_end = b_addr + k * n
    last: list = [(None, None)]  # [(b's bytes, a_zp colsum(b))], replaced whole

    def colsum(state: MachineState, col_mm: tuple, col: np.ndarray) -> np.ndarray:
        """``a_zp colsum(b)`` (int32, wrapping), from the last call's when b's bytes match
        (the weights of a layer: the same on every run)."""
        raw = state.sram[b_addr:b_end].tobytes()
        kept_raw, kept_col = last[0]
        if raw == kept_raw:
            return kept_col
        mm(*col_mm[:2], out=col_mm[2])
        col *= za
        last[0] = (raw, col.copy())
        return col

    def step(state: MachineState) -> None:
        a8, b8, am, bn, ta, tb, acc, p, rs, cs, tout, col_mm, col, row = views.get(state)
        if am is not None:
            np.copyto(am, a8)
        if bn is not None:
            np.copyto(bn, b8)
        mm(ta, tb, out=tout)
        if direct and not a_zp:
            return
        if ones_row:  # a_zp colsum(b): the GEMM's last row
            np.multiply(cs, za, out=col)
        elif memo_col:
            col = colsum(state, col_mm, col)
        elif a_zp:  # a GEMM of a row of ones
            mm(*col_mm[:2], out=col_mm[2])
            col *= za
        if ones_col:  # b_zp rowsum(a) - k a_zp b_zp
            np.multiply(rs, zb, out=row)
            row -= kab
        if direct:  # the GEMM wrote the accumulator
            acc -= col
            return
        if mode_acc:
            acc += p
        elif a_zp:
            np.subtract(p, col, out=acc)
        else:
            acc[...] = p
        if mode_acc and a_zp:
            acc -= col
        if ones_col:
            acc -= row
    return step
