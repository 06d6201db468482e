"""CONV for one sample as two compiled loops around one BLAS GEMM (``tessel.sim.jit``), for
the simulator's fast path when kernels are on; ``fastpath._build_conv`` otherwise, for a batch
and for the large tiles its int8 GEMM does faster (``kernel_wins``).

Why: most CONV tiles of a mobile network are small 1x1 GEMMs (10^5-10^6 products), where
``_build_conv``'s numpy passes (zero points into float32 operands, the exactness bound's
row sums, the store: ~1-2 us each) cost as much as the GEMM. Here ``conv_pack`` writes the
float32 im2col matrix of ``x - in_zp`` (0 in the padding) and the weights minus ``w_zp`` in
one pass and proves the bound on the way; numpy's ``dot`` (its BLAS, limited to one thread by
``tessel.threads``) multiplies them into a pooled buffer; ``acc_store`` writes or adds the
results into the accumulator rows. Operands of ``PACK_MIN_VALUES`` values and more are
packed by ``conv_pack_a`` / ``conv_pack_b`` into buffers of their own and kept in the pool's
``PackCache`` with a copy of the bytes they were packed from: the next tile reading the same
bytes with the same geometry (a layer's weights for every row tile, a resident input for
every output-channel chunk, both on every run of the program) compares the bytes and reuses
the pack, or packs again in place if any byte differs. (Integer loops in numba, tried first,
ran at 5-15 GMAC/s against BLAS's 40-60: the accumulators of a short output-channel row do
not stay in registers. numba's own ``np.dot`` calls scipy's BLAS, which ``tessel.threads``
may not know about: 12 ms per tile on a shared machine; not used.)

Exactness: every value is an integer with ``|x - in_zp| <= 383`` and ``|w - w_zp| <= 383``.
One float32 GEMM is exact when ``max_p sum_k |a[p, k]| * max |b| < 2^24`` (``conv_pack``'s
return: then every partial sum, in any summation order or with FMA, is an integer below
2^24); else K is split into chunks short enough for the static bound
(``matrix.chunk_len``), each exact, their int32 conversions added in wrapping int32: the
accumulator keeps sums modulo 2^32 (OVERWRITE ``wrap32(s)``, ACCUMULATE ``wrap32(ACC + s)``)
and wrapping additions are exact modulo 2^32.
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fields import AccMode
from tessel.isa.footprint import WINDOW_FACTOR
from tessel.sim import fastpath, jit
from tessel.sim.fastpath import F32, I8, PACK_MIN_VALUES, Step, Views, _build_conv, _frame_parts
from tessel.sim.kern_rq import flat
from tessel.sim.matrix import chunk_len
from tessel.sim.prepare import Op
from tessel.sim.state import I32, MachineState, Trap, extent
from tessel.sim.window import Geometry

I64 = np.int64
F32_EXACT = 2**24
KERNEL_MAX_MACS = 2_000_000  # 1x1 tiles from here on: the int8 GEMM (``kernel_wins``)
# the fields of ``conv_pack``'s ``geo``, in order
GEO = ("x0", "xsh", "xsw", "w0", "wsk", "wsci", "wsco", "a0", "asr", "in_h", "in_w", "cin",
       "cout", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "oh", "ow", "in_zp", "w_zp",
       "accumulate", "proved")


@jit.helper
def _pointwise(x, geo, af):
    """``conv_pack``'s ``a`` of a 1x1 kernel without padding whose samples lie inside the
    tile's columns (``proved``: no bound to compute), ``af``: ``a`` flat; dense input rows
    (unit stride, ``xsw == cin``) as one run of ``ow * cin`` values per output row."""
    x0, xsh, xsw, cin, sh, sw, in_h, oh, ow = geo[0], geo[1], geo[2], geo[11], geo[15], \
        geo[16], geo[9], geo[21], geo[22]
    zp = np.float32(geo[23])
    n = ow * cin
    for oy in range(oh):
        dst = af[oy * n:oy * n + n]
        if oy * sh >= in_h:
            dst[:] = 0
            continue
        row = x0 + oy * sh * xsh
        if sw == 1 and xsw == cin:
            src = x[row:row + n]
            for j in range(n):
                dst[j] = np.float32(src[j]) - zp  # exact: integers, |difference| <= 383
            continue
        for ox in range(ow):
            src = x[row + ox * sw * xsw:row + ox * sw * xsw + cin]
            d = dst[ox * cin:ox * cin + cin]
            for ci in range(cin):
                d[ci] = np.float32(src[ci]) - zp


@jit.helper
def _im2col(x, geo, a, af):
    """``a`` (m, k): the im2col matrix of ``x - in_zp`` (0 in the padding; ``af``: the same
    buffer flat), float32 (exact: |values| <= 383). Returns ``max_p sum_k |a[p, k]|`` (int64,
    exact; 0 where ``_pointwise`` wrote ``a``, which only runs when ``proved``)."""
    x0, xsh, xsw = geo[0], geo[1], geo[2]
    in_h, in_w, cin, kh, kw, sh, sw = geo[9], geo[10], geo[11], geo[13], geo[14], geo[15], \
        geo[16]
    dh, dw, pt, pl, oh, ow, xzp = geo[17], geo[18], geo[19], geo[20], geo[21], geo[22], \
        geo[23]
    l1 = 0
    fz = np.float32(xzp)  # int8 -> float32 minus a float32 vectorises; int64 -> float32 not
    proved = geo[26]
    if proved and kh == 1 and kw == 1 and pt == 0 and pl == 0 and (ow - 1) * sw < in_w:
        _pointwise(x, geo, af)
        oh = 0  # no rows left for the general loop
    for oy in range(oh):
        for ox in range(ow):
            ar = a[oy * ow + ox]
            s = 0
            ix0 = ox * sw - pl
            for ky in range(kh):
                iy = oy * sh - pt + ky * dh
                if dw == 1 and xsw == cin and ix0 >= 0 and ix0 + kw <= in_w and 0 <= iy < in_h:
                    # the window's row: kw * cin contiguous values, in a as in x
                    base = x0 + iy * xsh + ix0 * cin
                    xr = x[base:base + kw * cin]
                    dst = ar[ky * kw * cin:(ky + 1) * kw * cin]
                    t = 0
                    for j in range(kw * cin):
                        dst[j] = np.float32(xr[j]) - fz
                        t += abs(np.int64(xr[j]) - xzp)
                    s += t
                    continue
                for kx in range(kw):
                    ix = ox * sw - pl + kx * dw
                    dst = ar[(ky * kw + kx) * cin:(ky * kw + kx + 1) * cin]
                    if iy < 0 or iy >= in_h or ix < 0 or ix >= in_w:
                        dst[:] = 0
                        continue
                    base = x0 + iy * xsh + ix * xsw
                    xr = x[base:base + cin]
                    t = 0
                    for ci in range(cin):
                        dst[ci] = np.float32(xr[ci]) - fz
                        t += abs(np.int64(xr[ci]) - xzp)
                    s += t
            l1 = max(l1, s)
    return l1


@jit.helper
def _weights(w, geo, b):
    """``b`` (k, cout): ``w - w_zp``, float32 (exact: |values| <= 383). Returns ``max |b|``
    (int64; 0 for dense weights when ``proved``: no bound needed)."""
    w0, wsk, wsci, wsco = geo[3], geo[4], geo[5], geo[6]
    cin, cout, kh, kw, wzp, proved = geo[11], geo[12], geo[13], geo[14], geo[24], geo[26]
    k = kh * kw * cin
    if proved and wsco == 1 and wsci == cout and (kh * kw == 1 or wsk == cin * cout):
        # dense weights, no bound: one run of k * cout values
        src, bf = w[w0:w0 + k * cout], b.reshape(k * cout)
        zf = np.float32(wzp)
        for j in range(k * cout):
            bf[j] = np.float32(src[j]) - zf
        return 0
    bm = 0
    zf = np.float32(wzp)
    for t in range(kh * kw):
        for ci in range(cin):
            br = b[t * cin + ci]
            base = w0 + t * wsk + ci * wsci
            lo, hi = np.int8(127), np.int8(-128)  # the row's extremes give max |w - w_zp|
            if wsco == 1:  # a contiguous row: vectorised
                wr = w[base:base + cout]
                for c in range(cout):
                    br[c] = np.float32(wr[c]) - zf
                    lo, hi = min(lo, wr[c]), max(hi, wr[c])
            else:
                for c in range(cout):
                    v = w[base + c * wsco]
                    br[c] = np.float32(v) - zf
                    lo, hi = min(lo, v), max(hi, v)
            if cout:
                bm = max(bm, abs(np.int64(lo) - wzp), abs(np.int64(hi) - wzp))
    return bm


@jit.kernel
def conv_pack_a(x, geo, a, af):
    """``_im2col`` alone (a kept ``a``: ``build_conv``)."""
    return _im2col(x, geo, a, af)


@jit.kernel
def conv_pack_b(w, geo, b):
    """``_weights`` alone (a kept ``b``)."""
    return _weights(w, geo, b)


@jit.kernel
def conv_pack(x, w, geo, a, af, b):
    """``_im2col`` and ``_weights`` in one call (both in scratch: one dispatch fewer, ~1 us
    on a small tile). Returns their bound ``max_p sum_k |a[p, k]| * max |b|`` (0 if
    ``proved``): below 2^24, every partial sum of ``a @ b`` is an integer below 2^24, exact
    in float32 in any summation order."""
    l1 = _im2col(x, geo, a, af)
    bm = _weights(w, geo, b)
    return 0 if geo[26] else l1 * bm


@jit.kernel
def acc_store(acc, r, a0, asr, add):
    """Write the exact integers ``r`` (m, cout; float32 below 2^24) into the accumulator rows
    ``a0 + p * asr`` (``add``: ACC = wrap32(ACC + r), else ACC = r)."""
    cout = r.shape[1]
    for p in range(r.shape[0]):
        ar = acc[a0 + p * asr:a0 + p * asr + cout]
        rr = r[p]
        if add:
            for c in range(cout):
                ar[c] = np.int32(np.int64(ar[c]) + np.int64(rr[c]))  # wraps
        else:
            for c in range(cout):
                ar[c] = np.int32(rr[c])


def build(op: Op, sram_bytes: int) -> Step | None:
    """The CONV closure: the kernels' for one sample when kernels are on (``jit.enabled``,
    read as the program's closures are built) and ``kernel_wins``, else (and for a batch)
    ``fastpath._build_conv``'s; None for the reference handler."""
    blas = _build_conv(op, sram_bytes)
    if blas is None or not jit.enabled() or not kernel_wins(op.f):
        return blas
    return build_conv(op, sram_bytes, blas)


