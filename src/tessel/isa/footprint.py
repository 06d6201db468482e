"""Which memory each instruction touches, and the static legality rules of docs/isa.md.

``accesses(instr)`` gives the exact address interval of every operand box (the smallest and
largest address of an affine strided pattern are corners of it, so the interval is tight).
``static_error(instr, arch)`` returns why an instruction would trap on ``arch`` before it runs
(out-of-range operand box, overlapping accumulator rows, bad clamp, ...) or None. The binary
reader and the simulator share these so that both apply the same rules.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessel.arch.types import NpuArch
from tessel.isa.fields import AccMode, AccSrc, DType, LutMode, ParamMode, ReduceOp
from tessel.isa.instruction import Instruction
from tessel.isa.table import Opcode


class Space(enum.Enum):
    SRAM = "SRAM"
    ACC = "ACC"  # units: int32 entries
    LUT = "LUT"  # units: int16 entries
    OFFCHIP = "OFFCHIP"


@dataclass(frozen=True)
class Access:
    """Operand ``what`` reads or writes addresses [lo, hi) of ``space`` (memory ``mem``)."""

    what: str
    space: Space
    lo: int
    hi: int
    write: bool
    mem: int = 0


def box(base: int, dims: Sequence[int], strides: Sequence[int], elem: int) -> tuple[int, int]:
    """[lo, hi) of ``base + sum(i_k * s_k)`` over ``0 <= i_k < dims[k]``, ``elem`` units each."""
    lo = hi = base
    for n, st in zip(dims, strides, strict=True):
        span = st * (n - 1)
        lo, hi = lo + min(0, span), hi + max(0, span)
    return lo, hi + elem


def pattern_addresses(base: int, dims: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """Start address of every element of a strided pattern, int64, shape ``dims[::-1]``.

    Index order is the loop order of docs/isa.md (the last dimension outermost, ``i0``
    innermost), so ``.ravel()`` lists the elements in the order the hardware visits them.
    (For tests and tools on small patterns; the legality checks never enumerate addresses.)
    """
    addr = np.full((1,) * len(dims), base, dtype=np.int64)
    for k, (n, st) in enumerate(zip(dims, strides, strict=True)):
        shape = [1] * len(dims)
        shape[len(dims) - 1 - k] = n
        addr = addr + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return addr


MAX_OVERLAP_WORK = 1 << 20  # difference vectors the exact overlap test may examine


def self_overlapping(base: int, dims: Sequence[int], strides: Sequence[int], elem: int) -> bool:
    """True if two elements of the pattern share a byte (a destination like that traps).

    Decided arithmetically, never by listing addresses: a zero stride or more elements than the
    pattern's span has bytes overlaps (pigeonhole); strides that each step over the span of the
    smaller ones do not; otherwise the pattern overlaps iff some non-zero difference vector
    ``|d_k| < n_k`` has ``|sum(d_k * s_k)| < elem``, searched over every dimension but the
    longest (solved in closed form) when that is at most MAX_OVERLAP_WORK vectors. A pattern
    too irregular for that bound is treated as overlapping (docs/isa.md, static rule 6).
    """
    del base  # translation does not change overlap
    dims_strides = sorted(((n, abs(s)) for n, s in zip(dims, strides, strict=True) if n > 1),
                          key=lambda t: t[1])
    if any(s == 0 for _, s in dims_strides):
        return True
    count = math.prod(n for n, _ in dims_strides)
    span = sum(s * (n - 1) for n, s in dims_strides) + elem
    if count * elem > span:
        return True
    covered = elem
    for n, s in dims_strides:
        if s < covered:
            break
        covered += s * (n - 1)
    else:
        return False
    return _overlap_search(dims_strides, elem)


def _overlap_search(dims_strides: list[tuple[int, int]], elem: int) -> bool:
    last = max(range(len(dims_strides)), key=lambda k: dims_strides[k][0])
    n_last, s_last = dims_strides[last]
    rest = [t for k, t in enumerate(dims_strides) if k != last]
    if math.prod(2 * n - 1 for n, _ in rest) > MAX_OVERLAP_WORK:
        return True
    partial = np.zeros(1, np.int64)
    for n, s in rest:  # every sum of d_k * s_k over the other dimensions (small, bounded above)
        partial = (partial[:, None] + np.arange(-(n - 1), n, dtype=np.int64)[None] * s).ravel()
    if s_last < elem:  # d = (0, ..., 0, 1): neighbours along the longest dimension overlap
        return True
    zero_vector = (partial.size - 1) // 2  # every axis has odd length: the centre is d = 0
    partial[zero_vector] = 1 << 62  # excluded (its only other candidates are d_last = +-1)
    for d in (np.floor(-partial / s_last), np.ceil(-partial / s_last)):
        d = np.clip(d, -(n_last - 1), n_last - 1).astype(np.int64)
        if (np.abs(partial + d * s_last) < elem).any():
            return True
    return False


def _view(i: Instruction, p: str, dims: Sequence[int], elem: int, write: bool,
          space: Space = Space.SRAM, mem: int = 0) -> Access:
    strides = [getattr(i, f"{p}_s{k}") for k in range(len(dims))]
    lo, hi = box(getattr(i, f"{p}_addr"), dims, strides, elem)
    return Access(p, space, lo, hi, write, mem)


def _dims(i: Instruction, n: int) -> list[int]:
    return [getattr(i, f"d{k}") for k in range(n)]


def _nhwc_in(i: Instruction, ch: int, elem: int) -> Access:
    lo, hi = box(i.in_addr, (i.in_h, i.in_w, ch), (i.in_stride_h, i.in_stride_w, elem), elem)
    return Access("in", Space.SRAM, lo, hi, False)


def _acc(i: Instruction, pixels: int, ch: int) -> list[Access]:
    lo, hi = box(i.acc_addr, (pixels, ch), (i.acc_stride, 1), 1)
    out = [Access("acc", Space.ACC, lo, hi, True)]
    if i.mode == AccMode.ACCUMULATE:
        out.append(Access("acc", Space.ACC, lo, hi, False))
    return out


@functools.lru_cache(maxsize=1 << 17)
def accesses(i: Instruction) -> tuple[Access, ...]:
    """Every operand box of ``i`` (empty for WAIT / SIGNAL / END). Memoised: the schedule
    stage asks for the same instructions' boxes several times (residency, prefetch, emit)."""
    op = i.opcode
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        d, w = _dims(i, 4), i.dtype.nbytes
        load = op == Opcode.DMA_LOAD
        return (_view(i, "ext", d, w, not load, Space.OFFCHIP, i.mem), _view(i, "sram", d, w, load))
    if op == Opcode.CONV:
        wlo, whi = box(i.w_addr, (i.kh * i.kw, i.cin, i.cout),
                       (i.w_stride_k, i.w_stride_ci, i.w_stride_co), 1)
        return (_nhwc_in(i, i.cin, 1), Access("w", Space.SRAM, wlo, whi, False),
                *_acc(i, i.out_h * i.out_w, i.cout))
    if op == Opcode.MATMUL:
        alo, ahi = box(i.a_addr, (i.m, i.k), (i.a_stride_m, i.a_stride_k), 1)
        blo, bhi = box(i.b_addr, (i.k, i.n), (i.b_stride_k, i.b_stride_n), 1)
        return (Access("a", Space.SRAM, alo, ahi, False), Access("b", Space.SRAM, blo, bhi, False),
                *_acc(i, i.m, i.n))
    if op == Opcode.DWCONV:
        wlo, whi = box(i.w_addr, (i.kh * i.kw, i.ch), (i.w_stride_k, 1), 1)
        return (_nhwc_in(i, i.ch, 1), Access("w", Space.SRAM, wlo, whi, False),
                *_acc(i, i.out_h * i.out_w, i.ch))
    return _vector_accesses(i)


