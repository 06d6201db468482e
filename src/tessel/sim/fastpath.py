"""The fast path of the functional simulator: each instruction precompiled once into a closure.

The reference handlers (``tessel.sim.functional.HANDLERS``) read their fields from a dict,
rebuild the window geometry, the chunk bounds and the operand views and allocate every host
buffer on each call. For a program run many times (``CompiledModel.run``) all of that depends
only on the instruction, so ``fast_table`` turns every instruction of a prepared program into
a closure ``step(state)`` with its shapes, strides, offsets and constants bound, once per
prepared program (cached in ``PreparedProgram.cache``). The closures compute exactly what the
reference handlers compute (tests/unit/sim/test_fastpath.py runs every instruction kind both
ways and the zoo end-to-end tests check the whole path against the golden model):

* DMA between two contiguous patterns is one byte-slice copy;
* CONV / DWCONV write the padded input frame, the im2col matrix, the float weights and the GEMM
  result into host buffers kept between calls (``Pool``: per thread, keyed by shape; the padded
  border of a frame is written once and stays zero because every user of a key writes the same
  interior), so large tiles no longer pay for fresh pages on every call; a 1x1 convolution
  without padding reads its input tile directly (no frame, no im2col);
* REQUANT keeps its checked parameter plans across runs (keyed by the parameter bytes, as in
  the reference handler, so a program that writes its parameters at run time stays exact).

A closure that raises re-runs the reference handler on the same state, so a trap carries the
reference handler's message (and a fast-path fault that the reference does not reproduce is
re-raised as a simulator fault). A batch (``BatchState``) and every instruction kind without a
closure here run the reference handlers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from tessel.isa.fields import AccMode, AccSrc, ParamMode
from tessel.isa.footprint import WINDOW_FACTOR
from tessel.isa.table import Opcode
from tessel.quant.fixedpoint import MAX_SHIFT, MIN_SHIFT
from tessel.sim.fastfix import requant_apply, requant_plan
from tessel.sim.matrix import F32_EXACT, chunk_len
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import I32, NP_DTYPE, MachineState, Trap
from tessel.sim.window import Geometry

Step = Callable[[MachineState], None]
I8 = np.dtype("<i1")
F32 = np.dtype(np.float32)
I64 = np.int64
REQUANT_PLANS_MAX = 4096  # distinct parameter blocks kept per prepared program


class Pool:
    """Host buffers reused between instructions and runs, keyed by (role, shape, dtype)."""

    def __init__(self) -> None:
        self.bufs: dict[tuple, np.ndarray] = {}

    def get(self, key: tuple, shape: tuple[int, ...], dtype: Any, fill: float = 0) -> np.ndarray:
        buf = self.bufs.get(key)
        if buf is None:
            buf = self.bufs[key] = np.full(shape, fill, dtype)
        return buf


def pool_for(prep: PreparedProgram) -> Pool:
    """The calling thread's buffer pool for ``prep`` (kept in its cache: a thread id is only
    reused after its thread has ended, so no two running threads share a pool)."""
    pools = prep.cache.setdefault("pools", {})
    tid = threading.get_ident()
    pool = pools.get(tid)
    if pool is None:
        pool = pools[tid] = Pool()
    return pool


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """True if a view of ``shape`` / ``strides`` (outermost first) is C-contiguous."""
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _view(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
          dtype: np.dtype) -> np.ndarray:
    return np.ndarray(shape, dtype, buffer=buf, offset=offset, strides=strides)


# ---- DMA -----------------------------------------------------------------------------------
def _build_dma(op: Op) -> Step | None:
    f, load = op.f, op.opcode is Opcode.DMA_LOAD
    dt = NP_DTYPE[f["dtype"]]
    shape = (f["d3"], f["d2"], f["d1"], f["d0"])
    ext_s = (f["ext_s3"], f["ext_s2"], f["ext_s1"], f["ext_s0"])
    sram_s = (f["sram_s3"], f["sram_s2"], f["sram_s1"], f["sram_s0"])
    mem, ea, sa = f["mem"], f["ext_addr"], f["sram_addr"]
    n = int(np.prod(shape)) * dt.itemsize
    if n == 0:
        return lambda state: None
    if _contiguous(shape, ext_s, dt.itemsize) and _contiguous(shape, sram_s, dt.itemsize):
        if load:
            def step(state: MachineState) -> None:
                src = state.offchip[mem]
                if ea + n > src.shape[0]:
                    raise Trap("outside its memory")
                state.sram[sa:sa + n] = src[ea:ea + n]
        else:
            def step(state: MachineState) -> None:
                dst = state.offchip[mem]
                if ea + n > dst.shape[0]:
                    raise Trap("outside its memory")
                dst[ea:ea + n] = state.sram[sa:sa + n]
        return step

    def strided(state: MachineState) -> None:
        ext = _view(state.offchip[mem], ea, shape, ext_s, dt)
        sram = _view(state.sram, sa, shape, sram_s, dt)
        if load:
            sram[...] = ext
        else:
            ext[...] = sram
    return strided


# ---- accumulator stores ------------------------------------------------------------------------
def _acc_store(f: dict[str, Any], rows: int, cols: int) -> Callable[[MachineState, np.ndarray],
                                                                     None]:
    """A function storing float32 exact-integer GEMM results ``(rows, cols)`` into the
    accumulator (OVERWRITE: ACC = s; ACCUMULATE: ACC = wrap32(ACC + s)); float64 results (a
    chunked reduction) are wrapped through int64 as in ``matrix._to_int32``."""
    offset, shape, strides = 4 * f["acc_addr"], (rows, cols), (4 * f["acc_stride"], 4)
    accumulate = f["mode"] == AccMode.ACCUMULATE

    def store(state: MachineState, s: np.ndarray) -> None:
        view = _view(state.acc_bytes, offset, shape, strides, I32)
        v = s.astype(np.int32) if s.dtype == F32 else s.astype(I64).astype(np.int32)
        if accumulate:
            view += v  # int32 addition wraps
        else:
            view[...] = v
    return store


def _exact_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, chunk: int,
                l1: float | None) -> np.ndarray:
    """``matrix.exact_matmul`` writing the one-GEMM case into ``out``."""
    k = a.shape[-1]
    if k <= chunk:
        return np.matmul(a, b, out=out)
    bmax = float(np.abs(b).max(initial=0.0))
    if bmax == 0.0 or (l1 if l1 is not None else float(
            np.abs(a).sum(axis=-1, dtype=np.float64).max(initial=0.0))) * bmax < F32_EXACT:
        return np.matmul(a, b, out=out)
    res = None
    for lo in range(0, k, chunk):
        part = (a[..., lo:lo + chunk] @ b[..., lo:lo + chunk, :]).astype(np.float64)
        res = part if res is None else res.__iadd__(part)
    return res


# ---- CONV ----------------------------------------------------------------------------------
def _frame_parts(g: Geometry) -> tuple[int, int, slice, slice, slice, slice] | None:
    """Rows / cols of the padded frame and the (frame, tile) slices of the tile's interior."""
    rows, cols = g.needed()
    r0, r1 = max(0, -g.pt), min(g.in_h, rows - g.pt)
    c0, c1 = max(0, -g.pl), min(g.in_w, cols - g.pl)
    if r1 <= r0 or c1 <= c0:
        return None
    return (rows, cols, slice(g.pt + r0, g.pt + r1), slice(g.pl + c0, g.pl + c1),
            slice(r0, r1), slice(c0, c1))


