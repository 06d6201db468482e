"""The simulator's fast path for REQUANT (split from ``tessel.sim.fastpath``, whose helpers it
uses; see its docstring for the contract): checked parameter plans kept across runs, the
passes of ``tessel.sim.fastfix`` run on pooled work buffers.

A plan is keyed by the parameter bytes read from SRAM (as in the reference handler, so a
program that writes its parameters at run time stays exact); each closure also keeps its last
bytes and tiled plan. One sample's tile of at most TILE_ELEMS_MAX elements runs flattened
against a plan tiled to the whole tile (``TiledPlans``): numpy's trivial loop over 1-D
operands of one shape, without its broadcasting iterator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import AccSrc, ParamMode
from tessel.isa.fixedpoint import MAX_SHIFT, MIN_SHIFT
from tessel.sim.fastfix import LEFT, Work, float_plan, requant_into, requant_plan, work_buffers
from tessel.sim.fastpath import I64, Pool, PoolKept, Step, Views, _uniform, memory_view
from tessel.sim.prepare import Op
from tessel.sim.state import I32, NP_DTYPE, MachineState, Trap
from tessel.sim.vector import exec_requant

REQUANT_PLANS_MAX = 4096  # distinct parameter blocks kept per prepared program
TILED_BYTES_MAX = 128 << 20  # requantisation plans tiled to whole tiles, per prepared program
TILE_ELEMS_MAX = 16384  # a tiled plan array: at most this many elements (384 KiB a plan)


def tile_rows(rows: int, ch: int) -> int:
    """Rows of a tiled plan: the largest divisor of ``rows`` with at most TILE_ELEMS_MAX
    elements (1 when even one row is longer)."""
    best = 1
    for d in range(1, rows + 1):
        if rows % d == 0 and d * ch <= TILE_ELEMS_MAX:
            best = d
    return best


class TiledPlans:
    """Requantisation plans with their per-channel arrays repeated over ``tile_rows`` rows,
    for one sample the whole tile (up to TILE_ELEMS_MAX elements): every pass of
    ``requant_into`` then runs on 1-D operands of one shape (the tile, or a contiguous copy,
    flattened), numpy's trivial loop without its broadcasting iterator, ~0.5-1 us less per
    pass than rows of a few tile rows against a shorter plan (measured alone and inside
    runs: the plan arrays streaming from memory cost less than the iterator); a larger tile,
    or a batch, works in rows of ``tile_rows`` tile rows. Per-tensor arrays (length 1 over
    more channels) become numpy scalars, for the same reason. Same values, same result.
    Keyed by (parameter key, rows); emptied when it would hold more than TILED_BYTES_MAX."""

    def __init__(self) -> None:
        self.plans: dict[tuple, tuple] = {}
        self.nbytes = 0

    def get(self, key: tuple, plan: tuple, rows: int, ch: int) -> tuple:
        hit = self.plans.get(key)
        if hit is not None:
            return hit
        if plan[0] == LEFT:
            tiled = plan  # the left-shift form: not tiled
        else:
            n = tile_rows(rows, ch) * ch
            tiled = tuple(_tiled(v, ch, n) for v in plan)
        size = sum(v.nbytes for v in tiled if isinstance(v, np.ndarray))
        if self.nbytes + size > TILED_BYTES_MAX:
            self.plans.clear()
            self.nbytes = 0
        self.plans[key] = tiled
        self.nbytes += size
        return tiled


def _tiled(v: Any, ch: int, n: int) -> Any:
    """A plan entry for ``TiledPlans``: a per-channel array repeated to ``n`` elements, a
    per-tensor one (length 1) as its numpy scalar, anything else as it is."""
    if not isinstance(v, np.ndarray) or v.ndim != 1:
        return v
    if v.shape == (1,):
        return v[0]
    return np.tile(v, n // ch) if v.shape == (ch,) else v


def build_requant(op: Op, plans: dict, cache: dict) -> Step | None:
    """The REQUANT closure: ``plans`` the prepared program's checked plans by parameter key,
    ``cache`` its cache (for the ``TiledPlans``)."""
    tiled_plans = cache.setdefault("tiled", TiledPlans())
    f = op.f
    rows, ch = f["rows"], f["ch"]
    p = ch if f["param_mode"] == ParamMode.PER_CHANNEL else 1
    p_addr = f["param_addr"]
    dt = NP_DTYPE[f["out_dtype"]]
    extra = (f["out_zp"], f["act_min"], f["act_max"])
    from_acc = f["src"] == AccSrc.ACC
    src_off = 4 * f["src_addr"] if from_acc else f["src_addr"]
    src_s = (4 * f["src_stride"], 4) if from_acc else (f["src_stride"], 4)
    dst_addr, dst_s = f["dst_addr"], (f["dst_stride"], dt.itemsize)
    nbytes = 12 * p
    row_len = tile_rows(rows, ch) * ch

    def step(state: MachineState) -> None:
        sram = state.sram
        if p_addr + nbytes > sram.shape[-1]:
            raise Trap("parameters outside the SRAM")
        blk = sram[..., p_addr:p_addr + nbytes]
        if blk.ndim == 2:  # a batch: parameters differing between samples run the reference
            if not _uniform(blk):
                exec_requant(state, f)
                return
            blk = blk[0]
        raw = blk.tobytes()
        key = (raw, *extra)
        plan = plans.get(key)
        if plan is None:
            bias, q31, shift = np.frombuffer(key[0], I32).reshape(3, p).astype(I64)
            if (q31 < 0).any() or (shift < MIN_SHIFT).any() or (shift > MAX_SHIFT).any():
                raise Trap("bad parameters")  # the reference handler names the entry
            if len(plans) >= REQUANT_PLANS_MAX:
                plans.clear()
            plan = requant_plan(bias, q31, shift, *extra)
            plan = plans[key] = float_plan(plan) or plan
        tiled = tiled_plans.get((key, rows, ch), plan, rows, ch)
        memo[0] = (raw, tiled)  # one store: a thread reads bytes and plan together
        x, dst, work = views.get(state)
        requant_into(x, dst, work, tiled)

    def make_work(pool: Pool, shape: tuple[int, ...]) -> Work:
        return work_buffers(pool.get(("rq", shape), shape, I64),
                            pool.get(("rq2", shape), shape, I64))
    # one sample's work: the tile flattened, or rows of tile_rows tile rows
    one_shape = (row_len,) if row_len == rows * ch else (rows * ch // row_len, row_len)
    one_work = PoolKept(lambda pool: make_work(pool, one_shape))  # one sample's work buffers

    x_key = ("acc_bytes" if from_acc else "sram", src_off, (rows, ch), src_s, I32)
    dst_key = ("sram", dst_addr, (rows, ch), dst_s, dt)

    def make(state: MachineState) -> tuple:
        pool = state.pool
        x = memory_view(state, x_key)
        shape = (row_len,) if x.size == row_len else (x.size // row_len, row_len)
        if x.flags.c_contiguous:
            x = x.reshape(shape)  # a view: no copy into the work shape
        work = one_work.get(pool) if shape == one_shape else make_work(pool, shape)
        return (x, memory_view(state, dst_key), work)
    views = Views(make)
    memo: list = [(None, None)]  # (the last parameter bytes, their tiled plan)

    def step_memo(state: MachineState) -> None:
        sram = state.sram
        last, plan = memo[0]
        if sram.ndim == 1 and p_addr + nbytes <= sram.shape[0] and \
                sram[p_addr:p_addr + nbytes].tobytes() == last:
            x, dst, work = views.get(state)
            requant_into(x, dst, work, plan)
            return
        step(state)
    return step_memo
