"""Functional semantics of CONV, MATMUL (matrix engine) and DWCONV (vector engine), bit-exact.

int8 x int8 products with zero points are summed with a float BLAS matmul, which is exact as
long as every partial sum is an integer below the float's mantissa limit: float32 when
``K * max|a - a_zp| * max|b - b_zp| < 2^24``. Longer reductions are split into chunks that
each satisfy that bound (float32 matmuls, twice as fast as float64), and the chunk results are
added in float64, exact because the ISA's field widths bound the whole sum below 2^53
(asserted at import). The int32 accumulator then wraps (wrap32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessel.isa.fields import AccMode
from tessel.sim.state import MachineState, acc_view, nd
from tessel.sim.window import Geometry, input_tile, padded_frame, window_view, windows

I8 = np.dtype("<i1")
F32_EXACT = 2**24
F64_EXACT = 2**53
MAX_DIFF = 128 + 255  # |x - zp| for int8 x and a 9-bit signed zero point
MAX_K = 15 * 15 * 65535  # CONV: kh * kw * cin; MATMUL k <= 65535
assert MAX_K * MAX_DIFF * MAX_DIFF < F64_EXACT, "float64 GEMM would not be exact"
# DWCONV: at most 15 * 15 products of |x - zp| <= 383 and |w| <= 128: float32 is always exact
assert 15 * 15 * MAX_DIFF * 128 < F32_EXACT


def _max_abs(zp: int) -> int:
    return max(abs(-128 - zp), abs(127 - zp))


def gemm_float(k: int, a_zp: int, b_zp: int) -> type:
    """float32 if a reduction of ``k`` int8 products fits float32 exactly, else float64."""
    return np.float32 if k * _max_abs(a_zp) * _max_abs(b_zp) < F32_EXACT else np.float64


def chunk_len(a_zp: int, b_zp: int) -> int:
    """The longest reduction whose partial sums all stay exact in float32."""
    return max(1, (F32_EXACT - 1) // (_max_abs(a_zp) * _max_abs(b_zp)))


def exact_matmul(a: np.ndarray, b: np.ndarray, chunk: int,
                 a_l1: float | None = None) -> np.ndarray:
    """``a @ b`` for float32 arrays of exact small integers, exact: split K into chunks.

    One float32 GEMM suffices when every row's sum of ``|a|`` times ``max |b|`` stays below
    2^24 (then every partial sum, in whatever order BLAS adds, is an exact integer): checked on
    the data first, which saves the chunking for most tiles of real activations (zeros after
    ReLU contribute nothing to the bound). ``a_l1``: a known bound on the rows' sums of ``|a|``.
    """
    k = a.shape[-1]
    if k <= chunk or _l1_exact(a, b, a_l1):
        return a @ b
    out = None
    for lo in range(0, k, chunk):
        part = (a[..., lo:lo + chunk] @ b[..., lo:lo + chunk, :]).astype(np.float64)
        out = part if out is None else out.__iadd__(part)
    return out


def uniform(x: np.ndarray) -> bool:
    """True if every sample of a batched operand (leading axis) holds the same values."""
    return x.shape[0] <= 1 or bool((x[1:] == x[:1]).all())


def batch_matmul(a: np.ndarray, b: np.ndarray, chunk: int, a_l1: float | None = None
                 ) -> np.ndarray:
    """``exact_matmul`` of a batch ``a (n, m, k)`` with ``b (n, k, n_)``; when every sample's
    ``b`` is the same (weights), one GEMM of all samples' rows with that ``b``."""
    if b.ndim == 3 and uniform(b):
        b = b[0]
    if b.ndim == 2:
        n, m, k = a.shape
        return exact_matmul(a.reshape(n * m, k), b, chunk, a_l1).reshape(n, m, -1)
    return exact_matmul(a, b, chunk, a_l1)


def _l1_exact(a: np.ndarray, b: np.ndarray, a_l1: float | None) -> bool:
    """True if ``max_i sum_k |a[i, k]| * max |b| < 2^24`` (a float32 GEMM is then exact)."""
    bmax = float(np.abs(b).max(initial=0.0))
    if bmax == 0.0:
        return True
    if a_l1 is None:
        a_l1 = float(np.abs(a).sum(axis=-1, dtype=np.float64).max(initial=0.0))
    return a_l1 * bmax < F32_EXACT


