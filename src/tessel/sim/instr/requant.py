"""REQUANT: docs/isa.md's ``y = requantize(x, bias, q31, shift, out_zp, act_min, act_max)`` per
element, one compiled loop over the tile (``requant_rows``).

The kernel is the requantisation of docs/numerics.md written out per element in int64, as
``tessel.isa.fixedpoint`` computes it:

    y = clamp(MBQM(sat32(acc + bias), q31, shift) + zp, lo, hi)
    MBQM(t) = RDBPOT(SRDHM(sat32(t << max(shift, 0)), q31), max(-shift, 0))

with ``SRDHM(t, q) = (t q + 2^30) >> 31`` and ``RDBPOT(t, e) = (t + 2^(e-1) - [t < 0]) >> e``
(floor shifts; ``e = 0``: ``t``). With ``rounding == SINGLE`` the scale is one rounding of the
exact product, ``(t q + 2^(s-1)) >> s`` with ``s = 31 - shift`` in ``[1, 62]`` (``|t q| <
2^62``). Every intermediate is exact in int64: ``|acc + bias| <=
2^32``, ``|t << left| <= 2^61``, ``|t q| < 2^62``; ``q >= 0``, so SRDHM's one saturating case
(``INT32_MIN * INT32_MIN``) cannot occur. On a host with AVX-512 numba vectorises the loop with
native int64 shifts, min and max (about 1.5x the speed of exact float64 steps); SRDHM's
operands, both inside int32, are cast to int32 and back so that its product is one signed
32 x 32 -> 64-bit multiply (``vpmuldq``) rather than a full 64-bit one.

Branch-free: a channel's column of the parameter table holds its bias, left shift, multiplier,
rounding half ``2^(e-1)`` (0 for ``e = 0``), ``-[e > 0]`` and ``e`` (``param_table``, which
also traps on a multiplier or shift outside its range), so a shift of 0 is the identity of the
same steps. Tables are kept by the parameter bytes (a program that writes its parameters at run
time stays exact). The kernel reads the memories as flat arrays of elements (row strides in
elements, unit-stride rows numba vectorises); a row stride that is not a whole number of
elements, or a source the output overlaps other than exactly in place, goes through dense host
copies (``densify``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tessel.isa.fields import AccSrc, ParamMode
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN, MAX_SHIFT, MIN_SHIFT, Rounding
from tessel.sim import jit
from tessel.sim.hostmem import I32, Step, Views, bindable, disjoint, flat_rows, uniform, view
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import NP_DTYPE, MachineState, Trap, extent

I64 = np.int64
TABLES_MAX = 4096  # distinct parameter blocks kept per prepared program
ROW_MAX = 1024  # a dense tile's kernel rows: at most this many elements (several tile rows)


@jit.kernel
def requant_rows(x, x0, xs, dst, d0, ds, rows, params, zp, lo, hi, single):
    """For every sample ``s``: ``dst[s, d0 + r ds + c] = requantize(x[s, x0 + r xs + c])``
    for ``rows`` rows of ``width = params.shape[2]`` elements, element ``c`` with column
    ``c`` of ``params[s]`` (``params[0]`` when there is one table for all samples; see
    ``param_table``). ``x``: flat int32 memories; ``dst``: flat int8, int16 or int32 ones.
    ``single``: the table is a SINGLE rounding one (``param_table``).
    (Row slices, not computed indices: numba then knows the indices are not negative and
    vectorises the row.)"""
    width = params.shape[2]
    t_lo, t_hi = I64(INT32_MIN), I64(INT32_MAX)
    z, y_lo, y_hi = I64(zp), I64(lo), I64(hi)
    for s in range(x.shape[0]):
        prm = params[min(s, params.shape[0] - 1)]
        bias, left, q, half, neg, e = prm[0], prm[1], prm[2], prm[3], prm[4], prm[5]
        shifted = False  # no channel shifts left: sat32(t << 0) is t, that step left out
        for c in range(width):
            shifted |= left[c] != 0
        xm, dm = x[s], dst[s]
        for r in range(rows):
            xr = xm[x0 + r * xs:x0 + r * xs + width]
            dr = dm[d0 + r * ds:d0 + r * ds + width]
            if single:
                for c in range(width):
                    t = min(max(I64(xr[c]) + bias[c], t_lo), t_hi)  # sat32(acc + bias)
                    v = (t * q[c] + half[c]) >> e[c]  # one rounding of the exact product
                    dr[c] = min(max(v + z, y_lo), y_hi)
                continue
            if not shifted:
                for c in range(width):
                    t = min(max(I64(xr[c]) + bias[c], t_lo), t_hi)  # sat32(acc + bias)
                    p = (I64(np.int32(t)) * I64(np.int32(q[c])) + 1073741824) >> 31  # SRDHM
                    v = (p + half[c] + ((p >> 63) & neg[c])) >> e[c]  # RDBPOT
                    dr[c] = min(max(v + z, y_lo), y_hi)
                continue
            for c in range(width):
                t = min(max(I64(xr[c]) + bias[c], t_lo), t_hi)  # sat32(acc + bias)
                t = min(max(t << left[c], t_lo), t_hi)  # sat32(t << left)
                p = (I64(np.int32(t)) * I64(np.int32(q[c])) + 1073741824) >> 31  # SRDHM
                v = (p + half[c] + ((p >> 63) & neg[c])) >> e[c]  # RDBPOT
                dr[c] = min(max(v + z, y_lo), y_hi)


def param_table(raw: bytes, p: int, width: int,
                rounding: Rounding = Rounding.DOUBLE) -> np.ndarray:
    """``requant_rows``' ``(6, width)`` int64 table of a parameter block's bytes (int32
    bias[p], q31[p], shift[p]), each channel's column repeated to ``width`` elements (a
    multiple of p): bias, ``left = max(shift, 0)``, the multiplier, ``2^(e-1)`` (0 for
    ``e = 0``), ``-[e > 0]`` and ``e = max(-shift, 0)``; for SINGLE rounding: bias, 0, the
    multiplier, ``2^(s-1)``, 0 and ``s = 31 - shift``. Traps on a multiplier or shift outside its
    range (docs/isa.md)."""
    bias, q31, shift = np.frombuffer(raw, I32).reshape(3, p).astype(I64)
    bad = (q31 < 0) | (shift < MIN_SHIFT) | (shift > MAX_SHIFT)
    if bad.any():
        j = int(np.argmax(bad))
        raise Trap(f"parameter entry {j}: multiplier {int(q31[j])} / shift {int(shift[j])} "
                   f"outside [0, 2^31) / [{MIN_SHIFT}, {MAX_SHIFT}]")
    if rounding == Rounding.SINGLE:
        s = 31 - shift
        zero = np.zeros_like(s)
        table = np.stack([bias, zero, q31, np.int64(1) << (s - 1), zero, s])
        return np.ascontiguousarray(np.tile(table, (1, width // p)), I64)
    left, e = np.maximum(shift, 0), np.maximum(-shift, 0)
    table = np.stack([bias, left, q31, (np.int64(1) << e) >> 1, -(e > 0).astype(I64), e])
    return np.ascontiguousarray(np.tile(table, (1, width // p)), I64)


def row_tiles(rows: int, ch: int) -> int:
    """Tile rows per kernel row for a dense tile: the largest divisor of ``rows`` with at
    most ROW_MAX elements (1 when even one row is longer). Rows of a few elements leave the
    vectorised loop's width unused: 16-channel rows cost 2x the element time of 784-element
    ones (measured)."""
    return max((d for d in range(1, rows + 1) if rows % d == 0 and d * ch <= ROW_MAX),
               default=1)


def build(op: Op, prep: PreparedProgram) -> Step:
    """The REQUANT step (``acc_width`` WIDE: ``tessel.sim.instr.wide``)."""
    f = op.f
    if f["acc_width"]:
        from tessel.sim.instr import wide

        return wide.build_requant(op, prep)
    rows, ch = f["rows"], f["ch"]
    dt = NP_DTYPE[f["out_dtype"]]
    w = dt.itemsize
    from_acc = f["src"] == AccSrc.ACC
    x_mem, unit = ("acc_bytes", 4) if from_acc else ("sram", 1)
    x_addr, x_row = unit * f["src_addr"], unit * f["src_stride"]  # bytes
    d_addr, d_row = f["dst_addr"], f["dst_stride"]
    x_span = extent(x_addr, (rows, ch), (x_row, 4), 4)
    d_span = extent(d_addr, (rows, ch), (d_row, w), w)
    in_place = w == 4 and x_addr == d_addr and x_row == d_row  # each element read, then written
    # the kernel reads a row as it writes: a source the output overlaps is copied first
    copy_x = x_row % 4 != 0 or (not from_acc and not disjoint(x_span, d_span) and not in_place)
    copy_d = d_row % w != 0
    dense = not copy_x and not copy_d and x_row == 4 * ch and d_row == w * ch
    k = row_tiles(rows, ch) if dense else 1
    kernel_rows, width = rows // k, k * ch
    p = ch if f["param_mode"] == ParamMode.PER_CHANNEL else 1
    p_addr, nbytes = f["param_addr"], 12 * p
    zp, lo, hi = f["out_zp"], f["act_min"], f["act_max"]
    rounding = Rounding(f["rounding"])
    single = rounding == Rounding.SINGLE
    run = jit.compiled(requant_rows)
    tables = prep.cache.setdefault("requant_tables", {})

    def table(raw: bytes) -> np.ndarray:
        key = (raw, width, rounding)
        t = tables.get(key)
        if t is None:
            if len(tables) >= TABLES_MAX:
                tables.clear()
            t = tables[key] = param_table(raw, p, width, rounding)
        return t

    def operands(state: MachineState) -> tuple:
        x = flat_rows(state, x_mem, I32, x_addr % 4)
        d = flat_rows(state, "sram", dt, d_addr % w)
        ns = x.shape[0]
        xs = view(getattr(state, x_mem), x_addr, (rows, ch), (x_row, 4), I32) if copy_x \
            else None
        ds = view(state.sram, d_addr, (rows, ch), (d_row, w), dt) if copy_d else None
        block = memoryview(state.sram)[p_addr:p_addr + nbytes] if state.batch is None else None
        return x, x_addr // 4, x_row // 4 * k, d, d_addr // w, d_row // w * k, xs, ds, ns, block
    views = Views(operands)
    memo: list = [(None, None)]  # (the last parameter bytes, their table): replaced whole

    def params(state: MachineState, block: Any) -> np.ndarray:
        if state.batch is None:
            raw = block.tobytes()
            last, t = memo[0]
            if raw != last:
                t = table(raw)[None]
                memo[0] = (raw, t)
            return t
        blk = state.sram[:, p_addr:p_addr + nbytes]
        if uniform(blk):
            return table(blk[0].tobytes())[None]
        return np.stack([table(b.tobytes()) for b in blk])

    def step(state: MachineState) -> None:
        run_kept(state, *views.get(state))

    def run_kept(state: MachineState, x: np.ndarray, x0: int, xs: int, d: np.ndarray, d0: int,
                 ds: int, xv: np.ndarray | None, dv: np.ndarray | None, ns: int,
                 block: Any) -> None:
        prm = params(state, block)
        if xv is not None:  # a dense copy of the source, read as rows of ch
            x, x0, xs = xv.copy().reshape(ns, -1), 0, ch
        if dv is None:
            run(x, x0, xs, d, d0, ds, kernel_rows, prm, zp, lo, hi, single)
            return
        out = np.empty((ns, rows * ch), dt)
        run(x, x0, xs, out, 0, ch, kernel_rows, prm, zp, lo, hi, single)
        dv[...] = out.reshape(ns, rows, ch)

    def bind(state: MachineState) -> Any:
        kept = views.get(state)
        x, x0, xs, d, d0, ds, xv, dv, _, block = kept
        if xv is not None or dv is not None:
            return functools.partial(run_kept, state, *kept)
        # one sample's parameters are always a C-ordered (1, 6, width) int64 table
        fn = jit.entry(run, x, x0, xs, d, d0, ds, kernel_rows, np.empty((1, 6, width), I64),
                       zp, lo, hi, single)
        return lambda: fn(x, x0, xs, d, d0, ds, kernel_rows, params(state, block), zp, lo, hi,
                          single)
    return bindable(step, bind)
