"""Which memory each instruction touches, and the static legality rules of docs/isa.md.

``accesses(instr)`` gives the exact address interval of every operand box (the smallest and
largest address of an affine strided pattern are corners of it, so the interval is tight).
``static_error(instr, arch)`` returns why an instruction would trap on ``arch`` before it runs
(out-of-range operand box, overlapping accumulator rows, bad clamp, ...) or None. The binary
reader and the simulator share these so that both apply the same rules.
"""

from __future__ import annotations

import enum
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
    """
    addr = np.full((1,) * len(dims), base, dtype=np.int64)
    for k, (n, st) in enumerate(zip(dims, strides, strict=True)):
        shape = [1] * len(dims)
        shape[len(dims) - 1 - k] = n
        addr = addr + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return addr


def self_overlapping(base: int, dims: Sequence[int], strides: Sequence[int], elem: int) -> bool:
    """True if two elements of the pattern share a byte (a destination like that traps)."""
    starts = np.sort(pattern_addresses(base, dims, strides).ravel())
    return bool(starts.size > 1 and np.min(np.diff(starts)) < elem)


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


def accesses(i: Instruction) -> tuple[Access, ...]:
    """Every operand box of ``i`` (empty for WAIT / SIGNAL / END)."""
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
    return _rule_error(i)


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