def _build_conv(op: Op, sram_bytes: int) -> Step | None:
    f = op.f
    g = Geometry.of(f)
    cin, cout, kk = f["cin"], f["cout"], g.kh * g.kw
    rows, cols = g.needed()
    parts = _frame_parts(g)
    if rows * cols * cin > WINDOW_FACTOR * sram_bytes or parts is None or 0 in (g.oh, g.ow):
        return None  # traps, or an all-padding tile: the reference handler
    tile_shape, tile_s = (g.in_h, g.in_w, cin), (f["in_stride_h"], f["in_stride_w"], 1)
    in_addr, in_zp, w_zp = f["in_addr"], f["in_zp"], f["w_zp"]
    w_shape, w_s = (kk, cin, cout), (f["w_stride_k"], f["w_stride_ci"], f["w_stride_co"])
    w_addr = f["w_addr"]
    k = kk * cin
    m = g.oh * g.ow
    chunk = chunk_len(in_zp, w_zp)
    store = _acc_store(f, m, cout)
    # a 1x1 kernel without padding whose strided samples stay inside the tile: no frame
    direct = (kk == 1 and g.pt == 0 and g.pl == 0 and (g.oh - 1) * g.sh < g.in_h
              and (g.ow - 1) * g.sw < g.in_w)
    fr_rows, fr_cols, dr, dc, tr, tc = parts
    frame_key = ("frame", rows, cols, cin, dr.start, dr.stop, dc.start, dc.stop)
    win_shape = (g.oh, g.ow, g.kh, g.kw, cin)

    def step(state: MachineState) -> None:
        pool = state.pool
        tile = _view(state.sram, in_addr, tile_shape, tile_s, I8)
        wb = pool.get(("w", k, cout), (kk, cin, cout), F32)
        np.subtract(_view(state.sram, w_addr, w_shape, w_s, I8), w_zp, out=wb, dtype=F32)
        wf = wb.reshape(k, cout)
        a = pool.get(("cols", m, k), (m, k), F32)
        if direct:
            np.subtract(tile[:(g.oh - 1) * g.sh + 1:g.sh, :(g.ow - 1) * g.sw + 1:g.sw],
                        in_zp, out=a.reshape(g.oh, g.ow, cin), dtype=F32)
            l1 = None
        else:
            frame = pool.get(frame_key, (rows, cols, cin), F32)
            np.subtract(tile[tr, tc], in_zp, out=frame[dr, dc], dtype=F32)
            s0, s1, s2 = frame.strides
            win = np.ndarray(win_shape, F32, buffer=frame,
                             strides=(g.sh * s0, g.sw * s1, g.dh * s0, g.dw * s1, s2))
            np.copyto(a.reshape(win_shape), win)
            # a window's sum of |x - zp| is at most kh * kw times the largest per-pixel sum
            l1 = None if k <= chunk else kk * float(
                np.abs(frame).sum(axis=-1, dtype=np.float64).max(initial=0.0))
        s = _exact_gemm(a, wf, pool.get(("out", m, cout), (m, cout), F32), chunk, l1)
        store(state, s)
    return step