def _vector_accesses(i: Instruction) -> tuple[Access, ...]:
    op = i.opcode
    if op == Opcode.REQUANT:
        if i.src == AccSrc.ACC:
            lo, hi = box(i.src_addr, (i.rows, i.ch), (i.src_stride, 1), 1)
            src = Access("src", Space.ACC, lo, hi, False)
        else:
            lo, hi = box(i.src_addr, (i.rows, i.ch), (i.src_stride, 4), 4)
            src = Access("src", Space.SRAM, lo, hi, False)
        p = i.ch if i.param_mode == ParamMode.PER_CHANNEL else 1
        params = Access("params", Space.SRAM, i.param_addr, i.param_addr + 12 * p, False)
        w = i.out_dtype.nbytes
        dlo, dhi = box(i.dst_addr, (i.rows, i.ch), (i.dst_stride, w), w)
        return (src, params, Access("dst", Space.SRAM, dlo, dhi, True))
    if op == Opcode.ELTWISE:
        d = _dims(i, 3)
        return (_view(i, "a", d, i.a_dtype.nbytes, False),
                _view(i, "b", d, i.b_dtype.nbytes, False),
                _view(i, "out", d, i.out_dtype.nbytes, True))
    if op == Opcode.LUT:
        d, w = _dims(i, 3), (1 if i.lut_mode == LutMode.I8_256 else 2)
        n = 256 if i.lut_mode == LutMode.I8_256 else 513
        lut = Access("lut", Space.LUT, i.lut_base, i.lut_base + n, False)
        return (_view(i, "src", d, w, False), lut,
                _view(i, "dst", d, w, True))
    if op == Opcode.LUT_LOAD:
        return (Access("src", Space.SRAM, i.src_addr, i.src_addr + 2 * i.count, False),
                Access("lut", Space.LUT, i.lut_base, i.lut_base + i.count, True))
    if op == Opcode.POOL:
        w = i.dtype.nbytes
        olo, ohi = box(i.out_addr, (i.out_h, i.out_w, i.ch), (i.out_stride_h, i.out_stride_w, w), w)
        return (_nhwc_in(i, i.ch, w), Access("out", Space.SRAM, olo, ohi, True))
    if op == Opcode.REDUCE:
        d = _dims(i, 3)
        kept = [n for k, n in enumerate(d) if k != i.axis]
        w = 4 if i.op in (ReduceOp.SUM, ReduceOp.SUMSQ) else i.dtype.nbytes
        dlo, dhi = box(i.dst_addr, kept, (i.dst_s0, i.dst_s1), w)
        dst = Access("dst", Space.SRAM, dlo, dhi, True)
        return (_view(i, "src", d, i.dtype.nbytes, False), dst)
    if op == Opcode.COPY:
        d = _dims(i, 4)
        return (_view(i, "src", d, i.dtype.nbytes, False), _view(i, "dst", d, i.dtype.nbytes, True))
    if op == Opcode.UNARY:
        d = _dims(i, 3)
        return (_view(i, "src", d, 4, False), _view(i, "dst", d, 4, True))
    return ()


