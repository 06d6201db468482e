"""The exact integer GEMM under CONV and MATMUL, and the accumulator stores around it.

CONV and MATMUL sum ``(a - a_zp) (b - b_zp)`` over K into a wrapping int32 accumulator. The
products come from a GEMM library, in one of two exact forms (which one changes speed only,
never a result):

* int8: ``p = a @ b`` by ``torch._int_mm`` on the int8 operands as stored, exact in int32
  for ``K <= INT_MM_K_MAX``, used where a worst-case self-test proves it exact on this host
  and it beats float32 BLAS (``int_mm``); the zero points are then the terms of
  ``sum (a - za)(b - zb) = p - za colsum(b) - zb rowsum(a) + K za zb``, added by
  ``store_int`` in int64 and wrapped to int32 on the store (every term is exact in int64, so
  the store is the exact sum modulo 2^32, which is all the accumulator keeps);
* float32: the operands minus their zero points as float32 (exact: ``|v| <= 383``) through
  numpy's BLAS; one GEMM is exact when every partial sum is an integer below 2^24 in any
  summation order (``K <= chunk_len``, or ``max_i sum_k |a| * max |b| < 2^24`` on the data),
  else K is split into chunks of ``chunk_len`` (each exact), added by ``store_f32`` in
  wrapping int32.

Hosts differ by 30-70x on the int8 GEMM: with AMX / AVX-512 VNNI ``torch._int_mm`` ran 4-10x
float32 BLAS; on an AVX2-only host about 1 GMAC/s against 30-80 (docs/architecture.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tessel.sim import jit
from tessel.threads import single_threaded

F32 = np.dtype(np.float32)
I64 = np.int64
F32_EXACT = 2**24
INT_MM_K_MAX = (2**31 - 1) // (128 * 128)  # K int8 x int8 products cannot overflow int32
USE_INT_MM = True  # tests turn it off to run the float32 form; the self-test may too
FORCE_INT_MM = False  # tests turn it on to run the int8 form where it is exact but slow
SPEED_PROBE = (256, 576, 64)  # (m, k, n): a 3x3 conv tile of 64 input / output channels
_INT_MM: list = []  # [torch._int_mm or None]: exact on this host, decided once per process
_INT_MM_FAST: list = []  # [bool]: faster than the float32 GEMM here, decided once
_INT_MM_OUT: list = []  # [exact_int_mm() if its out= form is exact too, else None]


def chunk_len(a_zp: int, b_zp: int) -> int:
    """The longest reduction whose partial sums all stay exact in float32."""
    def span(zp: int) -> int:
        return max(abs(-128 - zp), abs(127 - zp))
    return max(1, (F32_EXACT - 1) // (span(a_zp) * span(b_zp)))


def kab_term(k: int, a_zp: int, b_zp: int) -> np.int64:
    """``K a_zp b_zp`` modulo 2^32, as a signed int64 in int32's range."""
    return I64((k * a_zp * b_zp + 2**31) % 2**32 - 2**31)


