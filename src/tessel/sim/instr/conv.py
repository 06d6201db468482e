"""CONV: docs/isa.md's convolution tile as an im2col GEMM with exact integer results.

The window of every output pixel is fixed by the fields alone, so the builder lists once, in
numpy index arithmetic, where each element of the im2col matrix ``A`` (``M = out_h out_w``
rows, ``K = kh kw cin`` columns in the weights' order ``(ky kw + kx) cin + ci``) comes from:
an SRAM element, or the padding (``runs_of``: runs of consecutive elements, a window row of
``kw cin`` bytes when the input is dense). ``B`` (K x cout) is listed the same way from the
weight strides. Two compiled loops then copy the runs (``pack_i8`` / ``pack_f32``), the GEMM
multiplies (``tessel.sim.gemm``: ``torch._int_mm`` on the int8 operands as stored, the
padding holding ``in_zp`` so that it contributes ``(in_zp - in_zp) = 0``, or float32 BLAS on
``x - in_zp``, the padding 0), and ``gemm.store_int`` / ``store_f32`` write or add the
accumulator rows ``acc_addr + p acc_stride``.

int4 weights (``w_type`` I4) are unpacked first (``Conv.weights``: each weight's nibble,
sign-extended, into a dense int8 ``K x cout`` matrix read by one run); the GEMMs are the same.
2:4 sparse weights (I8_2_4 / I4_2_4) are decoded into that dense matrix the same way
(tessel.isa.sparse24.decode: each value at the position its index names, zeros elsewhere): the
skipped weights are zeros, so the products are those of the dense GEMM; a group whose indices
are not increasing traps.

An operand that is its SRAM bytes in order (a 1x1 tile's dense input, dense HWIO weights) is
read in place by the int8 GEMM. A batch packs every sample's rows into one ``A`` (up to
``BATCH_GEMM_BYTES`` at a time) for one GEMM when the samples' weight bytes agree, else runs
each sample with its own weights. float32 packs of ``PACK_MIN_VALUES`` values and more are
kept with the bytes they came from (``hostmem.PackCache``): a resident input serves every
output-channel chunk, and any changed byte packs it again.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tessel.isa import sparse24
from tessel.isa.fields import AccMode
from tessel.isa.instrs.matrix import WeightType, conv_weight_span
from tessel.sim import gemm, jit
from tessel.sim.hostmem import (
    F32,
    I8,
    I32,
    PACK_MIN_VALUES,
    Step,
    Views,
    bindable,
    bytes_uniform,
    flat_rows,
)
from tessel.sim.prepare import Op
from tessel.sim.state import MachineState, Trap

I64 = np.int64
BATCH_GEMM_BYTES = 8 << 20  # a batch's CONV: samples per GEMM, by their im2col bytes
INT_MM_MIN_MACS = 300_000  # one sample's tiles from here on: the int8 GEMM (when fast here)


def runs_of(src: np.ndarray, width: int) -> np.ndarray:
    """``(R, 3)`` int64 runs ``(destination offset, source element or -1, length)`` copying a
    matrix of rows of ``src.shape[1]`` blocks of ``width`` elements, block ``(i, j)`` from the
    ``width`` consecutive source elements at ``src[i, j]`` (-1: padding): maximal runs of
    blocks that continue each other in the source (or are all padding) within one row."""
    rows, blocks = src.shape
    flat = src.reshape(-1)
    pad = flat < 0
    cont = np.zeros(flat.size, bool)
    cont[1:] = ((flat[1:] == flat[:-1] + width) & ~pad[1:] & ~pad[:-1]) | (pad[1:] & pad[:-1])
    cont[::blocks] = False
    starts = np.flatnonzero(~cont)
    lengths = np.diff(np.append(starts, flat.size)) * width
    return np.stack([starts * width, np.where(pad[starts], -1, flat[starts]), lengths],
                    1).astype(I64)


def window_runs(f: dict[str, Any]) -> tuple[np.ndarray, tuple[int, int], bool]:
    """``runs_of`` the im2col matrix ``(M, K)`` of a CONV, its blocks the ``cin`` channels of
    one window position (docs/isa.md's loop indices; -1 where the position lies in the
    padding); with the SRAM bytes it reads ([lo, hi), empty if none) and whether it has
    padding."""
    oy, ox, ky, kx = np.ix_(*(np.arange(n) for n in (f["out_h"], f["out_w"], f["kh"], f["kw"])))
    iy = oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"]
    ix = ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"]
    inside = (iy >= 0) & (iy < f["in_h"]) & (ix >= 0) & (ix < f["in_w"])
    src = np.where(inside, f["in_addr"] + iy * f["in_stride_h"] + ix * f["in_stride_w"], -1)
    src = src.reshape(f["out_h"] * f["out_w"], -1)
    real = src[src >= 0]
    span = (int(real.min()), int(real.max()) + f["cin"]) if real.size else (0, 0)
    return runs_of(src, f["cin"]), span, bool(real.size < src.size)


def weight_runs(f: dict[str, Any]) -> np.ndarray:
    """``runs_of`` the weights ``(K, cout)``, row ``(ky kw + kx) cin + ci`` (blocks of
    ``cout`` when the output channels are contiguous, else single weights)."""
    t, ci, co = np.ix_(np.arange(f["kh"] * f["kw"]), np.arange(f["cin"]), np.arange(f["cout"]))
    src = f["w_addr"] + t * f["w_stride_k"] + ci * f["w_stride_ci"] + co * f["w_stride_co"]
    src = src.reshape(-1, f["cout"])
    if f["w_stride_co"] == 1:
        return runs_of(src[:, :1], f["cout"])
    return runs_of(src, 1)


def weight_nibbles(f: dict[str, Any], rows: int | None = None, per_byte: int = 2
                   ) -> np.ndarray:
    """The element index (nibble index for int4) of every weight, as the ``(K, cout)`` matrix
    in row order (``rows`` input channels: ``cin``, or ``cin / 2`` values of 2:4 weights)."""
    rows = f["cin"] if rows is None else rows
    t, ci, co = np.ix_(np.arange(f["kh"] * f["kw"]), np.arange(rows), np.arange(f["cout"]))
    n = per_byte * f["w_addr"] + t * f["w_stride_k"] + ci * f["w_stride_ci"] \
        + co * f["w_stride_co"]
    return n.reshape(-1).astype(I64)


class SparseWeights:
    """The dense int8 ``K x cout`` weights of a CONV's 2:4 sparse ones (values and index
    nibbles, tessel.isa.sparse24), decoded again only when their bytes change."""

    def __init__(self, f: dict[str, Any], wt: WeightType, span: tuple[int, int]) -> None:
        taps, cin, cout = f["kh"] * f["kw"], f["cin"], f["cout"]
        self.shape = (taps, cin // 2, cout), (taps, cin // 4, cout)
        self.int4 = wt.values is WeightType.I4
        self.values = weight_nibbles(f, cin // 2, wt.per_byte)
        meta = span[1] - sparse24.index_bytes(taps, cin, cout)  # the indices end the span
        self.meta = 2 * meta + np.arange(taps * cin // 4 * cout, dtype=I64)
        self.last: list = [None, None]

    def __call__(self, row: np.ndarray) -> np.ndarray:
        raw = row.view(np.uint8)
        key = (raw[self.values >> 1] if self.int4 else raw[self.values],
               raw[self.meta >> 1])
        if self.last[0] is not None and all(np.array_equal(a, b)
                                            for a, b in zip(self.last[0], key, strict=True)):
            return self.last[1]
        v = unpack_int4(row, self.values) if self.int4 else row[self.values].view(np.int8)
        nib = (raw[self.meta >> 1] >> ((self.meta & 1) << 2).astype(np.uint8)) & 0xF
        try:
            dense = sparse24.decode(v.reshape(self.shape[0]), nib.reshape(self.shape[1]))
        except ValueError as exc:
            raise Trap(f"CONV: {exc}") from None
        self.last[:] = key, dense.reshape(-1)
        return self.last[1]


def unpack_int4(row: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    """The int8 values of the signed 4-bit elements at ``nibbles`` of the bytes ``row``: the
    low half of byte ``n >> 1`` for an even ``n``, the high half for an odd one."""
    v = (row.view(np.uint8)[nibbles >> 1] >> ((nibbles & 1) << 2).astype(np.uint8)) & 0xF
    return ((v ^ 8).astype(np.int8) - 8).astype(np.int8)


@jit.kernel
def pack_i8(x, s0, s1, runs, pad, a):
    """The rows of samples ``s0 .. s1 - 1`` (``x``: every sample's SRAM, flat int8) into
    ``a`` (flat int8, one sample's rows after another) as stored, ``pad`` in the padding."""
    per = a.size // (s1 - s0)
    fill = np.int8(pad)
    for s in range(s0, s1):
        xs = x[s]
        base = (s - s0) * per
        for r in range(runs.shape[0]):
            d, src, n = base + runs[r, 0], runs[r, 1], runs[r, 2]
            dst = a[d:d + n]  # (slices, then a loop: 8x faster than a slice assignment)
            if src < 0:
                for j in range(n):
                    dst[j] = fill
            else:
                xr = xs[src:src + n]
                for j in range(n):
                    dst[j] = xr[j]


@jit.helper
def pack_rows_f32(xs, base, runs, zp, a, sums, bound):
    """The runs of one sample's SRAM ``xs`` into ``a`` from ``base`` as float32 ``x - zp``
    (exact: ``|x - zp| <= 383``), 0 in the padding. ``bound``: also ``sums[row]``, the row's
    sum of ``|x - zp|`` (rows of ``len(a) // len(sums)`` elements from ``base``), and the
    largest ``|x - zp|``, returned; else 0."""
    width = len(a) // len(sums)
    fz = np.float32(zp)  # int8 -> float32 minus a float32 vectorises; int64 -> float32 not
    big = 0
    for r in range(runs.shape[0]):
        d, src, n = base + runs[r, 0], runs[r, 1], runs[r, 2]
        dst = a[d:d + n]
        if src < 0:
            for j in range(n):
                dst[j] = 0
            continue
        xr = xs[src:src + n]
        if not bound:
            for j in range(n):
                dst[j] = np.float32(xr[j]) - fz
            continue
        t = 0
        lo, hi = np.int8(127), np.int8(-128)
        for j in range(n):
            v = xr[j]
            dst[j] = np.float32(v) - fz
            t += abs(np.int64(v) - zp)
            lo, hi = min(lo, v), max(hi, v)
        sums[(d - base) // width] += t
        big = max(big, abs(np.int64(lo) - zp), abs(np.int64(hi) - zp))
    return big


@jit.kernel
def pack_f32(x, s0, s1, runs, zp, a, sums, bound):
    """``pack_rows_f32`` for samples ``s0 .. s1 - 1``, one after another (``sums``: every
    row's). Returns the largest row sum and the largest ``|x - zp|`` (0, 0 without
    ``bound``): the factors of the exactness bound of a left and a right operand."""
    per = len(a) // (s1 - s0)
    rows = len(sums) // (s1 - s0)
    sums[:] = 0
    big = 0
    for s in range(s0, s1):
        k = s - s0
        big = max(big, pack_rows_f32(x[s], 0, runs, zp, a[k * per:(k + 1) * per],
                                     sums[k * rows:(k + 1) * rows], bound))
    return (sums.max() if len(sums) else 0), big


@jit.kernel
def pack_f32_pair(x, a_runs, b_runs, in_zp, w_zp, a, b, sums, cols, bound):
    """Both operands of one sample (one call: ~1 us less than two, on tiles of a few us).
    Returns the exactness bound ``max_p sum_k |a[p, k]| * max |b|`` (0 without ``bound``)."""
    xs = x[0]
    sums[:] = 0
    pack_rows_f32(xs, 0, a_runs, in_zp, a, sums, bound)
    bm = pack_rows_f32(xs, 0, b_runs, w_zp, b, cols, bound)
    return (sums.max() if len(sums) else 0) * bm


class Conv:
    """One CONV's fields and operand layout as its steps use them."""

    def __init__(self, op: Op) -> None:
        f = op.f
        self.m, self.cout = f["out_h"] * f["out_w"], f["cout"]
        self.k = f["kh"] * f["kw"] * f["cin"]
        self.in_zp, self.w_zp = f["in_zp"], f["w_zp"]
        self.a0, self.asr = f["acc_addr"], f["acc_stride"]
        self.add = f["mode"] == AccMode.ACCUMULATE
        self.a_runs, self.a_span, self.padded = window_runs(f)
        wt = WeightType(f["w_type"])
        self.w_span = conv_weight_span(f["w_addr"], f["kh"], f["kw"], f["cin"], f["cout"],
                                       f["w_stride_k"], f["w_stride_ci"], f["w_stride_co"], wt)
        # int4 or 2:4 weights: their int8 matrix, (K, cout) in row order, from the SRAM row
        self.unpack: Any = None
        if wt.sparse:
            self.unpack = SparseWeights(f, wt, self.w_span)
        elif wt is WeightType.I4:
            self.unpack = functools.partial(unpack_int4, nibbles=weight_nibbles(f))
        # unpacked: the runs read the unpacked matrix (``weights``), one run of all of it
        self.b_runs = weight_runs(f) if self.unpack is None else \
            np.array([[0, 0, self.k * self.cout]], I64)
        # an operand that is its SRAM bytes in order (one run covering the whole matrix) is
        # read in place: a 1x1 tile's dense input, dense HWIO weights
        self.a_at = _whole(self.a_runs, self.m * self.k)
        self.b_at = _whole(self.b_runs, self.k * self.cout) if self.unpack is None else None
        self.chunk = gemm.chunk_len(self.in_zp, self.w_zp)
        self.kab = gemm.kab_term(self.k, self.in_zp, self.w_zp)
        # what a kept packed operand is a function of, besides the bytes it reads
        self.b_key = tuple(f[n] for n in ("w_addr", "w_stride_k", "w_stride_ci", "w_stride_co",
                                          "kh", "kw", "cin", "cout", "w_zp", "w_type"))
        self.a_key = tuple(f[n] for n in (
            "in_addr", "in_stride_h", "in_stride_w", "in_h", "in_w", "cin", "in_zp", "kh", "kw",
            "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_left", "out_h", "out_w"))

    def weights(self, x: np.ndarray, s: int) -> tuple[np.ndarray, int]:
        """(memory rows, row) that ``b_runs`` read sample ``s``'s weights from: the SRAM
        ``x`` itself, or for int4 and 2:4 weights their unpacked matrix (one row)."""
        if self.unpack is None:
            return x, s
        return self.unpack(x[s])[None], 0


def _whole(runs: np.ndarray, size: int) -> int | None:
    """The first SRAM byte of an operand whose ``size`` bytes are its SRAM bytes in order
    (every run continues the one before, no padding), else None."""
    base = int(runs[0, 1])
    if base >= 0 and (runs[:, 1] - runs[:, 0] == base).all() and int(runs[:, 2].sum()) == size:
        return base
    return None


def build(op: Op, prep: Any) -> Step:
    """The CONV step: the int8 GEMM where this host has a fast exact one (``gemm.int_mm``)
    and the tile is large (``INT_MM_MIN_MACS``), reads its input in place (a 1x1 tile's dense
    input: nothing to pack, where the float32 GEMM packs ``x - in_zp``) or is a batch, else
    float32 GEMMs. ``in_type`` I16: the wide path (``tessel.sim.instr.wide``)."""
    if op.f["in_type"]:
        from tessel.sim.instr import wide

        return wide.build_conv(op, prep)
    c = Conv(op)
    mm = gemm.int_mm()
    int8_ok = mm is not None and c.k <= gemm.INT_MM_K_MAX and (
        not c.padded or -128 <= c.in_zp <= 127)
    small = c.m * c.k * c.cout < INT_MM_MIN_MACS
    many = _int8_many(c, mm) if int8_ok else _f32_many(c)
    int8_one = int8_ok and (not small or c.a_at is not None)
    return _int8_one(c, mm, many) if int8_one else _f32_one(c, many)


def _int8_one(c: Conv, mm: Any, many: Step) -> Step:
    """One sample: ``A`` and ``B`` packed into pooled buffers or read in place, one GEMM into
    a pooled buffer (or the accumulator itself: both zero points 0, overwritten, dense rows),
    the zero points' terms and the store (``gemm.store_int``)."""
    import torch

    pk, store = jit.compiled(pack_i8), jit.compiled(gemm.store_int)
    za, zb = I64(c.in_zp), I64(c.w_zp)
    pad = c.in_zp if c.padded else 0
    direct = not (za or zb or c.add) and c.asr == c.cout
    m, k, n = c.m, c.k, c.cout

    def make(state: MachineState) -> tuple:
        pool, x = state.pool, flat_rows(state, "sram", I8)
        acc = flat_rows(state, "acc_bytes", I32)
        a = x[0, c.a_at:c.a_at + m * k] if c.a_at is not None else \
            pool.get(("conv_a8", m, k), (m * k,), I8)
        b = x[0, c.b_at:c.b_at + k * n] if c.b_at is not None else \
            pool.get(("conv_b8", k, n), (k * n,), I8)
        p = acc[0, c.a0:c.a0 + m * n] if direct else pool.get(("conv_p", m, n), (m * n,), I32)
        a2, b2, p2 = a.reshape(m, k), b.reshape(k, n), p.reshape(m, n)
        return (x, acc, a, b, a2, b2, p2, torch.from_numpy(a2), torch.from_numpy(b2),
                torch.from_numpy(p2))
    views = Views(make)

    def run(x: np.ndarray, acc: np.ndarray, a: np.ndarray, b: np.ndarray, a2: np.ndarray,
            b2: np.ndarray, p: np.ndarray, ta: Any, tb: Any, tp: Any, pk_a: Any = pk,
            pk_b: Any = pk, store: Any = store) -> None:
        if c.a_at is None:
            pk_a(x, 0, 1, c.a_runs, pad, a)
        if c.b_at is None:
            src, ws = c.weights(x, 0)
            pk_b(src, ws, ws + 1, c.b_runs, 0, b)
        mm(ta, tb, out=tp)
        if not direct:
            store(acc, 0, 1, p, a2, b2, za, zb, c.kab, c.a0, c.asr, c.add)

    def step(state: MachineState) -> None:
        if state.batch is not None:
            many(state)
            return
        run(*views.get(state))

    def bind(state: MachineState) -> object:
        kept = views.get(state)
        x, acc, a, b, a2, b2, p = kept[:7]
        if c.unpack is not None:
            return functools.partial(run, *kept)
        return functools.partial(run, *kept, jit.entry(pk, x, 0, 1, c.a_runs, pad, a),
                                 jit.entry(pk, x, 0, 1, c.b_runs, 0, b),
                                 jit.entry(store, acc, 0, 1, p, a2, b2, za, zb, c.kab, c.a0,
                                           c.asr, c.add))
    return bindable(step, bind)


def _int8_many(c: Conv, mm: Any) -> Step:
    """A batch: every sample's rows of ``A`` packed into one matrix (up to BATCH_GEMM_BYTES)
    for one GEMM with the weights when the samples' weight bytes agree, else one GEMM per
    sample with its own."""
    import torch

    pk, store = jit.compiled(pack_i8), jit.compiled(gemm.store_int)
    za, zb = I64(c.in_zp), I64(c.w_zp)
    pad = c.in_zp if c.padded else 0
    m, k, n = c.m, c.k, c.cout

    def run(state: MachineState, x: np.ndarray, acc: np.ndarray, s0: int, s1: int,
            ws: int) -> None:
        pool, rows = state.pool, (s1 - s0) * m
        b = pool.get(("convb_b8", k, n), (k, n), I8)
        src, ws = c.weights(x, ws)
        pk(src, ws, ws + 1, c.b_runs, 0, b.reshape(-1))
        a = pool.get(("convb_a8", rows, k), (rows, k), I8)
        p = pool.get(("convb_p", rows, n), (rows, n), I32)
        pk(x, s0, s1, c.a_runs, pad, a.reshape(-1))
        mm(torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(p))
        store(acc, s0, s1, p, a, b, za, zb, c.kab, c.a0, c.asr, c.add)

    def step(state: MachineState) -> None:
        x, acc = flat_rows(state, "sram", I8), flat_rows(state, "acc_bytes", I32)
        ns = x.shape[0]
        if bytes_uniform(state.sram, *c.w_span):
            nb = max(1, min(ns, BATCH_GEMM_BYTES // (m * k)))
            for s0 in range(0, ns, nb):
                run(state, x, acc, s0, min(ns, s0 + nb), 0)
            return
        for s in range(ns):  # each sample's own weights
            run(state, x, acc, s, s + 1, s)
    return step


def _f32_one(c: Conv, many: Step) -> Step:
    """One sample: both operands packed as float32 in one call (large ones kept with their
    SRAM bytes, ``hostmem.PackCache``), one float32 GEMM when the bound holds
    (``gemm.f32_products``: else K in exact chunks) and the store."""
    pair, pk = jit.compiled(pack_f32_pair), jit.compiled(pack_f32)
    store = jit.compiled(gemm.store_f32)
    proved = c.k <= c.chunk  # every partial sum below 2^24 whatever the data
    m, k, n = c.m, c.k, c.cout
    keep_a, keep_b = m * k >= PACK_MIN_VALUES, k * n >= PACK_MIN_VALUES

    def make(state: MachineState) -> tuple:
        pool = state.pool
        a = pool.get(("conv_fa", m, k), (m, k), F32)
        b = pool.get(("conv_fb", k, n), (k, n), F32)
        return (flat_rows(state, "sram", I8), flat_rows(state, "acc_bytes", I32), a, b,
                pool.get(("conv_fr", m, n), (m, n), F32), pool.get(("conv_fs", m), (m,), I64),
                pool.get(("conv_fk", k), (k,), I64), a.reshape(-1), b.reshape(-1))
    views = Views(make)
    a_runs, b_runs, in_zp, w_zp, a0, asr, add = c.a_runs, c.b_runs, c.in_zp, c.w_zp, c.a0, \
        c.asr, c.add
    dot, exact = np.dot, gemm.F32_EXACT

    def kept(state: MachineState, x: np.ndarray, which: str) -> tuple[np.ndarray, int, int]:
        """(matrix, largest row sum, largest |value|) of A or B, kept with its bytes."""
        span, key = (c.a_span, c.a_key) if which == "a" else (c.w_span, c.b_key)
        raw = x[0, span[0]:span[1]].tobytes()
        packs = state.pool.packs
        entry = packs.get((which, key))
        if entry is None or entry[0] != raw:
            rows, cols = (m, k) if which == "a" else (k, n)
            runs, zp = (c.a_runs, c.in_zp) if which == "a" else (c.b_runs, c.w_zp)
            buf = entry[1] if entry is not None else np.empty((rows, cols), F32)
            src, s = (x, 0) if which == "a" else c.weights(x, 0)
            entry = packs.put((which, key), (raw, buf, *pk(src, s, s + 1, runs, zp,
                                                           buf.reshape(-1), np.empty(rows, I64),
                                                           True)))
        return entry[1], entry[2], entry[3]

    def step(state: MachineState) -> None:
        if state.batch is not None:
            many(state)
            return
        x, acc, a, b, r, sums, cols, af, bf = views.get(state)
        if keep_a or keep_b or c.unpack is not None:
            if keep_a:
                a, l1, _ = kept(state, x, "a")
            else:
                l1, _ = pk(x, 0, 1, c.a_runs, c.in_zp, a.reshape(-1), sums, not proved)
            if keep_b:
                b, _, bm = kept(state, x, "b")
            else:
                src, ws = c.weights(x, 0)
                _, bm = pk(src, ws, ws + 1, c.b_runs, c.w_zp, b.reshape(-1), cols, not proved)
            bound = l1 * bm
        else:
            bound = pair(x, a_runs, b_runs, in_zp, w_zp, af, bf, sums, cols, not proved)
        if proved or bound < exact:
            store(acc, 0, 1, dot(a, b, out=r), a0, asr, add)
            return
        gemm.f32_products(a, b, r, False, c.chunk,
                          lambda part, more: store(acc, 0, 1, part, a0, asr, add or more))
    return step


def _f32_many(c: Conv) -> Step:
    """A batch (on a host without a fast exact int8 GEMM): float32 GEMMs of each group of
    samples with the same weights (``gemm.f32_products``)."""
    pk, store = jit.compiled(pack_f32), jit.compiled(gemm.store_f32)
    proved = c.k <= c.chunk
    m, k, n = c.m, c.k, c.cout

    def run(state: MachineState, x: np.ndarray, acc: np.ndarray, s0: int, s1: int,
            ws: int) -> None:
        pool, rows = state.pool, (s1 - s0) * m
        b = pool.get(("convf_b", k, n), (k, n), F32)
        src, ws = c.weights(x, ws)
        _, bm = pk(src, ws, ws + 1, c.b_runs, c.w_zp, b.reshape(-1), np.empty(k, I64), True)
        a = pool.get(("convf_a", rows, k), (rows, k), F32)
        l1, _ = pk(x, s0, s1, c.a_runs, c.in_zp, a.reshape(-1),
                   pool.get(("convf_s", rows), (rows,), I64), True)
        out = pool.get(("convf_r", rows, n), (rows, n), F32)

        gemm.f32_products(a, b, out, proved or l1 * bm < gemm.F32_EXACT, c.chunk,
                          lambda r, more: store(acc, s0, s1, r, c.a0, c.asr, c.add or more))

    def step(state: MachineState) -> None:
        x, acc = flat_rows(state, "sram", I8), flat_rows(state, "acc_bytes", I32)
        ns = x.shape[0]
        if not bytes_uniform(state.sram, *c.w_span):
            for s in range(ns):
                run(state, x, acc, s, s + 1, s)
            return
        nb = max(1, min(ns, BATCH_GEMM_BYTES // (4 * m * k)))
        for s0 in range(0, ns, nb):
            run(state, x, acc, s0, min(ns, s0 + nb), 0)
    return step
