"""Which memory each instruction touches, and the static legality rules of docs/isa.md.

``accesses(instr)`` gives the exact address interval of every operand box (the smallest and
largest address of an affine strided pattern are corners of it, so the interval is tight),
by the ``accesses`` rule of the instruction's definition (``InstrSpec``).
``static_error(instr, arch)`` returns why an instruction would trap on ``arch`` before it runs
(out-of-range operand box, overlapping accumulator rows, bad clamp, ...) or None, from the
definition's rules. The binary reader and the simulator share these so that both apply the
same rules.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from tessel.arch.types import NpuArch
from tessel.isa.access import Access, Space, box
from tessel.isa.instruction import Instruction
from tessel.isa.table import SPECS
from tessel.isa.window import frame_extent

__all__ = ["MAX_OVERLAP_WORK", "WINDOW_FACTOR", "Access", "Space", "accesses", "box",
           "pattern_addresses", "resource_error", "self_overlapping", "static_error",
           "window_frame"]


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


_ACCESSES = {op: spec.accesses for op, spec in SPECS.items()}


@functools.lru_cache(maxsize=1 << 17)
def accesses(i: Instruction) -> tuple[Access, ...]:
    """Every operand box of ``i`` (empty for WAIT / SIGNAL / END). Memoised: the schedule
    stage asks for the same instructions' boxes several times (residency, prefetch, emit)."""
    return _ACCESSES[i.opcode](i)


def _space_error(arch: NpuArch, a: Access) -> str | None:
    """Why ``a`` is outside its memory space (or names no memory), or None."""
    if a.space == Space.SRAM:
        size, name = arch.onchip.sram_bytes, "SRAM"
    elif a.space == Space.ACC:
        size, name = arch.derived.acc_entries, "accumulator"
    elif a.space == Space.LUT:
        size, name = arch.onchip.lut_entries, "LUT memory"
    elif a.mem >= len(arch.offchip):
        return f"mem {a.mem} does not exist ({len(arch.offchip)} off-chip memories)"
    else:
        mem = arch.offchip[a.mem]
        size, name = mem.size_bytes, f"off-chip memory {a.mem} ({mem.name})"
    if a.lo < 0 or a.hi > size:
        return f"{a.what} touches [{a.lo}, {a.hi}) outside the {name} [0, {size})"
    return None


def static_error(i: Instruction, arch: NpuArch) -> str | None:
    """Why ``i`` must trap on ``arch`` whatever the data (None if it may run): an operand box
    outside its memory (rules 1, 2), a rule of its definition (3, 4), a resource bound (5), a
    unit the target lacks."""
    needs = SPECS[i.opcode].requires
    if needs is not None and (why := needs(arch, i)) is not None:
        return why
    for a in accesses(i):
        why = _space_error(arch, a)
        if why is not None:
            return why
    for rule in SPECS[i.opcode].rules:
        why = rule.error(i)
        if why is not None:
            return why
    return resource_error(i, arch)


WINDOW_FACTOR = 64  # a window frame or im2col may hold at most this many SRAMs of elements


def window_frame(i: Instruction) -> tuple[int, int]:
    """(rows, columns) of the padded frame a CONV / DWCONV / POOL window sweeps."""
    return (frame_extent(i.out_h, i.stride_h, i.kh, i.dil_h),
            frame_extent(i.out_w, i.stride_w, i.kw, i.dil_w))


def resource_error(i: Instruction, arch: NpuArch) -> str | None:
    """Static rule 5: bounds that keep every instruction's work proportional to the memories.

    No SRAM operand pattern has more elements than the SRAM has bytes (one that does must
    alias itself through zero or overlapping strides), and the window frame of CONV / DWCONV
    / POOL (and CONV's im2col) has at most WINDOW_FACTOR x SRAM bytes elements.
    """
    spec = SPECS[i.opcode]
    sram = arch.onchip.sram_bytes
    for what, elements in spec.sram_elements:
        n = elements.of(i)
        if n > sram:
            return f"{what} has {n} elements, more than the {sram}-byte SRAM holds"
    if spec.frame is not None:
        rows, cols = window_frame(i)
        sizes = [("window frame", rows * cols * getattr(i, spec.frame.channels))]
        if spec.frame.im2col is not None:
            sizes.append(("im2col", spec.frame.im2col.of(i)))
        for what, n in sizes:
            if n > WINDOW_FACTOR * sram:
                return (f"{what} of {n} elements exceeds {WINDOW_FACTOR} x the {sram}-byte SRAM "
                        "(static resource bound)")
    return None