def kernel_wins(f: dict) -> bool:
    """Whether the kernels beat ``_build_conv`` on this tile (measured on the MobileNetV2 and
    ResNet-18 tiles of tnpu-s): every tile its float32 GEMMs would take (below
    ``fastpath.INT_MM_MIN_MACS``, or no exact int8 GEMM on this host: the same GEMM with
    fewer passes around it), and 1x1 tiles below KERNEL_MAX_MACS (a cheap pack). Larger
    KxK tiles keep the int8 GEMM: packing their im2col here costs more than it saves."""
    macs = f["out_h"] * f["out_w"] * f["kh"] * f["kw"] * f["cin"] * f["cout"]
    if macs < fastpath.INT_MM_MIN_MACS or fastpath.int_mm() is None:
        return True
    return f["kh"] * f["kw"] == 1 and macs < KERNEL_MAX_MACS


def build_conv(op: Op, sram_bytes: int, blas: Step) -> Step | None:
    """The kernels' CONV closure; ``blas``: the closure a batch runs (one GEMM of every
    sample's rows). None for the reference handler (a trap, an all-padding tile, no
    outputs)."""
    f = op.f
    g = Geometry.of(f)
    cin, cout = f["cin"], f["cout"]
    rows, cols = g.needed()
    if rows * cols * cin > WINDOW_FACTOR * sram_bytes or _frame_parts(g) is None or \
            0 in (g.oh, g.ow, cin, cout):
        return None
    pack, pack_a, pack_b = conv_pack.compiled, conv_pack_a.compiled, conv_pack_b.compiled
    store = acc_store.compiled
    in_addr, w_addr, acc_addr = f["in_addr"], f["w_addr"], 4 * f["acc_addr"]
    vals = dict(x0=in_addr, xsh=f["in_stride_h"], xsw=f["in_stride_w"], w0=w_addr,
                wsk=f["w_stride_k"], wsci=f["w_stride_ci"], wsco=f["w_stride_co"],
                a0=f["acc_addr"], asr=f["acc_stride"], in_h=g.in_h, in_w=g.in_w, cin=cin,
                cout=cout, kh=g.kh, kw=g.kw, sh=g.sh, sw=g.sw, dh=g.dh, dw=g.dw, pt=g.pt,
                pl=g.pl, oh=g.oh, ow=g.ow, in_zp=f["in_zp"], w_zp=f["w_zp"],
                accumulate=int(f["mode"] == AccMode.ACCUMULATE))
    m, k = g.oh * g.ow, g.kh * g.kw * cin
    chunk = chunk_len(f["in_zp"], f["w_zp"])
    proved = vals["proved"] = int(k <= chunk)  # every partial sum below 2^24 whatever the data
    geo = np.array([vals[name] for name in GEO], I64)
    x_lo, x_end = extent(in_addr, (g.in_h, g.in_w, cin), (vals["xsh"], vals["xsw"], 1), 1)
    w_lo, w_end = extent(w_addr, (g.kh * g.kw, cin, cout),
                         (vals["wsk"], vals["wsci"], vals["wsco"]), 1)
    acc_lo, acc_end = extent(acc_addr, (m, cout), (4 * vals["asr"], 4), 4)
    # what each packed operand is a function of, besides the bytes it reads (PackCache)
    a_key = ("conv_a", *(vals[n] for n in GEO[:3] + GEO[9:12] + GEO[13:24]), proved)
    b_key = ("conv_b", *(vals[n] for n in GEO[3:7] + GEO[11:15]), vals["w_zp"], proved)

    a0, asr, accumulate = vals["a0"], vals["asr"], vals["accumulate"]
    # large operands are packed into buffers of their own and kept (PackCache); small ones
    # into one scratch buffer per power-of-two size shared by every CONV of that size class
    # (a few buffers, warm in the caches: for small tiles that wins over a kept pack)
    keep_a, keep_b = m * k >= PACK_MIN_VALUES, k * cout >= PACK_MIN_VALUES
    sizes = (0 if keep_a else m * k, 0 if keep_b else k * cout, m * cout)
    size = 1 << (sum(sizes) - 1).bit_length()
    ends = np.cumsum((0, *sizes)).tolist()
    parts = [(ends[j], ends[j + 1], shape) for j, shape in enumerate(((m, k), (k, cout),
                                                                     (m, cout)))]

    def operands(state: MachineState) -> tuple:
        if min(x_lo, w_lo, acc_lo) < 0 or max(x_end, w_end) > state.sram.shape[-1] or \
                acc_end > state.acc_bytes.shape[-1]:
            raise Trap("operand outside its memory")  # the reference handler says which
        scratch = state.pool.get(("kconv", size), (size,), F32)
        a, b, r = (scratch[lo:hi].reshape(shape) if hi > lo else None
                   for lo, hi, shape in parts)
        return (flat(state, "sram", 0, I8), flat(state, "acc_bytes", 0, I32), a,
                None if keep_a else scratch[:m * k], b, r)
    views = Views(operands)

    def step(state: MachineState) -> None:
        if state.batch is not None:  # a batch: one BLAS GEMM of every sample's rows
            blas(state)
            return
        x, acc, a, af, b, r = views.get(state)
        if keep_a or keep_b:
            packs = state.pool.packs
            if keep_a:
                src = x[x_lo:x_end].tobytes()
                ea = packs.get(a_key)
                if ea is None or ea[0] != src:  # (the bytes differ: packed again, in place)
                    buf = ea[3] if ea is not None else np.empty(m * k, F32)
                    a = buf.reshape(m, k)
                    ea = packs.put(a_key, (src, a, pack_a(x, geo, a, buf), buf))
                a, l1 = ea[1], ea[2]
            else:
                l1 = pack_a(x, geo, a, af)
            if keep_b:
                src = x[w_lo:w_end].tobytes()
                eb = packs.get(b_key)
                if eb is None or eb[0] != src:
                    buf = eb[1] if eb is not None else np.empty((k, cout), F32)
                    eb = packs.put(b_key, (src, buf, pack_b(x, geo, buf)))
                b, bm = eb[1], eb[2]
            else:
                bm = pack_b(x, geo, b)
            exact = proved or l1 * bm < F32_EXACT
        else:
            exact = pack(x, x, geo, a, af, b) < F32_EXACT
        if exact:
            store(acc, np.dot(a, b, out=r), a0, asr, accumulate)
            return
        for lo in range(0, k, chunk):  # each chunk exact by the static bound (chunk_len)
            store(acc, np.dot(a[:, lo:lo + chunk], b[lo:lo + chunk], out=r), a0, asr,
                  accumulate or lo > 0)
    return step
