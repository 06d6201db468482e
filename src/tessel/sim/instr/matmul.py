"""MATMUL: docs/isa.md's ``ACC[i, j] (=, +=) sum_t (A[i, t] - a_zp) (B[t, j] - b_zp)``.

The products come from ``tessel.sim.gemm``'s exact GEMM. With the int8 GEMM, the operands
are read in place when dense (``torch._int_mm`` on views of the SRAM; else a dense copy) and
``gemm.store_int`` writes the sums corrected for the zero points, wrapped (the GEMM writes the
accumulator itself when both zero points are 0, the tile is overwritten and its rows are
dense). Without it (a host with no fast exact int8 GEMM), ``pack_f32`` writes ``x - zp`` as
float32 with the exactness bound's factor, numpy's BLAS multiplies, ``gemm.store_f32``
writes. A batch stacks every sample's rows of A for one GEMM when the samples' B bytes
agree (weights), else runs each sample with its own B (attention's activations). int4 B
(``b_type`` I4) is unpacked into a dense int8 copy first (``Matmul.b_of``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tessel.isa.fields import AccMode
from tessel.isa.instrs.matrix import WeightType
from tessel.sim import gemm, jit
from tessel.sim.hostmem import (
    F32,
    I8,
    I32,
    PACK_MIN_VALUES,
    PoolKept,
    Step,
    Views,
    bindable,
    bytes_uniform,
    contiguous,
    flat_rows,
    memory_tensor,
    memory_view,
)
from tessel.sim.instr.conv import unpack_int4
from tessel.sim.prepare import Op
from tessel.sim.state import MachineState, extent

I64 = np.int64


@jit.kernel
def pack_f32(src, zp, out):
    """``out`` (float32) = ``src - zp`` (int8, any strides; exact: ``|v| <= 383``). Returns
    ``max_i sum_t |src[i, t] - zp|``, the bound's factor of a left operand, and the largest
    ``|src - zp|`` of a right one: ``(row_l1_max, abs_max)``."""
    m, k = src.shape
    fz = np.float32(zp)
    l1 = 0
    big = 0
    for i in range(m):
        sr, orow = src[i], out[i]
        s = 0
        for t in range(k):
            v = abs(np.int64(sr[t]) - zp)
            orow[t] = np.float32(sr[t]) - fz
            s += v
            big = max(big, v)
        l1 = max(l1, s)
    return l1, big


class Matmul:
    """One MATMUL's fields as its steps use them."""

    def __init__(self, op: Op) -> None:
        f = op.f
        self.m, self.n, self.k = f["m"], f["n"], f["k"]
        self.a_s, self.b_s = (f["a_stride_m"], f["a_stride_k"]), (f["b_stride_k"], f["b_stride_n"])
        self.a_key = ("sram", f["a_addr"], (self.m, self.k), self.a_s, I8)
        self.b_key = ("sram", f["b_addr"], (self.k, self.n), self.b_s, I8)
        self.za, self.zb = I64(f["a_zp"]), I64(f["b_zp"])
        self.a0, self.asr = f["acc_addr"], f["acc_stride"]
        self.add = f["mode"] == AccMode.ACCUMULATE
        self.kab = gemm.kab_term(self.k, f["a_zp"], f["b_zp"])
        self.chunk = gemm.chunk_len(f["a_zp"], f["b_zp"])
        bt = WeightType(f["b_type"])
        self.b_span = bt.span(*extent(bt.per_byte * f["b_addr"], (self.k, self.n), self.b_s, 1))
        self.nibbles = None  # int4 B: the nibble index of every element, row order
        if bt is WeightType.I4:
            t, j = np.ix_(np.arange(self.k), np.arange(self.n))
            self.nibbles = (2 * f["b_addr"] + t * self.b_s[0] + j * self.b_s[1]).reshape(-1)
        self.a_dense = contiguous((self.m, self.k), self.a_s, 1)
        self.b_dense = self.nibbles is None and contiguous((self.k, self.n), self.b_s, 1)
        self.acc_key = ("acc_bytes", 4 * self.a0, (self.m, self.n), (4 * self.asr, 4), I32)

    def b_of(self, state: MachineState, s: int) -> np.ndarray:
        """Sample ``s``'s B, ``(k, n)`` int8: a view of the SRAM, or int4 B unpacked."""
        if self.nibbles is None:
            return memory_view(state, self.b_key)[s]
        return unpack_int4(flat_rows(state, "sram", I8)[s], self.nibbles).reshape(self.k, self.n)


def build(op: Op, prep: Any) -> Step:
    """The MATMUL step: the int8 GEMM where this host has a fast exact one, else float32;
    ``in_type`` I16: the wide path (``tessel.sim.instr.wide``)."""
    if op.f["in_type"]:
        from tessel.sim.instr import wide

        return wide.build_matmul(op, prep)
    mm_ = Matmul(op)
    mm = gemm.int_mm() if mm_.k <= gemm.INT_MM_K_MAX else None
    if mm is None:
        return _f32_steps(mm_)
    return _int8_one(mm_, mm, _int8_many(mm_, mm))


