"""REQUANT as one compiled loop over the tile (``tessel.sim.jit``), for the simulator's fast
path when kernels are on; ``tessel.sim.fastrq`` (numpy passes) when they are off.

The kernel is docs/numerics.md's requantisation written out per element,

    y = clamp(MBQM(sat32(acc + bias), q31, shift) + zp, lo, hi)
    MBQM(t) = RDBPOT(SRDHM(sat32(t << max(shift, 0)), q31), max(-shift, 0))

with ``SRDHM(t, q) = (t q + 2^30) >> 31`` and ``RDBPOT(t, e) = (t + 2^(e-1) - [t < 0]) >> e``
(floor shifts, ``fastfix``'s identities; ``e = 0``: ``t``), in float64 operations that are
each exact, because on a host without AVX-512 every int64 multiply, arithmetic shift, min
and max is emulated (the int64 form ran at ~2.2 ns an element, this one ~1.5):

* sat32 and the left shift: integers below 2^33, and a multiply by ``2^left`` (exact scaling)
  clamped to the int32 range;
* SRDHM with ``q = 2^16 qh + ql`` (``qh < 2^15``, ``ql < 2^16``):
  ``floor((t q + 2^30) / 2^31) = floor((t qh + floor((t ql + 2^30) / 2^16)) / 2^15)``: every
  operand an integer below 2^48, every scaling by a power of two exact, and the inner floor
  drops only a remainder below 2^16, which cannot carry the outer one across 2^31;
* RDBPOT rounds half away from zero: ``trunc(v + copysign(1/2, v))`` with ``v = s 2^-e`` (at
  most 33 significant bits; ``e = 0``: ``v`` an integer, which the half does not move).

Branch-free: a channel's column of ``params`` holds its bias, ``2^left``, ``qh``, ``ql`` and
``2^-e``, so a shift of 0 is the identity of the same steps. No plan form, no bound to prove;
the closure keeps the checked parameter rows by the parameter bytes, as ``fastrq`` keeps its
plans, and runs the kernel on flat views of the memories (row strides in elements: one
signature per output type, and unit-stride rows numba vectorises).
"""

from __future__ import annotations

import numpy as np

from tessel.isa.fields import AccSrc, ParamMode
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN, MAX_SHIFT, MIN_SHIFT
from tessel.sim import fastrq, jit
from tessel.sim.fastpath import I64, Step, Views, _uniform, memory_view
from tessel.sim.prepare import Op
from tessel.sim.state import I32, NP_DTYPE, MachineState, Trap, extent
from tessel.sim.vector import exec_requant

PARAMS_MAX = 4096  # distinct parameter blocks kept per prepared program
ROW_MAX = 1024  # a dense tile's kernel rows: at most this many elements (several tile rows)


@jit.kernel
def requant_rows(x, x0, xs, dst, d0, ds, rows, params, zp, lo, hi):
    """``dst[d0 + r ds + c] = requantize(x[x0 + r xs + c])`` for ``rows`` rows of
    ``width = params.shape[1]`` elements, element ``c`` with column ``c`` of ``params``
    (``param_rows``): ``x`` a flat int32 memory, ``dst`` a flat int8, int16 or int32 one.
    (Row slices, not computed indices: numba then knows the indices are not negative and
    vectorises the row.)"""
    width = params.shape[1]
    bias, scale, qh, ql, down = params[0], params[1], params[2], params[3], params[4]
    t_lo, t_hi = np.float64(INT32_MIN), np.float64(INT32_MAX)
    fz, y_lo, y_hi = np.float64(zp), np.float64(lo), np.float64(hi)
    for r in range(rows):
        xr = x[x0 + r * xs:x0 + r * xs + width]
        dr = dst[d0 + r * ds:d0 + r * ds + width]
        for c in range(width):
            t = min(max(np.float64(xr[c]) + bias[c], t_lo), t_hi)  # sat32(acc + bias)
            t = min(max(t * scale[c], t_lo), t_hi)  # sat32(t << left)
            low = np.floor((t * ql[c] + 1073741824.0) * (1.0 / 65536.0))
            s = np.floor((t * qh[c] + low) * (1.0 / 32768.0))  # SRDHM
            v = s * down[c]
            v = np.trunc(v + np.copysign(0.5, v))  # RDBPOT
            dr[c] = np.int32(min(max(v + fz, y_lo), y_hi))