def _space_size(arch: NpuArch, a: Access) -> tuple[int, str]:
    if a.space == Space.SRAM:
        return arch.onchip.sram_bytes, "SRAM"
    if a.space == Space.ACC:
        return arch.derived.acc_entries, "accumulator"
    if a.space == Space.LUT:
        return arch.onchip.lut_entries, "LUT memory"
    mem = arch.offchip[a.mem]
    return mem.size_bytes, f"off-chip memory {a.mem} ({mem.name})"


def static_error(i: Instruction, arch: NpuArch) -> str | None:
    """Why ``i`` must trap on ``arch`` whatever the data (None if it may run)."""
    op = i.opcode
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE) and i.mem >= len(arch.offchip):
        return f"mem {i.mem} does not exist ({len(arch.offchip)} off-chip memories)"
    for a in accesses(i):
        size, name = _space_size(arch, a)
        if a.lo < 0 or a.hi > size:
            return f"{a.what} touches [{a.lo}, {a.hi}) outside the {name} [0, {size})"
    return _rule_error(i) or resource_error(i, arch)


WINDOW_FACTOR = 64  # a window frame or im2col may hold at most this many SRAMs of elements


def _sram_elements(i: Instruction) -> list[tuple[str, int]]:
    """(operand, elements) of every SRAM operand pattern of ``i`` (static rule 5)."""
    op = i.opcode
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE, Opcode.COPY):
        return [("sram" if op != Opcode.COPY else "src", math.prod(_dims(i, 4)))]
    if op in (Opcode.ELTWISE, Opcode.LUT, Opcode.UNARY, Opcode.REDUCE):
        return [("src" if op != Opcode.ELTWISE else "a", math.prod(_dims(i, 3)))]
    if op == Opcode.REQUANT:
        return [("dst", i.rows * i.ch)]
    if op == Opcode.MATMUL:
        return [("a", i.m * i.k), ("b", i.k * i.n)]
    if op == Opcode.CONV:
        return [("in", i.in_h * i.in_w * i.cin), ("w", i.kh * i.kw * i.cin * i.cout)]
    if op in (Opcode.DWCONV, Opcode.POOL):
        return [("in", i.in_h * i.in_w * i.ch), ("out", i.out_h * i.out_w * i.ch)]
    return []


