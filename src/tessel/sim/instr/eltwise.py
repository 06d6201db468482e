"""ELTWISE: docs/isa.md's per-element ``a (op) b`` with TFLite's rescales, one compiled loop.

The kernel (``eltwise``) is the pseudocode written out per element (docs/numerics.md) in int64:

    MUL:   r = sat32(clip(a - a_zp) * clip(b - b_zp))            clip: to [-2^31, 2^31]
    else:  r = sat32(A op B),  A = MBQM(sat32(clip(a - a_zp) << left), a_mult, a_shift)
    out  = clamp(MBQM(r, out_mult, out_shift) + out_zp, act_min, act_max)

with ``MBQM(t) = RDBPOT(SRDHM(sat32(t << max(shift, 0)), q), max(-shift, 0))`` as REQUANT's
kernel computes it (``instr.requant``'s docstring). With ``rounding == SINGLE`` each MBQM is one
rounding of the exact product saturated to int32, ``sat32((t q + 2^(s-1)) >> s)`` with
``s = 31 - shift`` in ``[1, 62]`` (``|t| <= 2^31``, so ``|t q| < 2^62``):
``single_contributions`` and ``single_output``. Every intermediate is exact in int64:
``|clip(.)| <= 2^31``, so ``|clip(.) << left| <= 2^62`` (``left <= 31``) and MUL's product of
two clipped values is at most 2^62; ``|A op B| <= 2^32``. The clip of ``x - zp`` only matters
where it changes the saturated result, so it is the pseudocode's. On a host with AVX-512 numba
vectorises the loops with native int64 multiplies, shifts, min and max. The op and the operand
forms are the same over a tile, so each is one loop chosen per row (``contributions``,
``combine``, ``output``): 1.3-2.5x faster than one loop computing every form.

An operand is passed as the C-ordered array of its distinct values (length 1 along a stride-0
axis); one whose last axis is 1 (a value per row) has its contribution computed once per row.
Two int8 operands (a CNN's residual add) read a table of the output for every pair of values,
computed by the same kernel over all 256 x 256 pairs (``pair_table``), with one gather
(``pair_gather``). The output is written element by element, each after its operands'
elements are read, so an operand that shares bytes with it is copied first unless it is the
output's very pattern (in place).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import DType, EltOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN, Rounding
from tessel.sim import jit
from tessel.sim.hostmem import Step, Views, bindable, disjoint, view
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import NP_DTYPE, MachineState, extent

I64 = np.int64
CLIP = 1 << 31  # |x - zp| is clipped to this
ONE = 1 << 30  # the multiplier (2^30, 1) is exactly 1 (``contributions``)
T_LO, T_HI = INT32_MIN, INT32_MAX  # sat32
_ADD, _SUB, _MUL, _MAX = int(EltOp.ADD), int(EltOp.SUB), int(EltOp.MUL), int(EltOp.MAX)
# ``params``: op, left_shift, then per side (a, b, out) zero point and ``mbqm_row``'s five
# constants, then act_min, act_max, and 1 for SINGLE rounding
OP, LEFT, SIDE_A, SIDE_B, STAGE, ACT, ROUND = 0, 1, 2, 8, 14, 20, 22
SIZE = 23
CHUNK = 512  # a row's elements per pass: the two contribution buffers stay in L1
PAIR_MIN = 1024  # two int8 operands: tiles of this many elements and more read a pair table
PAIR_TABLES_MAX = 256  # pair tables kept per prepared program (one per distinct parameters)


@jit.helper
def srdhm_rdbpot(t, q, half, neg, e):
    """``RDBPOT(SRDHM(t, q), e)`` of ``t`` inside int32 and ``0 <= q < 2^31`` (``half =
    2^(e-1)``, 0 for ``e = 0``; ``neg = -[e > 0]``): ``instr.requant``'s steps, the product
    one 32 x 32 -> 64-bit multiply, written out again here rather than imported: numba's disk
    cache of a kernel checks only its own module's file, so a helper shared across modules
    could be run stale after an edit."""
    p = (I64(np.int32(t)) * I64(np.int32(q)) + 1073741824) >> 31
    return (p + half + ((p >> 63) & neg)) >> e


@jit.helper
def mbqm(t, left, q, half, neg, e):
    """``MultiplyByQuantizedMultiplier(t, q, shift)`` of ``|t| <= 2^31`` (``left``:
    ``max(shift, 0)``; ``mbqm_row``)."""
    return srdhm_rdbpot(min(max(t << left, T_LO), T_HI), q, half, neg, e)


@jit.helper
def contributions(x, n, zp, pre, left, q, half, neg, e, mul, buf):
    """``buf[:n]``: an operand's contribution per element, ``clip(x - zp)`` for MUL, else
    ``MBQM(sat32(clip(x - zp) << pre), q, shift)`` (``pre = left_shift``); ``x`` of length
    1 is one value for the whole row. One loop per form (the tile's: a branch per row). The
    multiplier ``(2^30, 1)`` is exactly 1 (docs/isa.md): ``MBQM(v, 2^30, 1) = floor((sat32(2v)
    + 1) / 2)`` is ``v`` for ``|v| <= 2^30`` and the nearer of ``+-2^30`` beyond, so that
    contribution is ``clip((x - zp) << pre, -2^30, 2^30)`` (the narrower clip subsumes both
    sat32 and the clip of ``x - zp``)."""
    if len(x) == 1:
        t = min(max(I64(x[0]) - zp, -CLIP), CLIP)
        if not mul:
            t = mbqm(min(max(t << pre, T_LO), T_HI), left, q, half, neg, e)
        buf[:n] = t
    elif mul:
        for i in range(n):
            buf[i] = min(max(I64(x[i]) - zp, -CLIP), CLIP)
    elif left == 1 and q == ONE and e == 0:  # the multiplier (2^30, 1): one
        for i in range(n):
            buf[i] = min(max(min(max(I64(x[i]) - zp, -CLIP), CLIP) << pre, -ONE), ONE)
    elif left == 0:
        for i in range(n):
            t = min(max(I64(x[i]) - zp, -CLIP), CLIP)
            buf[i] = srdhm_rdbpot(min(max(t << pre, T_LO), T_HI), q, half, neg, e)
    else:
        for i in range(n):
            t = min(max(I64(x[i]) - zp, -CLIP), CLIP)
            buf[i] = mbqm(min(max(t << pre, T_LO), T_HI), left, q, half, neg, e)


@jit.helper
def single_contributions(x, n, zp, pre, q, half, s, mul, buf):
    """``contributions`` in SINGLE rounding: ``buf[:n]`` is ``clip(x - zp)`` for MUL, else
    ``sat32((sat32(clip(x - zp) << pre) q + half) >> s)`` (``half = 2^(s-1)``)."""
    if len(x) == 1:
        t = min(max(I64(x[0]) - zp, -CLIP), CLIP)
        if not mul:
            t = min(max((min(max(t << pre, T_LO), T_HI) * q + half) >> s, T_LO), T_HI)
        buf[:n] = t
    elif mul:
        for i in range(n):
            buf[i] = min(max(I64(x[i]) - zp, -CLIP), CLIP)
    else:
        for i in range(n):
            t = min(max(I64(x[i]) - zp, -CLIP), CLIP)
            buf[i] = min(max((min(max(t << pre, T_LO), T_HI) * q + half) >> s, T_LO), T_HI)


@jit.helper
def single_output(r, n, y, zo, q, half, s, lo, hi):
    """``output`` in SINGLE rounding: ``y[i] = clamp(sat32((r[i] q + half) >> s) + zo, lo,
    hi)``."""
    for i in range(n):
        y[i] = min(max(min(max((r[i] * q + half) >> s, T_LO), T_HI) + zo, lo), hi)


@jit.helper
def operand(x, n, zp, pre, left, q, half, neg, e, mul, single, buf):
    """An operand's contributions in the instruction's rounding mode."""
    if single:
        single_contributions(x, n, zp, pre, q, half, e, mul, buf)
    else:
        contributions(x, n, zp, pre, left, q, half, neg, e, mul, buf)


@jit.helper
def combine(op, ra, rb, n):
    """``ra[i] = r = sat32(ra[i] op rb[i])`` (MAX / MIN: no sat32, both inside int32)."""
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
def output(r, n, y, zo, lo_, q, half, neg, e, lo, hi):
    """``y[i] = clamp(MBQM(r[i], out) + zo, lo, hi)`` (``r`` inside int32; ``lo_`` the
    output multiplier's left shift)."""
    if lo_ == 0:
        for i in range(n):
            y[i] = min(max(srdhm_rdbpot(r[i], q, half, neg, e) + zo, lo), hi)
    else:
        for i in range(n):
            y[i] = min(max(mbqm(r[i], lo_, q, half, neg, e) + zo, lo), hi)


@jit.kernel
def eltwise(a, b, out, p):
    """``out[s, i2, i1, i0] = ELTWISE(a[..], b[..])`` with the fields of ``params`` (``p``);
    ``a`` / ``b`` of shape ``(samples or 1, n2 or 1, n1 or 1, n0 or 1)``, C order. Each row in
    chunks of CHUNK: both operands' contributions into int64 buffers, the op, the output
    stage."""
    op, pre = p[OP], p[LEFT]
    mul = op == _MUL
    za, la, qa, ha, na, ea = p[SIDE_A], p[SIDE_A + 1], p[SIDE_A + 2], p[SIDE_A + 3], \
        p[SIDE_A + 4], p[SIDE_A + 5]
    zb, lb, qb, hb, nb, eb = p[SIDE_B], p[SIDE_B + 1], p[SIDE_B + 2], p[SIDE_B + 3], \
        p[SIDE_B + 4], p[SIDE_B + 5]
    zo, lo_, qo, ho, no, eo = p[STAGE], p[STAGE + 1], p[STAGE + 2], p[STAGE + 3], \
        p[STAGE + 4], p[STAGE + 5]
    lo, hi, single = p[ACT], p[ACT + 1], p[ROUND] != 0
    ns, n2, n1, n0 = out.shape
    va, vb = a.shape[3] > 1, b.shape[3] > 1  # varying along the last axis
    bufa, bufb = np.empty(min(n0, CHUNK), I64), np.empty(min(n0, CHUNK), I64)
    # an operand that is one row for all of a sample's rows (a bias per channel): its
    # contributions once per sample
    rows = n2 * n1 > 1
    ca = rows and va and a.shape[1] == 1 and a.shape[2] == 1
    cb = rows and vb and b.shape[1] == 1 and b.shape[2] == 1
    fulla, fullb = np.empty(n0 if ca else 0, I64), np.empty(n0 if cb else 0, I64)
    for s in range(ns):
        if ca and (s == 0 or a.shape[0] > 1):
            operand(a[min(s, a.shape[0] - 1), 0, 0], n0, za, pre, la, qa, ha, na, ea, mul,
                    single, fulla)
        if cb and (s == 0 or b.shape[0] > 1):
            operand(b[min(s, b.shape[0] - 1), 0, 0], n0, zb, pre, lb, qb, hb, nb, eb, mul,
                    single, fullb)
        for i2 in range(n2):
            for i1 in range(n1):
                xa = a[min(s, a.shape[0] - 1), min(i2, a.shape[1] - 1), min(i1, a.shape[2] - 1)]
                xb = b[min(s, b.shape[0] - 1), min(i2, b.shape[1] - 1), min(i1, b.shape[2] - 1)]
                y = out[s, i2, i1]
                for c in range(0, n0, CHUNK):
                    n = min(CHUNK, n0 - c)
                    if ca:  # (combine writes its first operand: a copy)
                        bufa[:n] = fulla[c:c + n]
                    else:
                        operand(xa[c:c + n] if va else xa, n, za, pre, la, qa, ha, na, ea,
                                mul, single, bufa)
                    rb = bufb
                    if cb:
                        rb = fullb[c:c + n]
                    else:
                        operand(xb[c:c + n] if vb else xb, n, zb, pre, lb, qb, hb, nb, eb,
                                mul, single, bufb)
                    combine(op, bufa, rb, n)
                    if single:
                        single_output(bufa, n, y[c:c + n], zo, qo, ho, eo, lo, hi)
                    else:
                        output(bufa, n, y[c:c + n], zo, lo_, qo, ho, no, eo, lo, hi)


@jit.kernel
def pair_gather(a, b, table, out):
    """``out[s, i2, i1, i0] = table[256 (a + 128) + (b + 128)]``: int8 ``a`` / ``b`` shaped as
    ``eltwise``'s, ``table`` its output for every pair of values (``pair_table``)."""
    ns, n2, n1, n0 = out.shape
    va, vb = a.shape[3] > 1, b.shape[3] > 1
    for s in range(ns):
        for i2 in range(n2):
            for i1 in range(n1):
                xa = a[min(s, a.shape[0] - 1), min(i2, a.shape[1] - 1), min(i1, a.shape[2] - 1)]
                xb = b[min(s, b.shape[0] - 1), min(i2, b.shape[1] - 1), min(i1, b.shape[2] - 1)]
                y = out[s, i2, i1]
                for i in range(n0):
                    ka = np.int64(xa[i if va else 0]) + 128
                    kb = np.int64(xb[i if vb else 0]) + 128
                    y[i] = table[ka * 256 + kb]


def mbqm_row(zp: int, mult: int, shift: int, single: bool = False) -> list[int]:
    """``zp``, then ``mbqm``'s constants: ``left = max(shift, 0)``, the multiplier, ``2^(e-1)``
    (0 for ``e = 0``), ``-[e > 0]`` and ``e = max(-shift, 0)``; for SINGLE rounding ``zp``, 0,
    the multiplier, ``2^(s-1)``, 0 and ``s = 31 - shift``."""
    if single:
        return [zp, 0, mult, 1 << (30 - shift), 0, 31 - shift]
    left, e = max(shift, 0), max(-shift, 0)
    return [zp, left, mult, (1 << e) >> 1, -int(e > 0), e]


def params(f: dict[str, Any]) -> np.ndarray:
    """``eltwise``'s int64 parameter vector of an ELTWISE's fields."""
    mul = f["op"] == EltOp.MUL
    single = f.get("rounding", Rounding.DOUBLE) == Rounding.SINGLE
    v = [int(f["op"]), 0 if mul else f["left_shift"],
         *mbqm_row(f["a_zp"], f["a_mult"], f["a_shift"], single),
         *mbqm_row(f["b_zp"], f["b_mult"], f["b_shift"], single),
         *mbqm_row(f["out_zp"], f["out_mult"], f["out_shift"], single), f["act_min"],
         f["act_max"], int(single)]
    assert len(v) == SIZE
    return np.array(v, I64)


def pair_table(p: np.ndarray, dt: np.dtype, cache: dict) -> np.ndarray:
    """The output of ``eltwise`` with parameters ``p`` for every pair of int8 values, entry
    ``256 (a + 128) + (b + 128)`` (kept in ``cache`` by the parameters and output type)."""
    key = ("pair", p.tobytes(), dt.str)
    table = cache.get(key)
    if table is None:
        every = np.arange(-128, 128, dtype=np.int8)
        out = np.empty((1, 1, 256, 256), dt)
        jit.compiled(eltwise)(every.reshape(1, 1, 256, 1), every.reshape(1, 1, 1, 256), out, p)
        if len(cache) >= PAIR_TABLES_MAX:
            cache.clear()
        table = cache[key] = out.reshape(-1)
    return table


def _operand(f: dict[str, Any], name: str) -> tuple[int, tuple, tuple, np.dtype]:
    """An operand's address, distinct-value shape (1 along a stride-0 axis), strides and
    type."""
    shape = (f["d2"], f["d1"], f["d0"])
    strides = (f[f"{name}_s2"], f[f"{name}_s1"], f[f"{name}_s0"])
    distinct = tuple(1 if s == 0 else n for n, s in zip(shape, strides, strict=True))
    return f[f"{name}_addr"], distinct, strides, NP_DTYPE[f[f"{name}_dtype"]]


def build(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    shape = (f["d2"], f["d1"], f["d0"])
    p = params(f)
    ops = [_operand(f, name) for name in ("a", "b", "out")]
    out_span = extent(ops[2][0], shape, ops[2][2], ops[2][3].itemsize)
    # an operand that is the output's very pattern is read element by element before that
    # element is written (in place): no copy either
    safe = [disjoint(extent(addr, shape, st, dt.itemsize), out_span)
            or (addr, distinct, st, dt.itemsize) == (ops[2][0], shape, ops[2][2],
                                                     ops[2][3].itemsize)
            for addr, distinct, st, dt in ops[:2]]
    pair = f["a_dtype"] == f["b_dtype"] == DType.I8 and np.prod(shape) >= PAIR_MIN
    if pair:
        table = pair_table(p, ops[2][3], prep.cache.setdefault("elt_pairs", {}))
        kernel = jit.compiled(pair_gather)
        args = lambda a, b, y: (a, b, table, y)  # noqa: E731
    else:
        kernel = jit.compiled(eltwise)
        args = lambda a, b, y: (a, b, y, p)  # noqa: E731

    def make(state: MachineState) -> tuple:
        a, b, out = (view(state.sram, addr, distinct, st, dt) for addr, distinct, st, dt in ops)
        # an operand is copied first where it may share the output's bytes or is not C-ordered
        return (a, not (a.flags.c_contiguous and safe[0]), b,
                not (b.flags.c_contiguous and safe[1]), out, out.flags.c_contiguous)
    kept = Views(make)

    def step(state: MachineState) -> None:
        a, copy_a, b, copy_b, out, direct = kept.get(state)
        if copy_a:
            a = a.copy()
        if copy_b:
            b = b.copy()
        if direct:
            kernel(*args(a, b, out))
        else:
            y = np.empty(out.shape, out.dtype)
            kernel(*args(a, b, y))
            out[...] = y

    def bind(state: MachineState) -> Any:
        a, copy_a, b, copy_b, out, direct = kept.get(state)
        return None if copy_a or copy_b or not direct else jit.bound(kernel, *args(a, b, out))
    return bindable(step, bind)