def _to_int32(s: np.ndarray) -> np.ndarray:
    """Exact integer float results -> int32, wrapping modulo 2^32."""
    if s.dtype == np.float32:
        return s.astype(np.int32)  # |s| < 2^24
    return s.astype(np.int64).astype(np.int32)


def _store_acc(state: MachineState, f: dict[str, Any], s: np.ndarray) -> None:
    """OVERWRITE: ACC = wrap32(s); ACCUMULATE: ACC = wrap32(ACC + s)."""
    rows, cols = s.shape[-2:]
    view = acc_view(state, f["acc_addr"], rows, cols, f["acc_stride"])
    if f["mode"] == AccMode.ACCUMULATE:
        view += _to_int32(s)  # int32 addition wraps
    else:
        view[...] = _to_int32(s)


def _operand_f32(x: np.ndarray, zp: int) -> np.ndarray:
    out = x.astype(np.float32)
    if zp:
        out -= zp
    return out


def exec_matmul(state: MachineState, f: dict[str, Any]) -> None:
    m, n, k = f["m"], f["n"], f["k"]
    a = nd(state.sram, f["a_addr"], (m, k), (f["a_stride_m"], f["a_stride_k"]), I8)
    b = nd(state.sram, f["b_addr"], (k, n), (f["b_stride_k"], f["b_stride_n"]), I8)
    chunk = chunk_len(f["a_zp"], f["b_zp"])
    if a.ndim == 3 and uniform(b):
        b = b[0]  # weights: checked on int8, before converting n copies
    s = (batch_matmul if a.ndim == 3 else exact_matmul)(
        _operand_f32(a, f["a_zp"]), _operand_f32(b, f["b_zp"]), chunk)
    _store_acc(state, f, s)


def exec_conv(state: MachineState, f: dict[str, Any]) -> None:
    g = Geometry.of(f)
    cin, cout = f["cin"], f["cout"]
    kk = g.kh * g.kw
    tile = input_tile(state, f, cin, I8)
    # padding contributes (x - in_zp) = 0
    frame = padded_frame(tile, g, np.float32, 0, f["in_zp"])
    lead = frame.shape[:-3]  # () or (batch,)
    # im2col on the host (a copy)
    cols = window_view(frame, g).reshape(*lead, g.oh * g.ow, kk * cin)
    w = nd(state.sram, f["w_addr"], (kk, cin, cout),
           (f["w_stride_k"], f["w_stride_ci"], f["w_stride_co"]), I8)
    if lead and uniform(w):
        w = w[0]  # the same weights in every sample: one GEMM of all samples' windows
    wf = _operand_f32(w, f["w_zp"]).reshape(*w.shape[:-3], kk * cin, cout)
    chunk = chunk_len(f["in_zp"], f["w_zp"])
    # a window's sum of |x - zp| is at most kh * kw times the largest per-pixel sum
    l1 = None if kk * cin <= chunk else kk * float(
        np.abs(frame).sum(axis=-1, dtype=np.float64).max(initial=0.0))
    if lead and wf.ndim == 2:
        n = lead[0]
        s = exact_matmul(cols.reshape(n * g.oh * g.ow, kk * cin), wf, chunk, l1)
        s = s.reshape(n, g.oh * g.ow, cout)
    else:
        s = exact_matmul(cols, wf, chunk, l1)
    _store_acc(state, f, s)


def exec_dwconv(state: MachineState, f: dict[str, Any]) -> None:
    g = Geometry.of(f)
    ch = f["ch"]
    win = windows(input_tile(state, f, ch, I8), g, np.float32, 0, f["in_zp"])
    w = nd(state.sram, f["w_addr"], (g.kh, g.kw, ch), (g.kw * f["w_stride_k"], f["w_stride_k"], 1),
           I8).astype(np.float32)
    lead = win.shape[:-5]  # () or (batch,)
    s = np.zeros((*lead, g.oh, g.ow, ch), np.float32)
    tmp = np.empty_like(s)
    for ky in range(g.kh):  # loop over kernel positions (<= 225), each a whole-tile operation
        for kx in range(g.kw):
            np.multiply(win[..., ky, kx, :], w[..., None, None, ky, kx, :], out=tmp)
            s += tmp
    _store_acc(state, f, s.reshape(*lead, g.oh * g.ow, ch))