def _int8_one(c: Matmul, mm: Any, many: Step) -> Step:
    """One sample: the GEMM on the SRAM operands (pooled dense copies where strided), into
    the accumulator itself when that is all, else into a pooled buffer ``store_int`` reads."""
    import torch

    store = jit.compiled(gemm.store_int)
    direct = not (c.za or c.zb or c.add) and contiguous((c.m, c.n), (c.asr, 1), 1)

    def make_pooled(pool: Any) -> tuple:
        ac = None if c.a_dense else pool.get(("mm_a8", c.m, c.k), (c.m, c.k), I8)
        bc = None if c.b_dense else pool.get(("mm_b8", c.k, c.n), (c.k, c.n), I8)
        out = None if direct else pool.get(("mm_p", c.m, c.n), (c.m, c.n), I32)
        return tuple((x, None if x is None else torch.from_numpy(x)) for x in (ac, bc, out))
    pooled = PoolKept(make_pooled)

    def make(state: MachineState) -> tuple:
        (ac, tac), (bc, tbc), (out, tout) = pooled.get(state.pool)
        a8 = memory_view(state, c.a_key)[0]
        b8 = memory_view(state, c.b_key)[0] if c.nibbles is None else None
        return (a8, ac, memory_tensor(state, c.a_key) if tac is None else tac,
                b8, bc, memory_tensor(state, c.b_key) if tbc is None else tbc,
                out, memory_tensor(state, c.acc_key) if tout is None else tout,
                flat_rows(state, "acc_bytes", I32))
    views = Views(make)

    def run(state: MachineState, a8: np.ndarray, ac: np.ndarray | None, ta: Any,
            b8: np.ndarray | None, bc: np.ndarray | None, tb: Any, p: np.ndarray | None,
            tp: Any, acc: np.ndarray, store: Any = store) -> None:
        if ac is not None:
            np.copyto(ac, a8)
            a8 = ac
        if bc is not None:
            np.copyto(bc, b8 if c.nibbles is None else c.b_of(state, 0))
            b8 = bc
        mm(ta, tb, out=tp)
        if not direct:
            store(acc, 0, 1, p, a8, b8, c.za, c.zb, c.kab, c.a0, c.asr, c.add)

    def step(state: MachineState) -> None:
        if state.batch is not None:
            many(state)
            return
        run(state, *views.get(state))

    def bind(state: MachineState) -> object:
        kept = views.get(state)
        a8, ac, _, b8, bc, _, p, _, acc = kept
        if direct and ac is None and bc is None:
            return functools.partial(mm, kept[2], kept[5], out=kept[7])
        if direct or c.nibbles is not None:
            return functools.partial(run, state, *kept)
        st = jit.entry(store, acc, 0, 1, p, a8 if ac is None else ac, b8 if bc is None else bc,
                       c.za, c.zb, c.kab, c.a0, c.asr, c.add)
        return functools.partial(run, state, *kept, st)
    return bindable(step, bind)


def _int8_many(c: Matmul, mm: Any) -> Step:
    """A batch: one GEMM of every sample's rows when their B bytes agree, else one per
    sample."""
    import torch

    store = jit.compiled(gemm.store_int)

    def gemm_rows(state: MachineState, s0: int, s1: int, bsample: int) -> None:
        pool, rows = state.pool, (s1 - s0) * c.m
        ac = pool.get(("mmb_a8", rows, c.k), (rows, c.k), I8)
        np.copyto(ac.reshape(s1 - s0, c.m, c.k), memory_view(state, c.a_key)[s0:s1])
        bc = pool.get(("mmb_b8", c.k, c.n), (c.k, c.n), I8)
        np.copyto(bc, c.b_of(state, bsample))
        p = pool.get(("mmb_p", rows, c.n), (rows, c.n), I32)
        mm(torch.from_numpy(ac), torch.from_numpy(bc), out=torch.from_numpy(p))
        store(flat_rows(state, "acc_bytes", I32), s0, s1, p, ac, bc, c.za, c.zb, c.kab, c.a0,
              c.asr, c.add)

    def step(state: MachineState) -> None:
        ns = state.batch or 1
        if bytes_uniform(state.sram, *c.b_span):
            gemm_rows(state, 0, ns, 0)
        else:
            for s in range(ns):
                gemm_rows(state, s, s + 1, s)
    return step


def _f32_steps(c: Matmul) -> Step:
    """float32 GEMMs of exact integers (``gemm.f32_products``), one sample or each sample of
    a batch; operands of ``PACK_MIN_VALUES`` values and more kept with their SRAM bytes."""
    pk, store = jit.compiled(pack_f32), jit.compiled(gemm.store_f32)
    keep_a, keep_b = c.m * c.k >= PACK_MIN_VALUES, c.k * c.n >= PACK_MIN_VALUES
    a_span = extent(c.a_key[1], (c.m, c.k), c.a_s, 1)

    def packed(state: MachineState, s: int, key: tuple, span: tuple[int, int], keep: bool,
               shape: tuple[int, int], zp: np.int64) -> tuple[np.ndarray, int, int]:
        src = c.b_of(state, s) if key is c.b_key else memory_view(state, key)[s]
        if keep and state.batch is None:
            raw = state.sram[span[0]:span[1]].tobytes()
            packs = state.pool.packs
            entry = packs.get(("mmf", key, zp))
            if entry is None or entry[0] != raw:
                buf = np.empty(shape, F32)
                entry = packs.put(("mmf", key, zp), (raw, buf, *pk(src, zp, buf)))
            return entry[1], entry[2], entry[3]
        buf = state.pool.get(("mmf", key[1:4]), shape, F32)
        return (buf, *pk(src, zp, buf))

    def step(state: MachineState) -> None:
        acc = flat_rows(state, "acc_bytes", I32)
        for s in range(state.batch or 1):
            a, l1, _ = packed(state, s, c.a_key, a_span, keep_a, (c.m, c.k), c.za)
            b, _, bm = packed(state, s, c.b_key, c.b_span, keep_b, (c.k, c.n), c.zb)
            out = state.pool.get(("mmf_out", c.m, c.n), (c.m, c.n), F32)
            gemm.f32_products(a, b, out, c.k <= c.chunk or l1 * bm < gemm.F32_EXACT, c.chunk,
                              lambda r, more, s=s: store(acc, s, s + 1, r, c.a0, c.asr,
                                                         c.add or more))
    return step
