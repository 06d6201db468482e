"""The fast path's ELTWISE and LUT closures (``tessel.sim.fastpath`` explains how instructions
become closures and the helpers they share): whole-tile numpy passes equal to
``vector.exec_eltwise`` / ``vector.exec_lut`` (LUT: one gather from a table of the reference
over every input value, kept per LUT content). With compiled kernels on (``tessel.sim.jit``)
one sample's ELTWISE and LUT are instead one compiled loop over the tile each
(``tessel.sim.kern_vec``; ELTWISE 3-6x faster than the forms below on ViT / MiniLM tiles);
the numpy forms stay as the second implementation the tests compare them with, and run
batches.

An int8 / int16 operand's contribution (``x - zp``, or ``MBQM(sat32((x - zp) 2^left), mult,
shift)``) depends on its value alone: one gather from a table of the reference steps over
every value (``_side_table``). Then, from the cheapest form down:

* one operand decides the output (the other's contribution is a constant, e.g. a multiplier of
  0 as in ``requantize`` = ADD with a zero second operand, or both are the same view): one
  gather from a table of the output for every value of it (``step_single``);
* int8 with int8: one gather from a 256 x 256 table of outputs (``step_pair``; one operand a
  single element: its row of the table, gathered by the other, ``step_pair_one``);
* both tables and the combined values within ``LUT_RANGE_MAX``: a third gather for the
  output stage;
* else (``step``) int64 passes: an operand broadcast along an axis (stride 0: a layer norm's
  mean or reciprocal square root per row, a bias per channel) is computed on its distinct
  values only; an int8 / int16 contribution ``(x - zp) << k`` (``linear_shift``) is two
  passes, not a gather; an int32 operand with the multiplier 1 (``(2^30, 1)``) is a clip; a
  MUL by a stride-0 factor leaves out its sat32 when that run's factors are small enough
  (``step_bounded``), and where they also meet a float64 bound (softmax's reciprocal) runs six
  float64 passes instead (``fastscale``); the output
  stage ``clamp(MBQM(r, out_mult, out_shift) + out_zp)`` is one floor shift (``OutStage``),
  with the ``sat32`` of ``r`` folded into its clamp where int64 has the room, and clamps that
  the operands' value bounds show to be no-ops left out.

Every bound is computed in Python integers from the reference steps at the operands' extreme
values (each step is non-decreasing in its input).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessel.isa.fields import EltOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN
from tessel.sim import jit, kern_vec
from tessel.sim.fastfix import mbqm_inplace
from tessel.sim.fastpath import Step, Views, _eview, _uniform
from tessel.sim.fastscale import FloatScale, build_scale
from tessel.sim.prepare import Op
from tessel.sim.state import NP_DTYPE, MachineState
from tessel.sim.vector import _rescaled, _span, exec_lut

I64 = np.int64
LUT_RANGE_MAX = 1 << 18  # the longest range of combined values given an output table
UNSIGNED: dict[int, np.dtype] = {1: np.dtype("<u1"), 2: np.dtype("<u2")}  # by item size
_I64_LIMIT = 1 << 63
ONE = (1 << 30, 1)  # the (multiplier, shift) of exactly 1


def elt_side(x: np.ndarray, op: EltOp, zp: int, left: int, mult: int, shift: int
             ) -> np.ndarray:
    """One operand's contribution, the reference steps of ``vector.exec_eltwise``: ``x - zp``
    (clipped to +-2^31 where that cannot change the result) for MUL, else
    ``MBQM(sat32((x - zp) * 2^left), mult, shift)``; int64."""
    if op == EltOp.MUL:
        t = np.subtract(x, zp, dtype=I64)
        if _span(x.dtype, zp) > 2**31:
            np.clip(t, -(2**31), 2**31, out=t)
        return t
    return mbqm_inplace(_rescaled(x, zp, left), mult, shift)


def side_bounds(dt: np.dtype, op: EltOp, zp: int, left: int, mult: int, shift: int
                ) -> tuple[int, int]:
    """The lowest and highest contribution of an operand of type ``dt`` (the contribution is
    non-decreasing in the value, so: the reference steps at the type's extremes)."""
    info = np.iinfo(dt)
    lo, hi = elt_side(np.array([info.min, info.max], dt), op, zp, left, mult, shift).tolist()
    return int(lo), int(hi)


def side_fn(dt: np.dtype, op: EltOp, zp: int, left: int, mult: int, shift: int
            ) -> Callable[[np.ndarray], np.ndarray]:
    """``elt_side`` for int32 operands with its range tests decided once: the same steps,
    the multiplier 1 without a left shift as ``clip(x - zp, -2^30, 2^30)`` (``MBQM(v, 2^30,
    1)`` is ``floor((sat32(2 v) + 1) / 2)``: ``v`` inside +-2^30, else +-2^30)."""
    span = _span(dt, zp)
    clip31 = span > 2**31  # as vector._rescaled

    def diff(x: np.ndarray) -> np.ndarray:
        # x.astype then an int64 subtraction: numpy's mixed-type loop costs about twice as much
        t = x.astype(I64)
        if zp:
            t -= zp
        return t
    if op == EltOp.MUL:
        def mul_side(x: np.ndarray) -> np.ndarray:
            t = diff(x)
            if clip31:
                np.clip(t, -(2**31), 2**31, out=t)
            return t
        return mul_side
    if (mult, shift) == ONE and left == 0:
        def one_side(x: np.ndarray) -> np.ndarray:
            t = diff(x)
            np.maximum(t, -(2**30), out=t)
            np.minimum(t, 2**30, out=t)
            return t
        return one_side
    sat = (min(span, 2**31) << left) > INT32_MAX

    def side(x: np.ndarray) -> np.ndarray:
        t = diff(x)
        if clip31:
            np.maximum(t, -(2**31), out=t)
            np.minimum(t, 2**31, out=t)
        if left:
            t <<= left
        if sat:
            np.maximum(t, INT32_MIN, out=t)
            np.minimum(t, INT32_MAX, out=t)
        return mbqm_inplace(t, mult, shift)
    return side


def side_table(cache: dict, dt: np.dtype, op: EltOp, zp: int, left: int, mult: int,
               shift: int) -> np.ndarray | None:
    """For an int8 / int16 operand: its contribution for every bit pattern (indexed by the
    unsigned view of the value), computed by the reference steps; None for int32."""
    if dt.itemsize > 2:
        return None
    key = ("side", dt.str, op, zp, left, mult, shift)
    hit = cache.get(key)
    if hit is None:
        every = np.arange(1 << (8 * dt.itemsize), dtype=UNSIGNED[dt.itemsize]).view(dt)
        hit = cache[key] = elt_side(every, op, zp, left, mult, shift)
    return hit


def linear_shift(table: np.ndarray, dt: np.dtype, op: EltOp, zp: int, left: int, mult: int,
                 shift: int) -> int | None:
    """``k`` if an int8 / int16 operand's contribution (its ``table``) is ``(x - zp) << k`` for
    every value ``x`` (checked on all of them), else None: MUL's ``x - zp``, and the
    multiplier ``2^30`` where nothing saturates and ``k = left + shift - 1 >= 0``
    (``MBQM(v, 2^30, s)`` halves ``2^s v``, exactly when ``v = (x - zp) 2^left`` has the
    factors of two). Two int64 passes then cost less than a gather."""
    k = 0 if op == EltOp.MUL else left + shift - 1 if mult == 1 << 30 else None
    if k is None or not 0 <= k <= 31:
        return None
    every = np.arange(1 << (8 * dt.itemsize), dtype=UNSIGNED[dt.itemsize]).view(dt)
    return k if np.array_equal(table, (every.astype(I64) - zp) << k) else None


def linear_fn(zp: int, k: int) -> Callable[[np.ndarray], np.ndarray]:
    """``(x - zp) << k`` in int64 (``linear_shift``)."""
    def linear(x: np.ndarray) -> np.ndarray:
        t = x.astype(I64)
        if zp:
            t -= zp
        if k:
            t <<= k
        return t
    return linear


def combined_bounds(op: EltOp, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """Bounds of ``r`` before the reference's sat32, given bounds of both contributions."""
    (a0, a1), (b0, b1) = a, b
    if op == EltOp.MUL:
        ends = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
        return min(ends), max(ends)
    if op == EltOp.ADD:
        return a0 + b0, a1 + b1
    if op == EltOp.SUB:
        return a0 - b1, a1 - b0
    if op == EltOp.MAX:
        return max(a0, b0), max(a1, b1)
    return min(a0, b0), min(a1, b1)


def _sat(v: int) -> int:
    return min(max(v, INT32_MIN), INT32_MAX)


def elt_out(r: np.ndarray, f: dict[str, Any], dt: np.dtype) -> np.ndarray:
    """``clamp(MBQM(r, out_mult, out_shift) + out_zp, act_min, act_max)`` as ``dt``, the
    reference's steps (``r`` int64 inside int32; consumed)."""
    y = mbqm_inplace(np.ascontiguousarray(r, dtype=I64), f["out_mult"], f["out_shift"])
    y += f["out_zp"]
    np.maximum(y, f["act_min"], out=y)
    np.minimum(y, f["act_max"], out=y)
    return y.astype(dt)


def _ref_out(r: int, f: dict[str, Any]) -> int:
    """``MBQM(r, out_mult, out_shift) + out_zp`` of one value inside int32 (no act clamp)."""
    return int(mbqm_inplace(np.array([r], I64), f["out_mult"], f["out_shift"])[0]) + f["out_zp"]


class OutStage:
    """The output stage ``clamp(MBQM(sat32(r), out_mult, out_shift) + out_zp, act_min,
    act_max)`` in place on a fresh int64 array ``r`` with values in ``[r_lo, r_hi]``.

    For ``out_shift = -e <= 0`` (docs/numerics.md's identities, as ``fastfix``'s FUSED form):
    with ``X = r q + 2^30`` the result before the clamp is ``(X + c 2^31 + ((X >> 63) &
    -2^31)) >> (31 + e)``, ``c = 2^(e-1) + zp 2^e`` (``e = 0``: ``(X + zp 2^31) >> 31``,
    no correction). That formula is non-decreasing in ``r``, so for ``r`` beyond int32 (while
    int64 has the room) ``sat32`` is the clamp to the outputs at ``INT32_MIN`` / ``INT32_MAX``,
    and the composition of two clamps is one clamp to ``[L, H]``, each end clamped into
    ``[act_min, act_max]``. ``X < 0`` exactly when ``r + T < 0``, ``T = floor(2^30 / q)``
    (``r q < -2^30``), so the correction ``((r + T) >> 63) & -2^31`` is computed before the
    product and ``c 2^31`` joins the ``2^30`` (one pass fewer). The correction is left out when
    ``L >= zp`` (a negative SRDHM value then rounds to at most ``zp`` either way) and the
    clamp when the outputs at the bounds lie in ``[L, H]``. A left shift (``out_shift > 0``):
    the reference steps."""

    def __init__(self, f: dict[str, Any], r_lo: int, r_hi: int) -> None:
        q, s, zp = f["out_mult"], f["out_shift"], f["out_zp"]
        lo, hi = f["act_min"], f["act_max"]
        self.f = f
        self.sat = r_lo < INT32_MIN or r_hi > INT32_MAX
        self.fused = False
        if s > 0:
            return
        e = -s
        c2 = (((1 << e) >> 1) + (zp << e)) << 31
        if not self._fits(r_lo, r_hi, q, c2):
            if not self._fits(_sat(r_lo), _sat(r_hi), q, c2):
                return
        else:
            self.sat = False  # folded into the clamp
        self.fused = True
        rl, rh = (_sat(r_lo), _sat(r_hi)) if self.sat else (r_lo, r_hi)
        low, high = (min(max(v, lo), hi) for v in (_ref_out(_sat(rl), f), _ref_out(_sat(rh), f)))
        self.q, self.total, self.lo_c, self.hi_c = q, 31 + e, low, high
        self.sign = e > 0 and low < zp and q > 0  # q = 0: X = 2^30 is never negative
        self.t = (1 << 30) // q if q else 0  # X < 0 exactly when r + T < 0
        self.add = (1 << 30) + c2
        self.c2 = c2
        ends = [self._fused_value(v) for v in (rl, rh)]
        self.clamp = ends[0] < low or ends[1] > high

    @staticmethod
    def _fits(r_lo: int, r_hi: int, q: int, c2: int) -> bool:
        """Every partial value (``r q``, ``+ 2^30``, the correction, ``+ c 2^31``) in int64."""
        return max(abs(r_lo), abs(r_hi)) * q + (1 << 30) + (1 << 31) + abs(c2) < _I64_LIMIT

    def _fused_value(self, r: int) -> int:
        x = r * self.q + (1 << 30)
        return (x + self.c2 - ((1 << 31) if x < 0 and self.sign else 0)) >> self.total

    def __call__(self, r: np.ndarray) -> np.ndarray:
        if self.sat:
            np.maximum(r, INT32_MIN, out=r)
            np.minimum(r, INT32_MAX, out=r)
        if not self.fused:
            f = self.f
            mbqm_inplace(r, f["out_mult"], f["out_shift"])
            r += f["out_zp"]
            np.maximum(r, f["act_min"], out=r)
            np.minimum(r, f["act_max"], out=r)
            return r
        u = None
        if self.sign:  # the away-from-zero correction: -2^31 where X < 0, from r
            if self.t:
                u = r + self.t
                u >>= 63
            else:
                u = r >> 63
            u &= -(1 << 31)
        r *= self.q
        r += self.add
        if u is not None:
            r += u
        r >>= self.total
        if self.clamp:
            np.maximum(r, self.lo_c, out=r)
            np.minimum(r, self.hi_c, out=r)
        return r


class Operand:
    """One ELTWISE operand: its view (address, strides, type) and, broadcast along an axis
    (stride 0), the shape of its distinct values (that axis 1)."""

    def __init__(self, f: dict[str, Any], p: str, shape: tuple[int, ...]) -> None:
        self.addr = f[f"{p}_addr"]
        self.strides = (f[f"{p}_s2"], f[f"{p}_s1"], f[f"{p}_s0"])
        self.dt = NP_DTYPE[f[f"{p}_dtype"]] if p != "out" else NP_DTYPE[f["out_dtype"]]
        self.shape = tuple(1 if s == 0 else n for n, s in zip(shape, self.strides, strict=True))
        self.full = self.shape == shape

    def view(self, state: MachineState, dt: np.dtype | None = None) -> np.ndarray:
        return _eview(state.sram, self.addr, self.shape, self.strides, dt or self.dt)

    def same(self, other: Operand) -> bool:
        return (self.addr, self.strides, self.dt) == (other.addr, other.strides, other.dt)


def build_eltwise(op: Op, cache: dict) -> Step | None:
    """The ELTWISE closure, or None: the reference. Kernels on (``jit.enabled``, read as the
    program's closures are built): ``kern_vec``'s compiled loop, its batches the numpy forms
    (``numpy_eltwise``)."""
    if jit.enabled():
        return kern_vec.build_eltwise(op, lambda: numpy_eltwise(op, cache))
    return numpy_eltwise(op, cache)


def numpy_eltwise(op: Op, cache: dict) -> Step | None:
    """The ELTWISE closure of numpy passes (the forms of the module docstring), or None."""
    f = op.f
    eop = EltOp(f["op"])
    shape = (f["d2"], f["d1"], f["d0"])
    if 0 in shape:
        return None
    ops = [Operand(f, p, shape) for p in "ab"]
    out = Operand(f, "out", shape)
    out.shape = shape
    left = 0 if eop == EltOp.MUL else f["left_shift"]
    sides = [(f["a_zp"], f["a_mult"], f["a_shift"]), (f["b_zp"], f["b_mult"], f["b_shift"])]
    tables = [side_table(cache, o.dt, eop, zp, left, mu, sh)
              for o, (zp, mu, sh) in zip(ops, sides, strict=True)]
    bounds = [side_bounds(o.dt, eop, zp, left, mu, sh)
              for o, (zp, mu, sh) in zip(ops, sides, strict=True)]
    const = [b[0] if b[0] == b[1] else None for b in bounds]
    single = _single(f, eop, ops, out, tables, const, cache)
    if single is not None:
        return single
    if tables[0] is not None and tables[1] is not None:
        if ops[0].dt.itemsize == 1 and ops[1].dt.itemsize == 1:
            return _pair(f, eop, ops, out, tables, cache)
        r_lo, r_hi = (_sat(v) for v in combined_bounds(eop, bounds[0], bounds[1]))
        if r_hi - r_lo < LUT_RANGE_MAX:
            return _out_table(f, eop, ops, out, tables, (r_lo, r_hi), cache, left, sides)
    return _general(f, eop, ops, out, tables, const, bounds, left, sides)


_COMBINE = {EltOp.ADD: np.add, EltOp.SUB: np.subtract, EltOp.MUL: np.multiply,
            EltOp.MAX: np.maximum, EltOp.MIN: np.minimum}


def _combine_sat(eop: EltOp, ra: np.ndarray | np.integer, rb: np.ndarray | np.integer
                 ) -> np.ndarray:
    """The reference's ``sat32(ra op rb)`` of int64 contributions (tables' entries)."""
    r = _COMBINE[eop](ra, rb)
    if eop in (EltOp.ADD, EltOp.SUB, EltOp.MUL):
        np.clip(r, INT32_MIN, INT32_MAX, out=r)
    return r


def _single(f: dict[str, Any], eop: EltOp, ops: list[Operand], out: Operand,
            tables: list, const: list, cache: dict) -> Step | None:
    """``step_single`` when the output is a function of one int8 / int16 operand's value: the
    other's contribution is a constant, or both are the same view."""
    out_key = (eop, f["out_mult"], f["out_shift"], f["out_zp"], f["act_min"], f["act_max"],
               out.dt.str)
    if tables[0] is not None and tables[1] is not None and ops[0].same(ops[1]):
        k, key = 0, ("single-same", id(tables[0]), id(tables[1]), *out_key)
        make = lambda: _combine_sat(eop, tables[0], tables[1])  # noqa: E731
    elif tables[0] is not None and const[1] is not None:
        k, key = 0, ("single-a", id(tables[0]), const[1], *out_key)
        make = lambda: _combine_sat(eop, tables[0], np.int64(const[1]))  # noqa: E731
    elif tables[1] is not None and const[0] is not None:
        k, key = 1, ("single-b", id(tables[1]), const[0], *out_key)
        make = lambda: _combine_sat(eop, np.int64(const[0]), tables[1])  # noqa: E731
    else:
        return None
    hit = cache.get(key)
    if hit is None:  # keeps its tables alive: their ids stay theirs
        hit = cache[key] = (elt_out(make(), f, out.dt), tables)
    table, src = hit[0], ops[k]
    udt = UNSIGNED[src.dt.itemsize]
    kept = Views(lambda state: (src.view(state, udt), out.view(state)))

    def step_single(state: MachineState) -> None:
        x, y = kept.get(state)
        y[...] = np.take(table, x)
    return step_single


def _pair(f: dict[str, Any], eop: EltOp, ops: list[Operand], out: Operand, tables: list,
          cache: dict) -> Step:
    """int8 with int8: the output of every pair of values, one gather (a 256 x 256 table)."""
    key = ("pair", id(tables[0]), id(tables[1]), eop, f["out_mult"], f["out_shift"],
           f["out_zp"], f["act_min"], f["act_max"], out.dt.str)
    pair = cache.get(key)
    if pair is None:
        r = _combine_sat(eop, tables[0][:, None], tables[1][None, :])
        pair = cache[key] = (elt_out(r, f, out.dt).reshape(-1), tables)
    pair_table = pair[0]
    a, b = ops
    u8, u16 = UNSIGNED[1], UNSIGNED[2]

    kept = Views(lambda state: (a.view(state, u8), b.view(state, u8), out.view(state)))

    def step_pair(state: MachineState) -> None:
        va, vb, vo = kept.get(state)
        idx = np.left_shift(va, 8, dtype=u16)
        if a.full:
            idx |= vb
        else:  # broadcast: a stride-0 operand has its distinct values
            idx = idx | vb
        vo[...] = np.take(pair_table, idx)
    k = next((k for k in (0, 1) if ops[k].shape == (1, 1, 1) and ops[1 - k].full), None)
    if k is None:
        return step_pair
    # one operand a single element (every stride 0): its row (or column) of the pair table,
    # 256 entries, gathered by the other (no index to build)
    pairs = pair_table.reshape(256, 256)

    def step_pair_one(state: MachineState) -> None:
        if state.batch is not None:  # the element may differ between the samples
            step_pair(state)
            return
        va, vb, vo = kept.get(state)
        v = int((va if k == 0 else vb)[0, 0, 0])
        vo[...] = np.take(pairs[v] if k == 0 else pairs[:, v], vb if k == 0 else va)
    return step_pair_one


def _out_table(f: dict[str, Any], eop: EltOp, ops: list[Operand], out: Operand, tables: list,
               r_range: tuple[int, int], cache: dict, left: int, sides: list) -> Step:
    """Both operands int8 / int16, the combined values within LUT_RANGE_MAX: the output
    stage one gather too."""
    r_lo, r_hi = r_range
    key = ("out", r_lo, r_hi, f["out_mult"], f["out_shift"], f["out_zp"], f["act_min"],
           f["act_max"], out.dt.str)
    out_table = cache.get(key)
    if out_table is None:
        out_table = cache[key] = elt_out(np.arange(r_lo, r_hi + 1, dtype=I64), f, out.dt)
    combine = _COMBINE[eop]
    (fa, fb), (ua, ub) = _side_fns(eop, ops, tables, [None, None], sides, left)
    (a, ta), (b, tb) = zip(ops, tables, strict=True)
    raw = combined_bounds(eop, (int(ta.min()), int(ta.max())), (int(tb.min()), int(tb.max())))
    clamp = raw[0] < INT32_MIN or raw[1] > INT32_MAX  # MAX / MIN stay inside int32

    def step_table(state: MachineState) -> None:
        r = combine(fa(a.view(state, ua)), fb(b.view(state, ub)))
        if clamp:
            np.maximum(r, INT32_MIN, out=r)
            np.minimum(r, INT32_MAX, out=r)
        r -= r_lo
        out.view(state)[...] = np.take(out_table, r)
    return step_table


def _side_fns(eop: EltOp, ops: list[Operand], tables: list, const: list, sides: list,
              left: int) -> tuple[list, list]:
    """Per operand: the function of its view giving its int64 contribution (None: the
    constant ``const``), and the type it is viewed as (gathered: unsigned, the index)."""
    fns: list[Any] = []
    udts = []
    for o, t, c, (zp, mu, sh) in zip(ops, tables, const, sides, strict=True):
        k = None if t is None else linear_shift(t, o.dt, eop, zp, left, mu, sh)
        if c is not None:
            fns.append(None)
        elif t is None:
            fns.append(side_fn(o.dt, eop, zp, left, mu, sh))
        elif k is not None:
            fns.append(linear_fn(zp, k))
        else:
            fns.append(lambda x, t=t: np.take(t, x))
        udts.append(UNSIGNED[o.dt.itemsize] if t is not None and k is None else o.dt)
    return fns, udts


def _general(f: dict[str, Any], eop: EltOp, ops: list[Operand], out: Operand, tables: list,
             const: list, bounds: list, left: int, sides: list) -> Step | None:
    """``step``: int64 passes on the operands' distinct values, one OutStage."""
    fns, udts = _side_fns(eop, ops, tables, const, sides, left)
    if fns[0] is None and fns[1] is None:
        return None  # a constant output: the reference
    a, b = ops
    r_lo, r_hi = combined_bounds(eop, bounds[0], bounds[1])
    if eop in (EltOp.MAX, EltOp.MIN):
        r_lo, r_hi = _sat(r_lo), _sat(r_hi)  # both contributions are inside int32
    stage = OutStage(f, r_lo, r_hi)
    combine = _COMBINE[eop]
    fa, fb = fns
    ca, cb = const
    # where the combination is written: a fresh full-shape contribution, else a new array
    into = 0 if fa is not None and a.full else 1 if fb is not None and b.full else None
    kept = Views(lambda state: (a.view(state, udts[0]), b.view(state, udts[1]),
                                out.view(state)))
    small = _small_factor(eop, ops, fns, bounds, stage)
    if small is not None:
        linear = [None if t is None else linear_shift(t, o.dt, eop, zp, left, mu, sh)
                  for o, t, (zp, mu, sh) in zip(ops, tables, sides, strict=True)]
        scale = build_scale(f, eop, ops, linear, small[0])
        return _with_small_factor(f, combine, kept, fns, small, stage, scale)

    def step(state: MachineState) -> None:
        va, vb, vo = kept.get(state)
        ra = ca if fa is None else fa(va)
        rb = cb if fb is None else fb(vb)
        if into is None:
            r = combine(ra, rb, dtype=I64)
        else:
            r = combine(ra, rb, out=ra if into == 0 else rb)
        np.copyto(vo, stage(r), casting="unsafe")
    return step


def _small_factor(eop: EltOp, ops: list[Operand], fns: list, bounds: list, stage: OutStage
                  ) -> tuple[int, int, int] | None:
    """(k, B, the other's largest size) for a MUL whose product may leave int32 (an explicit
    sat32) where operand ``k`` is stride-0 (few distinct values, e.g. a reciprocal per row)
    and the other dense: when
    every distinct value of ``k`` is at most ``B = INT32_MAX // max |other|`` in size, the
    product stays inside int32 and the sat32 is left out."""
    if eop != EltOp.MUL or not stage.sat or None in fns:
        return None
    for k in (0, 1):
        if not ops[k].full and ops[1 - k].full:
            big = max(abs(v) for v in bounds[1 - k])
            return (k, INT32_MAX // big, big) if big else None
    return None


def _with_small_factor(f: dict[str, Any], combine: Any, kept: Views, fns: list,
                       small: tuple[int, int, int], outside: OutStage,
                       scale: FloatScale | None) -> Step:
    """``step`` with the sat32 decided per run from the stride-0 factor (``_small_factor``);
    first ``fastscale``'s float form (``scale``) where this run's factors meet its bound."""
    k, bound, big = small
    inside = OutStage(f, -big * bound, big * bound)  # |r| <= INT32_MAX: no sat32
    few_fn, dense_fn = fns[k], fns[1 - k]

    def step_bounded(state: MachineState) -> None:
        va, vb, vo = kept.get(state)
        vf, vd = (va, vb) if k == 0 else (vb, va)
        few = few_fn(vf)
        lo, hi = int(few.min()), int(few.max())
        if scale is not None and scale(vd, few, lo, hi, vo):
            return
        ok = -bound <= lo and hi <= bound
        dense = dense_fn(vd)
        r = combine(dense, few, out=dense)  # MUL: the product into the dense contribution
        np.copyto(vo, (inside if ok else outside)(r), casting="unsafe")
    return step_bounded


# ---- LUT ------------------------------------------------------------------------------------
LUT_TABLES_MAX = 64  # value tables kept per prepared program (one per distinct LUT content)


def build_lut(op: Op, cache: dict) -> Step | None:
    """The LUT closure: ``kern_vec``'s compiled loop with kernels on (batches: ``numpy_lut``),
    else ``numpy_lut``."""
    if jit.enabled():
        return kern_vec.build_lut(op, lambda: numpy_lut(op, cache), cache)
    return numpy_lut(op, cache)


def numpy_lut(op: Op, cache: dict) -> Step | None:
    """LUT through a table of its output for every input value (256 or 65536 entries) computed
    by the reference handler from the LUT memory's entries; the table is keyed by those entries'
    bytes, read on every call (LUT_LOAD may change them)."""
    f = op.f
    shape, wide, dt, base, src, dst = kern_vec.lut_fields(f)
    if 0 in shape:
        return None
    n_lut = 513 if wide else 256
    udt = UNSIGNED[dt.itemsize]
    views = Views(lambda state: (_eview(state.sram, src[0], shape, src[1], udt),
                                 _eview(state.sram, dst[0], shape, dst[1], dt)))

    def table(entries: np.ndarray) -> np.ndarray:
        key = ("lut", wide, entries.tobytes())
        hit = cache.get(key)
        if hit is None:
            one = MachineState.__new__(MachineState)  # the reference on every input value
            one.lut_bytes = np.zeros(2 * (base + n_lut), np.uint8)
            one.lut = one.lut_bytes.view("<i2")
            one.lut[base:] = entries
            n = 1 << (8 * dt.itemsize)
            one.sram = np.zeros(2 * n * dt.itemsize, np.uint8)
            one.sram[:n * dt.itemsize] = np.arange(n, dtype=udt).view(np.uint8)
            g = dict(f, d0=n, d1=1, d2=1, src_addr=0, src_s0=dt.itemsize, src_s1=0, src_s2=0,
                     dst_addr=n * dt.itemsize, dst_s0=dt.itemsize, dst_s1=0, dst_s2=0)
            exec_lut(one, g)
            if len(cache) >= LUT_TABLES_MAX:
                cache.clear()
            hit = cache[key] = one.sram[n * dt.itemsize:].view(dt).copy()
        return hit

    def step(state: MachineState) -> None:
        entries = state.lut[..., base:base + n_lut]
        if entries.ndim == 2:  # a batch
            if not _uniform(entries):
                exec_lut(state, f)
                return
            entries = entries[0]
        t = table(entries)
        x, y = views.get(state)
        y[...] = np.take(t, x)
    return step