# ---- DWCONV --------------------------------------------------------------------------------
def _build_dwconv(op: Op, sram_bytes: int) -> Step | None:
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
    store = _acc_store(f, g.oh * g.ow, ch)
    positions = [(ky, kx) for ky in range(g.kh) for kx in range(g.kw)]
    out_shape = (g.oh, g.ow, ch)

    def step(state: MachineState) -> None:
        pool = state.pool
        frame = pool.get(frame_key, (rows, cols, ch), F32)
        np.subtract(_view(state.sram, in_addr, tile_shape, tile_s, I8)[tr, tc], in_zp,
                    out=frame[dr, dc], dtype=F32)
        w = _view(state.sram, w_addr, w_shape, w_s, I8).astype(F32)
        s0, s1, s2 = frame.strides
        s = pool.get(("dw_s", *out_shape), out_shape, F32)
        tmp = pool.get(("dw_t", *out_shape), out_shape, F32)
        first = True
        for ky, kx in positions:  # the reference's order: exact float32 sums either way
            win = np.ndarray(out_shape, F32, buffer=frame, offset=ky * g.dh * s0 + kx * g.dw * s1,
                             strides=(g.sh * s0, g.sw * s1, s2))
            if first:
                np.multiply(win, w[ky, kx], out=s)
                first = False
            else:
                np.multiply(win, w[ky, kx], out=tmp)
                s += tmp
        store(state, s.reshape(g.oh * g.ow, ch))
    return step


# ---- REQUANT -------------------------------------------------------------------------------
def _build_requant(op: Op, plans: dict) -> Step | None:
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

    def step(state: MachineState) -> None:
        sram = state.sram
        if p_addr + nbytes > sram.shape[0]:
            raise Trap("parameters outside the SRAM")
        key = (sram[p_addr:p_addr + nbytes].tobytes(), *extra)
        plan = plans.get(key)
        if plan is None:
            bias, q31, shift = np.frombuffer(key[0], I32).reshape(3, p).astype(I64)
            if (q31 < 0).any() or (shift < MIN_SHIFT).any() or (shift > MAX_SHIFT).any():
                raise Trap("bad parameters")  # the reference handler names the entry
            if len(plans) >= REQUANT_PLANS_MAX:
                plans.clear()
            plan = plans[key] = requant_plan(bias, q31, shift, *extra)
        x = _view(state.acc_bytes if from_acc else sram, src_off, (rows, ch), src_s, I32)
        _view(sram, dst_addr, (rows, ch), dst_s, dt)[...] = requant_apply(x, plan, dt)
    return step


# ---- the table -----------------------------------------------------------------------------
BUILDERS: dict[Opcode, Callable[[Op, PreparedProgram], Step | None]] = {
    Opcode.DMA_LOAD: lambda op, prep: _build_dma(op),
    Opcode.DMA_STORE: lambda op, prep: _build_dma(op),
    Opcode.CONV: lambda op, prep: _build_conv(op, prep.arch.onchip.sram_bytes),
    Opcode.DWCONV: lambda op, prep: _build_dwconv(op, prep.arch.onchip.sram_bytes),
    Opcode.REQUANT: lambda op, prep: _build_requant(op, prep.cache.setdefault("requant_plans",
                                                                              {})),
}


def build_step(op: Op, prep: PreparedProgram) -> Step | None:
    """The closure of one instruction, or None: run the reference handler."""
    if op.error is not None:
        return None
    builder = BUILDERS.get(op.opcode)
    return None if builder is None else builder(op, prep)


def fast_steps(prep: PreparedProgram) -> tuple[tuple[Step | None, ...], ...]:
    """Per queue, per instruction: its closure (None for control and reference-handled
    instructions); built once per prepared program."""
    hit = prep.cache.get("fast_steps")
    if hit is None:
        hit = prep.cache["fast_steps"] = tuple(
            tuple(None if op.opcode in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)
                  else build_step(op, prep) for op in q)
            for q in prep.queues)
    return hit