def window_frame(i: Instruction) -> tuple[int, int]:
    """(rows, columns) of the padded frame a CONV / DWCONV / POOL window sweeps."""
    return ((i.out_h - 1) * i.stride_h + (i.kh - 1) * i.dil_h + 1,
            (i.out_w - 1) * i.stride_w + (i.kw - 1) * i.dil_w + 1)


def resource_error(i: Instruction, arch: NpuArch) -> str | None:
    """Static rule 5: bounds that keep every instruction's work proportional to the memories.

    No SRAM operand pattern has more elements than the SRAM has bytes (one that does must
    alias itself through zero or overlapping strides), and the window frame of CONV / DWCONV
    / POOL (and CONV's im2col) has at most WINDOW_FACTOR x SRAM bytes elements.
    """
    sram = arch.onchip.sram_bytes
    for what, n in _sram_elements(i):
        if n > sram:
            return f"{what} has {n} elements, more than the {sram}-byte SRAM holds"
    if i.opcode in (Opcode.CONV, Opcode.DWCONV, Opcode.POOL):
        rows, cols = window_frame(i)
        ch = i.cin if i.opcode == Opcode.CONV else i.ch
        sizes = [("window frame", rows * cols * ch)]
        if i.opcode == Opcode.CONV:
            sizes.append(("im2col", i.out_h * i.out_w * i.kh * i.kw * ch))
        for what, n in sizes:
            if n > WINDOW_FACTOR * sram:
                return (f"{what} of {n} elements exceeds {WINDOW_FACTOR} x the {sram}-byte SRAM "
                        "(static resource bound)")
    return None


def _rule_error(i: Instruction) -> str | None:
    op = i.opcode
    width = {Opcode.CONV: "cout", Opcode.MATMUL: "n", Opcode.DWCONV: "ch"}.get(op)
    if width is not None and i.acc_stride < getattr(i, width):
        return f"acc_stride {i.acc_stride} < {width} {getattr(i, width)}: output rows overlap"
    if op in (Opcode.POOL,) and i.dtype == DType.I32:
        return "POOL works on I8 or I16 only"
    out_type = {Opcode.REQUANT: "out_dtype", Opcode.ELTWISE: "out_dtype", Opcode.POOL: "dtype"}
    if op in out_type:
        t: DType = getattr(i, out_type[op])
        if not t.lo <= i.act_min <= i.act_max <= t.hi:
            return f"clamp [{i.act_min}, {i.act_max}] is empty or outside {t.name} [{t.lo}, {t.hi}]"
    return None
