"""The simulator's fast path for DWCONV (split from ``tessel.sim.fastpath``, whose helpers it
uses; see its docstring for the contract): the input tile, minus its zero point as float32,
goes into a padded frame, and the outputs are float32 sums of exact integer products.

For one sample the frame is split by the output column stride into the phases of a
``window.PhaseLayout``, so that every kernel position reads long contiguous rows; with a
column stride of 1 or a dilation of 1 all positions are one view and one einsum (``_dw_wide``).
Small strided tiles of many channels are one einsum over the window view; a batch, or a tile
too large for the einsum, is one multiply-add per kernel position (``build_dwconv``'s
``step_any``). Every partial sum is an integer below 2^24 (<= 225 products of |x - zp| <= 383
and |w| <= 128, matrix.py), exact in float32 in any order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.footprint import WINDOW_FACTOR
from tessel.sim.fastpath import (
    F32,
    I8,
    AccStore,
    Step,
    Views,
    _acc_write,
    _frame_parts,
    _minus_zp,
    _uniform,
    _view,
)
from tessel.sim.prepare import Op
from tessel.sim.state import MachineState
from tessel.sim.window import Geometry, PhaseLayout

DW_EINSUM_MAX = 5000  # DWCONV outputs up to this many elements: one einsum (measured faster)
DW_EINSUM_MIN_CH = 64  # ... with at least this many channels and a column stride above 1;
# else ``_dw_wide`` (measured: its one einsum over wide rows wins at a column stride of 1)
DW_WEIGHTS_MAX = 256  # DWCONV weight blocks repeated for ``_dw_wide``, per prepared program

def build_dwconv(op: Op, sram_bytes: int, cache: dict) -> Step | None:
    """The DWCONV closure, or None (the reference handler)."""
    f = op.f
    g = Geometry.of(f)
    ch = f["ch"]
    rows, cols = g.needed()
    parts = _frame_parts(g)
    if rows * cols * ch > WINDOW_FACTOR * sram_bytes or parts is None or 0 in (g.oh, g.ow):
        return None
    tile_shape, tile_s = (g.in_h, g.in_w, ch), (f["in_stride_h"], f["in_stride_w"], 1)
    in_addr, in_zp = f["in_addr"], f["in_zp"]
    w_shape, w_s, w_addr = (g.kh, g.kw, ch), (g.kw * f["w_stride_k"], f["w_stride_k"], 1), \
        f["w_addr"]
    _, _, dr, dc, tr, tc = parts
    frame_key = ("frame", rows, cols, ch, dr.start, dr.stop, dc.start, dc.stop)
    store = AccStore(f, g.oh * g.ow, ch)
    positions = [(ky, kx) for ky in range(g.kh) for kx in range(g.kw)]
    out_shape = (g.oh, g.ow, ch)
    win_shape = (g.oh, g.ow, g.kh, g.kw, ch)
    size = g.oh * g.ow * ch

    def step_any(state: MachineState) -> None:
        pool = state.pool
        w8 = _view(state.sram, w_addr, w_shape, w_s, I8)
        w = (w8[:1] if _uniform(w8) else w8).astype(F32)  # (1 or samples, kh, kw, ch)
        tile = _view(state.sram, in_addr, tile_shape, tile_s, I8)
        ns = tile.shape[0]
        frame = pool.get((*frame_key, ns), (ns, rows, cols, ch), F32)
        _minus_zp(tile[:, tr, tc], in_zp, frame[:, dr, dc])
        s0, s1, s2, s3 = frame.strides
        s = pool.get(("dw_s", ns, *out_shape), (ns, *out_shape), F32)
        # every sum of <= 225 products |x - zp| * |w| <= 383 * 128 is exact in float32 in any
        # order (matrix.py), so the einsum and the loop give the same integers
        if ns * size <= DW_EINSUM_MAX:  # one einsum call: the loop's numpy calls cost more
            win = np.ndarray((ns, *win_shape), F32, buffer=frame,
                             strides=(s0, g.sh * s1, g.sw * s2, g.dh * s1, g.dw * s2, s3))
            np.einsum("nyxijc,nijc->nyxc", win, w, out=s)
            store(state, s)
            return
        tmp = pool.get(("dw_t", ns, *out_shape), (ns, *out_shape), F32)
        wr = w.reshape(w.shape[0], g.kh, g.kw, 1, 1, ch)
        first = True
        for ky, kx in positions:  # the reference's order: exact float32 sums either way
            win = np.ndarray((ns, *out_shape), F32, buffer=frame,
                             offset=ky * g.dh * s1 + kx * g.dw * s2,
                             strides=(s0, g.sh * s1, g.sw * s2, s3))
            if first:
                np.multiply(win, wr[:, ky, kx], out=s)
                first = False
            else:
                np.multiply(win, wr[:, ky, kx], out=tmp)
                s += tmp
        store(state, s)

    def make(state: MachineState) -> tuple:
        pool = state.pool
        frame = pool.get((*frame_key, 1), (1, rows, cols, ch), F32)
        s0, s1, s2, s3 = frame.strides
        win = np.ndarray((1, *win_shape), F32, buffer=frame,
                         strides=(s0, g.sh * s1, g.sw * s2, g.dh * s1, g.dw * s2, s3))
        return (_view(state.sram, w_addr, w_shape, w_s, I8),
                pool.get(("dw_w", *w_shape), (1, *w_shape), F32),
                _view(state.sram, in_addr, tile_shape, tile_s, I8)[:, tr, tc],
                frame[:, dr, dc], win, pool.get(("dw_s", 1, *out_shape), (1, *out_shape), F32),
                store.view(state))
    views = Views(make)
    accumulate = store.accumulate

    def step(state: MachineState) -> None:
        """``step``'s einsum for one sample, its views kept (``Views``)."""
        if state.batch is not None or size > DW_EINSUM_MAX:
            step_any(state)
            return
        w8, wb, src, dst, win, out, acc = views.get(state)
        np.copyto(wb, w8)
        _minus_zp(src, in_zp, dst)
        np.einsum("nyxijc,nijc->nyxc", win, wb, out=out)
        _acc_write(acc, out, accumulate)
    if size <= DW_EINSUM_MAX and ch >= DW_EINSUM_MIN_CH and g.sw > 1:
        return step
    return _dw_wide(f, g, parts, store, step_any, cache)


