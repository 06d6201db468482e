"""ELTWISE and LUT as one compiled loop over the tile each (``tessel.sim.jit``), for the
simulator's fast path when kernels are on; ``tessel.sim.fastvec``'s numpy forms when they are
off (and for batches). LUT int8 (``lut_i8``) reads the LUT memory's entries directly,
``exec_lut``'s steps per element; int16 (``lut_i16``, the interpolation) is run once per LUT
content on every input value, and a tile is one gather from that table (``gather_i16``).

The kernel is ``vector.exec_eltwise`` written out per element (docs/numerics.md):

    MUL:   r = sat32(clip(a - a_zp) * clip(b - b_zp))            clip: to [-2^31, 2^31]
    else:  r = sat32(A op B),  A = MBQM(sat32(clip(a - a_zp) << left), a_mult, a_shift)
    out  = clamp(MBQM(r, out_mult, out_shift) + out_zp, act_min, act_max)

with ``MBQM(t) = RDBPOT(SRDHM(sat32(t << max(shift, 0)), q), max(-shift, 0))``, in float64
operations that are each exact, as ``kern_rq`` does it (its docstring has the proof: SRDHM on
the multiplier's 16-bit halves, RDBPOT as ``trunc(v + copysign(1/2, v))``; left shifts are
multiplies by powers of two, exact scalings); on a host without AVX-512 every int64 multiply,
arithmetic shift, min and max is emulated, and the int64 form ran 1.2-1.4x slower. Every
value is an integer: ``|clip(.)| <= 2^31``, its left shift a power-of-two multiple that sat32
clamps, ``|A + B| <= 2^32``; MUL's product of two clipped values (up to 2^62) may round, but
rounding is monotonic and INT32_MIN / MAX are representable, so the sat32 of the rounded
product is the sat32 of the exact one (below 2^31 in magnitude the product is exact). The op
and the operand forms are the same over a tile, so each is one loop chosen per row
(``contributions``, ``combine``), not a select per element: 1.3-2.5x faster than one loop
computing every form. Every clip and sat32 of the reference is applied unconditionally (where
the reference leaves one out, its operand is inside the range already), so there is no bound
to prove; MAX / MIN take no sat32 (both contributions are inside int32).

An operand is passed as the C-ordered array of its distinct values (a stride-0 axis of length
1, ``fastvec.Operand.shape``); one whose last axis is 1 (a value per row) has its contribution
computed once per row. The output array is written element by element, so the caller passes
operands that do not overlap it (``disjoint``; else copies).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tessel.isa.fields import EltOp, LutMode
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import jit
from tessel.sim.fastpath import Step, Views, _eview, with_batches
from tessel.sim.prepare import Op
from tessel.sim.state import NP_DTYPE, MachineState, extent
from tessel.sim.vector import exec_eltwise, exec_lut

I64 = np.int64
F64 = np.float64
CLIP = float(1 << 31)  # |x - zp| is clipped to this (the reference's _rescaled)
HALF = float(1 << 30)  # SRDHM's rounding term
T_LO, T_HI = float(INT32_MIN), float(INT32_MAX)  # sat32
_ADD, _SUB, _MUL, _MAX = int(EltOp.ADD), int(EltOp.SUB), int(EltOp.MUL), int(EltOp.MAX)
# ``params``: op, 2^left_shift, then per side (a, b, out) zero point and ``mbqm_row``'s four
# constants, then act_min, act_max
OP, LEFT, SIDE_A, SIDE_B, STAGE, ACT = 0, 1, 2, 7, 12, 17
SIZE = 19


@jit.helper
def srdhm_rdbpot(t, qh, ql, down):
    """``RDBPOT(SRDHM(t, q), e)`` of ``t`` inside int32 with ``q = 2^16 qh + ql`` and
    ``down = 2^-e`` (``kern_rq.requant_rows``' exact float64 steps, written out again there
    rather than imported: numba's disk cache of a kernel checks only its own module's file,
    so a helper shared across modules could be run stale after an edit)."""
    low = np.floor((t * ql + HALF) * (1.0 / 65536.0))
    s = np.floor((t * qh + low) * (1.0 / 32768.0))
    v = s * down
    return np.trunc(v + np.copysign(0.5, v))


@jit.helper
def mbqm(t, scale, qh, ql, down):
    """``MultiplyByQuantizedMultiplier(t, q, shift)`` of ``|t| <= 2^31`` (``scale``:
    ``2^max(shift, 0)``; ``mbqm_row``)."""
    return srdhm_rdbpot(min(max(t * scale, T_LO), T_HI), qh, ql, down)


CHUNK = 512  # a row's elements per pass: the two contribution buffers stay in L1


@jit.helper
def contributions(x, n, zp, pre, scale, qh, ql, down, mul, buf):
    """``buf[:n]``: an operand's contribution per element, ``clip(x - zp)`` for MUL, else
    ``MBQM(sat32(clip(x - zp) * pre), q, shift)`` (``pre = 2^left_shift``; ``mbqm_row``'s
    constants); ``x`` of length 1 is one value for the whole row. One loop per form: the form
    is the tile's, so the branch is per row, not per element, and each loop vectorises
    (``scale = 1``, no left shift: the steps of ``mbqm`` that are then the identity left
    out)."""
    if len(x) == 1:
        t = min(max(F64(x[0]) - zp, -CLIP), CLIP)
        if not mul:
            t = mbqm(min(max(t * pre, T_LO), T_HI), scale, qh, ql, down)
        buf[:n] = t
    elif mul:
        for i in range(n):
            buf[i] = min(max(F64(x[i]) - zp, -CLIP), CLIP)
    elif scale == 1.0:
        for i in range(n):
            t = min(max(F64(x[i]) - zp, -CLIP), CLIP)
            buf[i] = srdhm_rdbpot(min(max(t * pre, T_LO), T_HI), qh, ql, down)
    else:
        for i in range(n):
            t = min(max(F64(x[i]) - zp, -CLIP), CLIP)
            buf[i] = mbqm(min(max(t * pre, T_LO), T_HI), scale, qh, ql, down)


@jit.helper
def combine(op, ra, rb, n):
    """``ra[i] = r = sat32(ra[i] op rb[i])`` (MAX / MIN: no sat32, both inside int32), one
    loop per op (the tile's: a branch per row)."""
    if op == _ADD:
        for i in range(n):
            ra[i] = min(max(ra[i] + rb[i], T_LO), T_HI)
    elif op == _SUB:
        for i in range(n):
            ra[i] = min(max(ra[i] - rb[i], T_LO), T_HI)
    elif op == _MUL:
        for i in range(n):
            ra[i] = min(max(ra[i] * rb[i], T_LO), T_HI)
    elif op == _MAX:
        for i in range(n):
            ra[i] = max(ra[i], rb[i])
    else:
        for i in range(n):
            ra[i] = min(ra[i], rb[i])


@jit.helper
def output(r, n, y, zo, so, qho, qlo, do, lo, hi):
    """``y[i] = clamp(MBQM(r[i], out) + zo, lo, hi)`` (``r`` inside int32)."""
    if so == 1.0:
        for i in range(n):
            y[i] = np.int32(min(max(srdhm_rdbpot(r[i], qho, qlo, do) + zo, lo), hi))
    else:
        for i in range(n):
            y[i] = np.int32(min(max(mbqm(r[i], so, qho, qlo, do) + zo, lo), hi))


@jit.kernel
def eltwise(a, b, out, p):
    """``out[i2, i1, i0] = ELTWISE(a[..], b[..])`` with the fields of ``params`` (``p``);
    ``a`` / ``b`` of shape ``(n2 or 1, n1 or 1, n0 or 1)``, C order. Each row in chunks of
    CHUNK: both operands' contributions into float64 buffers, the op, the output stage
    (``contributions``, ``combine``, ``output``: loops chosen per row, 1.3-2.5x faster than
    one loop computing every form)."""
    op, pre = int(p[OP]), p[LEFT]
    mul = op == _MUL
    za, sa, qha, qla, da = p[SIDE_A], p[SIDE_A + 1], p[SIDE_A + 2], p[SIDE_A + 3], \
        p[SIDE_A + 4]
    zb, sb, qhb, qlb, db = p[SIDE_B], p[SIDE_B + 1], p[SIDE_B + 2], p[SIDE_B + 3], \
        p[SIDE_B + 4]
    zo, so, qho, qlo, do = p[STAGE], p[STAGE + 1], p[STAGE + 2], p[STAGE + 3], \
        p[STAGE + 4]
    lo, hi = p[ACT], p[ACT + 1]
    n2, n1, n0 = out.shape
    va, vb = a.shape[2] > 1, b.shape[2] > 1  # varying along the last axis
    bufa, bufb = np.empty(min(n0, CHUNK), F64), np.empty(min(n0, CHUNK), F64)
    for i2 in range(n2):
        for i1 in range(n1):
            xa = a[min(i2, a.shape[0] - 1), min(i1, a.shape[1] - 1)]
            xb = b[min(i2, b.shape[0] - 1), min(i1, b.shape[1] - 1)]
            y = out[i2, i1]
            for c in range(0, n0, CHUNK):
                n = min(CHUNK, n0 - c)
                contributions(xa[c:c + n] if va else xa, n, za, pre, sa, qha, qla, da, mul,
                              bufa)
                contributions(xb[c:c + n] if vb else xb, n, zb, pre, sb, qhb, qlb, db, mul,
                              bufb)
                combine(op, bufa, bufb, n)
                output(bufa, n, y[c:c + n], zo, so, qho, qlo, do, lo, hi)


def mbqm_row(zp: int, mult: int, shift: int) -> list[float]:
    """``zp``, then ``mbqm``'s constants: ``2^left`` (``left = max(shift, 0)``; 1: no left
    shift), the multiplier's high and low 16 bits and ``2^-e`` (``e = max(-shift, 0)``)."""
    left, e = max(shift, 0), max(-shift, 0)
    return [zp, 2.0 ** left, mult >> 16, mult & 0xFFFF, 2.0 ** -e]


def params(f: dict[str, Any]) -> np.ndarray:
    """``eltwise``'s float64 parameter vector of an ELTWISE's fields (the layout above;
    every entry an integer below 2^32 or a power of two, so exact)."""
    mul = f["op"] == EltOp.MUL
    v = [int(f["op"]), 1.0 if mul else 2.0 ** f["left_shift"],
         *mbqm_row(f["a_zp"], f["a_mult"], f["a_shift"]),
         *mbqm_row(f["b_zp"], f["b_mult"], f["b_shift"]),
         *mbqm_row(f["out_zp"], f["out_mult"], f["out_shift"]), f["act_min"], f["act_max"]]
    assert len(v) == SIZE
    return np.array(v, F64)


def _pattern(f: dict[str, Any], p: str) -> tuple[int, tuple[int, ...], int]:
    """An operand's byte address, strides (outermost first) and element size."""
    return (f[f"{p}_addr"], (f[f"{p}_s2"], f[f"{p}_s1"], f[f"{p}_s0"]),
            NP_DTYPE[f[f"{p}_dtype"]].itemsize)


def disjoint(f: dict[str, Any], p: str) -> bool:
    """Whether operand ``p``'s bytes ("a" / "b") miss the output's. (The output in place of
    its operand would be exact too, element by element, but then the compiled loop's
    vectorised form fails its run-time aliasing test: its scalar form is ~6x slower than a
    copy of the operand and the vectorised loop.)"""
    shape = (f["d2"], f["d1"], f["d0"])
    (oa, os, ow), (pa, ps, pw) = _pattern(f, "out"), _pattern(f, p)
    olo, ohi = extent(oa, shape, os, ow)
    lo, hi = extent(pa, shape, ps, pw)
    return hi <= olo or ohi <= lo


def operands(f: dict[str, Any], sram: np.ndarray) -> tuple[np.ndarray, ...]:
    """``eltwise``'s arrays in one sample's SRAM: a and b (their distinct values) and the
    output, as views (an operand may need a copy first: ``build_eltwise``)."""
    shape = (f["d2"], f["d1"], f["d0"])
    views = []
    for name in ("a", "b", "out"):
        addr, strides, _ = _pattern(f, name)
        distinct = tuple(1 if s == 0 else n for n, s in zip(shape, strides, strict=True))
        views.append(_eview(sram, addr, distinct, strides, NP_DTYPE[f[f"{name}_dtype"]]))
    return tuple(views)


def build_eltwise(op: Op, numpy_step: Callable[[], Step | None]) -> Step | None:
    """The ELTWISE closure running ``eltwise`` on one sample; a batch runs ``numpy_step()``
    (made on its first use; None: the reference handler). None for an empty tile."""
    f = op.f
    shape = (f["d2"], f["d1"], f["d0"])
    if 0 in shape:
        return None
    p = params(f)
    run = eltwise.compiled
    safe = (disjoint(f, "a"), disjoint(f, "b"))

    def make(state: MachineState) -> tuple:
        a, b, out = operands(f, state.sram)
        # an operand is copied first where it is not C-ordered or may share the output's bytes
        return (a, not (a.flags.c_contiguous and safe[0]), b,
                not (b.flags.c_contiguous and safe[1]), out, out.flags.c_contiguous)
    kept = Views(make)

    def step_kernel(state: MachineState) -> None:
        a, copy_a, b, copy_b, out, direct = kept.get(state)
        if copy_a:
            a = a.copy()
        if copy_b:
            b = b.copy()
        if direct:
            run(a, b, out, p)
        else:
            y = np.empty(shape, out.dtype)
            run(a, b, y, p)
            out[...] = y
    return with_batches(step_kernel, numpy_step, lambda s: exec_eltwise(s, f))


# ---- LUT ------------------------------------------------------------------------------------
@jit.kernel
def lut_i8(x, lut, base, y):
    """``y = wrap8(lut[x + base + 128])`` (``exec_lut``, I8_256); ``x`` / ``y`` int8, C order."""
    n2, n1, n0 = x.shape
    for i2 in range(n2):
        for i1 in range(n1):
            for i0 in range(n0):
                v = np.int64(lut[np.int64(x[i2, i1, i0]) + base + 128])
                y[i2, i1, i0] = ((v + 128) & 0xFF) - 128


@jit.kernel
def lut_i16(x, lut, base, y):
    """``exec_lut``'s I16_513 interpolation: entry ``(x >> 7) + 256 + base`` and the wrapped
    slope to the next, ``wrap16(lo + ((slope (x & 127) + 64) >> 7))``; int16, C order."""
    n2, n1, n0 = x.shape
    for i2 in range(n2):
        for i1 in range(n1):
            for i0 in range(n0):
                v = np.int64(x[i2, i1, i0])
                k = (v >> 7) + 256 + base
                lo = np.int64(lut[k])
                slope = ((np.int64(lut[k + 1]) - lo + 32768) & 0xFFFF) - 32768
                r = lo + ((slope * (v & 0x7F) + 64) >> 7)
                y[i2, i1, i0] = ((r + 32768) & 0xFFFF) - 32768


class LutFields(NamedTuple):
    """A LUT's fields as its closures use them: the tile's shape (d2, d1, d0), the int16 mode
    (``wide``), the element type, the entries' base and the source's and destination's
    (address, strides)."""

    shape: tuple[int, int, int]
    wide: bool
    dt: np.dtype
    base: int
    src: tuple[int, tuple[int, int, int]]
    dst: tuple[int, tuple[int, int, int]]


def lut_fields(f: dict[str, Any]) -> LutFields:
    """``LutFields`` of a LUT's fields (shared with ``fastvec.numpy_lut``)."""
    wide = f["lut_mode"] != LutMode.I8_256
    return LutFields((f["d2"], f["d1"], f["d0"]), wide,
                     np.dtype("<i2") if wide else np.dtype("<i1"), f["lut_base"],
                     (f["src_addr"], (f["src_s2"], f["src_s1"], f["src_s0"])),
                     (f["dst_addr"], (f["dst_s2"], f["dst_s1"], f["dst_s0"])))


@jit.kernel
def gather_i16(x, table, base, y):
    """``y = table[x + 32768]``: ``table`` is ``lut_i16``'s output for every int16 input
    (``i16_table``); ``base`` unused (``lut_i8``'s signature)."""
    n2, n1, n0 = x.shape
    for i2 in range(n2):
        for i1 in range(n1):
            for i0 in range(n0):
                y[i2, i1, i0] = table[np.int64(x[i2, i1, i0]) + 32768]


I16_TABLES_MAX = 64  # int16 LUT tables kept per prepared program (one per LUT content)


def i16_table(lut: np.ndarray, base: np.int64, raw: bytes, cache: dict) -> np.ndarray:
    """``lut_i16``'s output for every int16 input in order (``gather_i16``'s table) for the
    LUT entries ``lut[base:base + 513]`` whose bytes are ``raw``; kept in ``cache`` by them.
    Why: one gather per element instead of two dependent ones and the interpolation, 4x
    faster on a softmax's 40 x 197 tile, for a 1 KiB comparison per call."""
    key = ("lut_i16", raw)
    table = cache.get(key)
    if table is None:
        every = np.arange(-32768, 32768, dtype=np.int16).reshape(1, 1, -1)
        out = np.empty_like(every)
        lut_i16.compiled(every, lut, base, out)
        if len(cache) >= I16_TABLES_MAX:
            cache.clear()
        table = cache[key] = out.reshape(-1)
    return table


def build_lut(op: Op, numpy_step: Callable[[], Step | None], cache: dict | None = None
              ) -> Step | None:
    """The LUT closure running ``lut_i8`` / ``gather_i16`` (its table from ``i16_table``,
    kept while the entries' bytes match) on one sample (the source copied first where it is
    not C-ordered or shares bytes with the destination but is not its pattern: the loop reads
    each element just before writing it); a batch runs ``numpy_step()``."""
    f = op.f
    shape, wide, dt, base, src, dst = lut_fields(f)
    if 0 in shape:
        return None
    run = (gather_i16 if wide else lut_i8).compiled
    base = I64(base)
    src, dst = (*src, dt.itemsize), (*dst, dt.itemsize)
    lo, hi = extent(src[0], shape, src[1], src[2])
    dlo, dhi = extent(dst[0], shape, dst[1], dst[2])
    safe = src == dst or hi <= dlo or dhi <= lo
    tables = {} if cache is None else cache
    last: list = [(None, None)]  # [(the entries' bytes, their table)], replaced whole

    def table(state: MachineState) -> np.ndarray:
        """What ``run`` reads: the LUT memory (int8), or the entries' table (int16)."""
        if not wide:
            return state.lut
        raw = state.lut[base:base + 513].tobytes()
        kept_raw, t = last[0]
        if raw != kept_raw:
            t = i16_table(state.lut, base, raw, tables)
            last[0] = (raw, t)
        return t

    def make(state: MachineState) -> tuple:
        x = _eview(state.sram, src[0], shape, src[1], dt)
        y = _eview(state.sram, dst[0], shape, dst[1], dt)
        return x, not (x.flags.c_contiguous and safe), y, y.flags.c_contiguous
    kept = Views(make)

    def step_kernel(state: MachineState) -> None:
        x, copy, y, direct = kept.get(state)
        if copy:
            x = x.copy()
        if direct:
            run(x, table(state), base, y)
        else:
            out = np.empty(shape, dt)
            run(x, table(state), base, out)
            y[...] = out
    return with_batches(step_kernel, numpy_step, lambda s: exec_lut(s, f))