def param_rows(bias: np.ndarray, q31: np.ndarray, shift: np.ndarray, width: int) -> np.ndarray:
    """``requant_rows``'s ``(5, width)`` float64 parameters from int64 ones per channel or
    per tensor (length 1), repeated to ``width`` elements (a multiple of their length): bias,
    ``2^left``, the multiplier's high and low 16 bits ``qh``, ``ql`` and ``2^-e``."""
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    rows = np.stack([bias.astype(np.float64), np.ldexp(1.0, left), (q31 >> 16).astype(np.float64),
                     (q31 & 0xFFFF).astype(np.float64), np.ldexp(1.0, -right)])
    return np.ascontiguousarray(np.tile(rows, (1, width // len(bias))), np.float64)


def row_tiles(rows: int, ch: int) -> int:
    """Tile rows per kernel row for a dense tile: the largest divisor of ``rows`` with at
    most ROW_MAX elements (1 when even one row is longer). Rows of a few elements leave the
    vectorised loop's width unused: 16-channel rows cost 2x the element time of 784-element
    ones (measured)."""
    return max((d for d in range(1, rows + 1) if rows % d == 0 and d * ch <= ROW_MAX),
               default=1)


def flat(state: MachineState, mem: str, addr: int, dtype: np.dtype, sample: int | None = None
         ) -> np.ndarray:
    """Memory ``mem`` of ``state`` (one sample's row of a batch) as a flat array of ``dtype``
    whose element ``addr // itemsize`` starts at byte ``addr`` (kept per state for one
    sample: ``memory_view``)."""
    buf = getattr(state, mem)
    off, size = addr % dtype.itemsize, buf.shape[-1]
    n = (size - off) // dtype.itemsize
    if sample is None:
        return memory_view(state, (mem, off, (n,), (dtype.itemsize,), dtype))
    return np.ndarray((n,), dtype, buffer=buf[sample], offset=off)


def build_requant(op: Op, cache: dict) -> Step | None:
    """The REQUANT closure: the kernel's when kernels are on (``jit.enabled``, read as the
    program's closures are built) and the rows' strides are whole elements, else ``fastrq``'s.
    ``cache``: the prepared program's (the checked parameter rows by parameter key, kept
    apart from ``fastrq``'s plans)."""
    f = op.f
    rows, ch = f["rows"], f["ch"]
    dt = NP_DTYPE[f["out_dtype"]]
    from_acc = f["src"] == AccSrc.ACC
    x_mem = "acc_bytes" if from_acc else "sram"
    x_addr = 4 * f["src_addr"] if from_acc else f["src_addr"]
    x_row = 4 * f["src_stride"] if from_acc else f["src_stride"]  # bytes
    dst_addr, dst_row = f["dst_addr"], f["dst_stride"]
    x_lo, x_end = extent(x_addr, (rows, ch), (x_row, 4), 4)
    dst_lo, dst_end = extent(dst_addr, (rows, ch), (dst_row, dt.itemsize), dt.itemsize)
    # the kernel writes row by row: an SRAM source the output overlaps takes fastrq (which
    # reads the whole tile first, as the reference does), unless it is exactly in place (an
    # int32 output over its own source: each element is read before it is written, and no
    # other element reads its bytes)
    in_place = dt.itemsize == 4 and x_addr == dst_addr and x_row == dst_row
    overlap = not from_acc and x_lo < dst_end and dst_lo < x_end and not in_place
    if not jit.enabled() or x_row % 4 or dst_row % dt.itemsize or overlap or rows * ch == 0:
        return fastrq.build_requant(op, cache.setdefault("requant_plans", {}), cache)
    plans = cache.setdefault("requant_rows", {})
    run = requant_rows.compiled
    p = ch if f["param_mode"] == ParamMode.PER_CHANNEL else 1
    p_addr, nbytes = f["param_addr"], 12 * p
    zp, lo, hi = f["out_zp"], f["act_min"], f["act_max"]
    xs, ds = x_row // 4, dst_row // dt.itemsize  # row strides in elements
    k = row_tiles(rows, ch) if xs == ch and ds == ch else 1  # dense: rows of k tile rows
    kernel_rows, width = rows // k, k * ch
    xs, ds = xs * k, ds * k
    x0, d0 = x_addr // 4, dst_addr // dt.itemsize

    def checked(raw: bytes) -> np.ndarray:
        """The parameter rows of a block's bytes (kept by bytes and clamp fields)."""
        key = (raw, zp, lo, hi, width)
        prm = plans.get(key)
        if prm is None:
            bias, q31, shift = np.frombuffer(raw, I32).reshape(3, p).astype(I64)
            if (q31 < 0).any() or (shift < MIN_SHIFT).any() or (shift > MAX_SHIFT).any():
                raise Trap("bad parameters")  # the reference handler names the entry
            if len(plans) >= PARAMS_MAX:
                plans.clear()
            prm = plans[key] = param_rows(bias, q31, shift, width)
        return prm

    def operands(state: MachineState, sample: int | None = None) -> tuple:
        if min(x_lo, dst_lo) < 0 or x_end > getattr(state, x_mem).shape[-1] or \
                dst_end > state.sram.shape[-1]:
            raise Trap("operand outside its memory")  # the reference handler says which
        return flat(state, x_mem, x_addr, I32, sample), flat(state, "sram", dst_addr, dt, sample)

    def one(state: MachineState) -> tuple:
        """``operands`` and the parameter block as a live memoryview, copied to compare with
        the last bytes (``tobytes``, then a memcmp: ~0.1 us for 64 channels' 768 bytes,
        where comparing the memoryview itself unpacks byte by byte, ~1.4 us)."""
        return (*operands(state), memoryview(state.sram)[p_addr:p_addr + nbytes])
    views = Views(one)
    memo: list = [(None, None)]  # (the last parameter bytes, their rows): replaced whole

    def step_batch(state: MachineState) -> None:
        blk = state.sram[:, p_addr:p_addr + nbytes]
        if not _uniform(blk):  # parameters differing between samples: the reference
            exec_requant(state, f)
            return
        prm = checked(blk[0].tobytes())
        for n in range(blk.shape[0]):
            x, dst = operands(state, n)
            run(x, x0, xs, dst, d0, ds, kernel_rows, prm, zp, lo, hi)

    def step(state: MachineState) -> None:
        sram = state.sram
        if p_addr + nbytes > sram.shape[-1]:
            raise Trap("parameters outside the SRAM")
        if sram.ndim == 2:
            step_batch(state)
            return
        x, dst, block = views.get(state)
        last, prm = memo[0]
        raw = block.tobytes()
        if raw != last:  # the parameter bytes changed (or the first call)
            prm = checked(raw)
            memo[0] = (raw, prm)
        run(x, x0, xs, dst, d0, ds, kernel_rows, prm, zp, lo, hi)
    return step