def _dw_wide(f: dict[str, Any], g: Geometry, parts: tuple, store: AccStore, step_any: Step,
             cache: dict) -> Step:
    """DWCONV for one sample as ``kh * kw`` multiply-adds over long rows: the input tile
    (minus its zero point, float32) goes into the phases of a ``PhaseLayout`` (its padding
    stays 0), each kernel position is then one ``(oh, pc * ch)`` view of a phase times that
    position's weights repeated over ``pc`` columns (kept in ``cache`` per weight bytes), and
    the valid columns of the sum go to the accumulator. With a column stride of 1, or a
    dilation of 1, every position is one slice of a single 5-D view (``PhaseLayout.grouped``,
    the padded positions of a stride not dividing ``kw`` weighted by 0): one einsum, whose
    multiply-add inner loops over the wide rows cost about half of a multiply into a pooled
    product and a sum over the positions, and a third of the loop (measured; a column
    stride and a dilation both above 1 keep the loop). Exact: every partial sum is an
    integer below 2^24 (matrix.py), so the order of the additions does not matter (a
    product with a 0 weight is 0: the frame holds finite values only). A batch runs
    ``step_any``."""
    ch = f["ch"]
    _, _, dr, dc, tr, tc = parts
    lay = PhaseLayout.of(g, ch, dc, tc)
    key = ("dwph", lay.sw, lay.rows, lay.pc, ch, lay.phase_len, dr.start, dr.stop, dc.start,
           dc.stop)
    kk, wide = g.kh * g.kw, lay.pc * ch
    in_addr, in_zp, w_addr = f["in_addr"], f["in_zp"], f["w_addr"]
    tile_shape, tile_s = (g.in_h, g.in_w, ch), (f["in_stride_h"], f["in_stride_w"], 1)
    w_shape, w_s = (g.kh, g.kw, ch), (g.kw * f["w_stride_k"], f["w_stride_k"], 1)
    accumulate, grouping = store.accumulate, lay.groups(g)

    def make(state: MachineState) -> tuple:
        pool, sram = state.pool, state.sram
        buf = pool.get(key, (lay.size,), F32)
        tile = _view(sram, in_addr, tile_shape, tile_s, I8)[0]
        writes = [(tile[tr, cs], lay.phase(buf, p)[dr, ps]) for p, cs, ps in lay.writes]
        out = pool.get(("dw_o", g.oh, wide), (g.oh, wide), F32)
        if grouping is not None:  # (groups, kh, per_group, oh, wide)
            taps: Any = lay.grouped(buf, g)
            tmp = None
        else:
            taps = [lay.tap(buf, k, g.oh, g.sh) for k in range(kk)]
            tmp = pool.get(("dw_t", g.oh, wide), (g.oh, wide), F32)
        valid = out.reshape(g.oh, lay.pc, ch)[:, :g.ow]
        acc = store.view(state)[0].reshape(g.oh, g.ow, ch)
        return _view(sram, w_addr, w_shape, w_s, I8)[0], writes, taps, out, tmp, valid, acc
    views = Views(make)
    memo: list = [(None, None)]  # (the last weight bytes, their repeated rows)

    def weights(raw: bytes, w8: np.ndarray) -> np.ndarray:
        """Each position's weights repeated over ``pc`` columns: ``(kh * kw, pc * ch)`` for
        the loop, ``(groups, kh, per_group, pc * ch)`` for the einsum (0 where ``kx >= kw``)."""
        wkey = (raw, kk, ch, lay.pc, grouping)
        wt = cache.get(wkey)
        if wt is None:
            if len(cache) >= DW_WEIGHTS_MAX:
                cache.clear()
            rep = np.empty((g.kh, g.kw, lay.pc, ch), F32)
            rep[...] = w8[:, :, None, :]
            rep = rep.reshape(g.kh, g.kw, wide)
            if grouping is None:
                wt = rep.reshape(kk, wide)
            else:
                n, per = grouping
                wt = np.zeros((n, g.kh, per, wide), F32)
                for r in range(n):
                    for j in range(per):
                        kx = j if n == 1 else r + j * n
                        if kx < g.kw:
                            wt[r, :, j] = rep[:, kx]
            wt = cache[wkey] = wt
        return wt

    def step(state: MachineState) -> None:
        if state.batch is not None:
            step_any(state)
            return
        w8, writes, taps, out, tmp, valid, acc = views.get(state)
        raw = w8.tobytes()
        last, wt = memo[0]
        if raw != last:
            wt = weights(raw, w8)
            memo[0] = (raw, wt)  # one store: a thread reads bytes and rows together
        for src, dst in writes:
            _minus_zp(src, in_zp, dst)
        if grouping is not None:
            np.einsum("rijyw,rijw->yw", taps, wt, out=out)
        else:
            np.multiply(taps[0], wt[0], out=out)
            for k in range(1, kk):
                np.multiply(taps[k], wt[k], out=tmp)
                out += tmp
        if accumulate:
            acc += valid.astype(np.int32)  # int32 addition wraps
        else:
            np.copyto(acc, valid, casting="unsafe")  # exact integers below 2^24
    return step