@jit.helper
def wrap32(v):
    """``v`` modulo 2^32 in int32's range (compiled, the store truncates alike; uncompiled,
    numpy refuses an int64 outside int32)."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@jit.kernel
def store_int(acc, s0, s1, p, a, b, za, zb, kab, a0, asr, add):
    """For samples ``s0 .. s1 - 1`` (``acc``: every sample's flat int32 accumulator; ``p``,
    ``a``: their rows one sample after another): ``acc[s, a0 + i asr + j] = wrap32(p[i, j] -
    za colsum(b)[j] - zb rowsum(a)[i] + kab)`` (``add``: plus the entry's old value). ``p =
    a @ b`` int32; ``a`` / ``b`` the int8 operands as stored (any strides), their sums in
    int32 (exact: at most 14.7M terms of at most 128), computed where their zero point is
    not 0."""
    rows, n = p.shape
    m = rows // (s1 - s0)
    k = b.shape[0]
    cols = np.zeros(n, np.int32)
    if za != 0:  # four rows a pass: a row of B is short (16-64), its loop's overhead is not
        k4 = k - k % 4
        for t in range(0, k4, 4):
            b0, b1, b2, b3 = b[t], b[t + 1], b[t + 2], b[t + 3]
            for j in range(n):
                cols[j] += np.int32(b0[j]) + np.int32(b1[j]) + np.int32(b2[j]) + np.int32(b3[j])
        for t in range(k4, k):
            br = b[t]
            for j in range(n):
                cols[j] += br[j]
    col = cols.astype(np.int64) * za
    for s in range(s0, s1):
        accs = acc[s]
        for i in range(m):
            r = (s - s0) * m + i
            row = kab
            if zb != 0:
                ar = a[r]
                t = np.int32(0)
                for q in range(k):
                    t += ar[q]
                row = kab - zb * np.int64(t)
            pr = p[r]
            yr = accs[a0 + i * asr:a0 + i * asr + n]
            if add:
                for j in range(n):
                    yr[j] = wrap32(np.int64(yr[j]) + pr[j] - col[j] + row)
            else:
                for j in range(n):
                    yr[j] = wrap32(np.int64(pr[j]) - col[j] + row)


@jit.kernel
def store_f32(acc, s0, s1, r, a0, asr, add):
    """For samples ``s0 .. s1 - 1``: ``acc[s, a0 + i asr + j] = r[i, j]`` (exact integers
    below 2^24 in float32, one sample's rows after another; ``add``: ``wrap32(entry +
    r)``)."""
    rows, n = r.shape
    m = rows // (s1 - s0)
    for s in range(s0, s1):
        accs = acc[s]
        for i in range(m):
            yr = accs[a0 + i * asr:a0 + i * asr + n]
            rr = r[(s - s0) * m + i]
            if add:
                for j in range(n):
                    yr[j] = wrap32(np.int64(yr[j]) + np.int64(rr[j]))
            else:
                for j in range(n):
                    yr[j] = np.int32(rr[j])


def f32_products(a: np.ndarray, b: np.ndarray, out: np.ndarray, exact: bool, chunk: int,
                 store: Callable[[np.ndarray, bool], None]) -> None:
    """``store(a @ b, add)`` by float32 GEMMs into ``out``: one when ``exact`` (the bound
    holds), else one per chunk of ``chunk`` along K, each exact, the later ones added."""
    k = a.shape[1]
    if exact:
        store(np.dot(a, b, out=out), False)
        return
    for lo in range(0, k, chunk):
        store(np.dot(a[:, lo:lo + chunk], b[lo:lo + chunk], out=out), lo > 0)


# ---- the int8 GEMM ----------------------------------------------------------------------------
def int_mm() -> Callable[..., Any] | None:
    """The int8 GEMM the simulator runs: ``exact_int_mm()`` with its ``out=`` form
    (``int_mm_out``) where it is also faster than the float32 GEMM here (``int_mm_fast``),
    else None (the float32 GEMMs of exact integers)."""
    fn = int_mm_out() if USE_INT_MM else None
    if fn is None or FORCE_INT_MM:
        return fn
    return fn if int_mm_fast() else None


def exact_int_mm() -> Callable[..., Any] | None:
    """``torch._int_mm`` (int8 x int8 -> int32) if torch has it and it is exact on this host,
    else None. Exact means a self-test against int64 numpy on worst-case operands (every
    product +-2^14, sums near 2^31, odd shapes): a kernel that saturates a 16-bit pair sum
    (AVX2 ``pmaddubsw``) or an int32 accumulator fails it."""
    if not _INT_MM:
        fn = None
        try:
            import torch

            fn = torch._int_mm
            rng = np.random.default_rng(0)
            for m, k, n in ((1, 8, 1), (37, 4099, 19), (5, INT_MM_K_MAX, 3), (130, 577, 33),
                            (1, 4099, 7), (9, 4099, 1)):
                for a, b in (
                        (np.full((m, k), -128), np.full((k, n), -128)),
                        (np.full((m, k), 127), np.full((k, n), 127)),
                        (np.full((m, k), 127), np.full((k, n), -128)),
                        (rng.choice([-128, 127], (m, k)), rng.choice([-128, 127], (k, n))),
                        (rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (k, n)))):
                    a8, b8 = a.astype(np.int8), b.astype(np.int8)
                    got = fn(torch.from_numpy(a8), torch.from_numpy(b8)).numpy()
                    if got.dtype != np.int32 or not np.array_equal(
                            got, a8.astype(I64) @ b8.astype(I64)):
                        fn = None
                        break
                if fn is None:
                    break
        except Exception:  # no torch, no _int_mm, or a kernel that refuses a shape
            fn = None
        _INT_MM.append(fn)
    return _INT_MM[0]


def int_mm_out() -> Callable[..., Any] | None:
    """``exact_int_mm()`` if its ``out=`` form gives the exact sums too on worst-case
    operands, else None."""
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


def int_mm_fast() -> bool:
    """Whether ``exact_int_mm()`` beats the float32 GEMM (numpy's BLAS) on a conv-sized tile
    (``SPEED_PROBE``) here: the best of three timed calls each, after a warm-up, once per
    process, one thread each (as the simulator runs them: ``single_threaded``)."""
    if not _INT_MM_FAST:
        fn = exact_int_mm()
        fast = False
        if fn is not None:
            import torch

            m, k, n = SPEED_PROBE
            rng = np.random.default_rng(1)
            a8 = rng.integers(-128, 128, (m, k)).astype(np.int8)
            b8 = rng.integers(-128, 128, (k, n)).astype(np.int8)
            ta, tb = torch.from_numpy(a8), torch.from_numpy(b8)
            af, bf = a8.astype(F32), b8.astype(F32)
            out = np.empty((m, n), F32)
            with single_threaded():
                fast = _best_of(lambda: fn(ta, tb)) < _best_of(lambda: np.dot(af, bf, out=out))
        _INT_MM_FAST.append(fast)
    return _INT_MM_FAST[0]


def _best_of(call: Callable[[], Any], runs: int = 3) -> float:
    call()  # warm-up
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best
