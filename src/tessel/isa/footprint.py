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
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tessel.arch.types import NpuArch
from tessel.isa.fields import AccMode, AccSrc, DType, LutMode, ParamMode, ReduceOp
from tessel.isa.instruction import Instruction
from tessel.isa.table import SPECS, Opcode


class Space(enum.Enum):
    SRAM = "SRAM"
    ACC = "ACC"  # units: int32 entries
    LUT = "LUT"  # units: int16 entries
    OFFCHIP = "OFFCHIP"


class Access(NamedTuple):
    """Operand ``what`` reads or writes addresses [lo, hi) of ``space`` (memory ``mem``).
    (A named tuple: instructions' boxes are built and read on the compiler's hot paths.)"""

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


# Field positions in ``Instruction.args`` per opcode: ``accesses`` reads the arguments by
# position (it runs for every instruction the compiler builds and the simulator loads).
_POS = {op: {f.name: k for k, f in enumerate(spec.fields)} for op, spec in SPECS.items()}
_NBYTES = (1, 2, 4)  # DType (an IntEnum) -> bytes, as DType.nbytes


def _at(op: Opcode, *names: str) -> tuple[int, ...]:
    return tuple(_POS[op][n] for n in names)


def _fields(op: Opcode, *names: str) -> operator.itemgetter:
    """args -> the values of fields `names` of `op` (a tuple, in that order)."""
    return operator.itemgetter(*_at(op, *names))


def _view_at(op: Opcode, p: str, n: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(position of `p`_addr, ((position of d_k, position of `p`_s_k), ...)) for n dims."""
    return _POS[op][f"{p}_addr"], tuple(zip(_at(op, *(f"d{k}" for k in range(n))),
                                            _at(op, *(f"{p}_s{k}" for k in range(n))),
                                            strict=True))


def _strided(a: tuple, at: tuple[int, tuple[tuple[int, int], ...]], elem: int
             ) -> tuple[int, int]:
    """`box` of the strided pattern whose base, dims and strides sit at positions `at`."""
    lo = hi = a[at[0]]
    for d, st in at[1]:
        span = a[st] * (a[d] - 1)
        if span < 0:
            lo += span
        else:
            hi += span
    return lo, hi + elem


def _span2(base: int, n0: int, s0: int, n1: int, s1: int, elem: int) -> tuple[int, int]:
    """`box` of a two-dimensional pattern (unrolled; `_span3` and `_span4` build on it)."""
    lo = hi = base
    span = s0 * (n0 - 1)
    if span < 0:
        lo += span
    else:
        hi += span
    span = s1 * (n1 - 1)
    if span < 0:
        lo += span
    else:
        hi += span
    return lo, hi + elem


def _span3(base: int, n0: int, s0: int, n1: int, s1: int, n2: int, s2: int, elem: int
           ) -> tuple[int, int]:
    """`box` of a three-dimensional pattern."""
    lo, hi = _span2(base, n0, s0, n1, s1, 0)
    span = s2 * (n2 - 1)
    if span < 0:
        lo += span
    else:
        hi += span
    return lo, hi + elem


_SRAM, _ACC, _LUT, _OFFCHIP = Space.SRAM, Space.ACC, Space.LUT, Space.OFFCHIP
# an Access from its six values without the named tuple's Python-level __new__ (hot path):
# every field given, in this order (`mem` 0 where Access's default is meant)
_new = tuple.__new__
assert Access._fields == ("what", "space", "lo", "hi", "write", "mem") and (
    Access._field_defaults == {"mem": 0})
# DMA_LOAD and DMA_STORE share their fields, in this order (`_dma` unpacks them)
_DMA_FIELDS = ("mem", "dtype", "d0", "d1", "d2", "d3", "ext_addr", "ext_s0", "ext_s1",
               "ext_s2", "ext_s3", "sram_addr", "sram_s0", "sram_s1", "sram_s2", "sram_s3")
assert all(tuple(f.name for f in SPECS[op].fields) == _DMA_FIELDS
           for op in (Opcode.DMA_LOAD, Opcode.DMA_STORE))


def _span4(base: int, n0: int, s0: int, n1: int, s1: int, n2: int, s2: int, n3: int, s3: int,
           elem: int) -> tuple[int, int]:
    """`box` of a four-dimensional pattern (every DMA's two sides): two `_span2`s added."""
    lo, hi = _span2(base, n0, s0, n1, s1, 0)
    more_lo, more_hi = _span2(0, n2, s2, n3, s3, elem)
    return lo + more_lo, hi + more_hi


def _dma(i: Instruction) -> tuple[Access, ...]:
    mem, dtype, d0, d1, d2, d3, ea, e0, e1, e2, e3, sa, s0, s1, s2, s3 = i.args
    w = _NBYTES[dtype]
    load = i.opcode == Opcode.DMA_LOAD
    elo, ehi = _span4(ea, d0, e0, d1, e1, d2, e2, d3, e3, w)
    slo, shi = _span4(sa, d0, s0, d1, s1, d2, s2, d3, s3, w)
    return (_new(Access, ("ext", _OFFCHIP, elo, ehi, not load, mem)),
            _new(Access, ("sram", _SRAM, slo, shi, load, 0)))


def _acc_at(op: Opcode) -> tuple[int, ...]:
    return _at(op, "acc_addr", "acc_stride", "mode")


def _acc_boxes(a: tuple, at: tuple[int, ...], pixels: int, ch: int) -> tuple[Access, ...]:
    lo, hi = _span2(a[at[0]], pixels, a[at[1]], ch, 1, 1)
    if a[at[2]] == AccMode.ACCUMULATE:
        return (_new(Access, ("acc", _ACC, lo, hi, True, 0)),
                _new(Access, ("acc", _ACC, lo, hi, False, 0)))
    return (_new(Access, ("acc", _ACC, lo, hi, True, 0)),)


_NHWC = ("in_addr", "in_h", "in_w", "in_stride_h", "in_stride_w")
_CONV = _fields(Opcode.CONV, *_NHWC, "cin", "w_addr", "kh", "kw", "cout", "w_stride_k",
            "w_stride_ci", "w_stride_co", "out_h", "out_w")
_CONV_ACC = _acc_at(Opcode.CONV)


def _conv(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    ia, ih, iw, sh, sw, cin, wa, kh, kw, cout, sk, sci, sco, oh, ow = _CONV(a)
    lo, hi = _span3(ia, ih, sh, iw, sw, cin, 1, 1)
    wlo, whi = _span3(wa, kh * kw, sk, cin, sci, cout, sco, 1)
    return (_new(Access, ("in", _SRAM, lo, hi, False, 0)),
            _new(Access, ("w", _SRAM, wlo, whi, False, 0)),
            *_acc_boxes(a, _CONV_ACC, oh * ow, cout))


_MATMUL = _fields(Opcode.MATMUL, "a_addr", "m", "k", "a_stride_m", "a_stride_k", "b_addr", "n",
              "b_stride_k", "b_stride_n")
_MATMUL_ACC = _acc_at(Opcode.MATMUL)


def _matmul(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    aa, m, k, sam, sak, ba, n, sbk, sbn = _MATMUL(a)
    alo, ahi = _span2(aa, m, sam, k, sak, 1)
    blo, bhi = _span2(ba, k, sbk, n, sbn, 1)
    return (_new(Access, ("a", _SRAM, alo, ahi, False, 0)),
            _new(Access, ("b", _SRAM, blo, bhi, False, 0)),
            *_acc_boxes(a, _MATMUL_ACC, m, n))


_DWCONV = _fields(Opcode.DWCONV, *_NHWC, "ch", "w_addr", "kh", "kw", "w_stride_k", "out_h",
                  "out_w")
_DWCONV_ACC = _acc_at(Opcode.DWCONV)


def _dwconv(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    ia, ih, iw, sh, sw, ch, wa, kh, kw, sk, oh, ow = _DWCONV(a)
    lo, hi = _span3(ia, ih, sh, iw, sw, ch, 1, 1)
    wlo, whi = _span2(wa, kh * kw, sk, ch, 1, 1)
    return (_new(Access, ("in", _SRAM, lo, hi, False, 0)),
            _new(Access, ("w", _SRAM, wlo, whi, False, 0)),
            *_acc_boxes(a, _DWCONV_ACC, oh * ow, ch))


_REQUANT = _fields(Opcode.REQUANT, "src", "src_addr", "rows", "ch", "src_stride", "param_mode",
               "param_addr", "out_dtype", "dst_addr", "dst_stride")


def _requant(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    src, sa, rows, ch, ss, pm, pa, od, da, ds = _REQUANT(a)
    if src == AccSrc.ACC:
        lo, hi = _span2(sa, rows, ss, ch, 1, 1)
        s = _new(Access, ("src", _ACC, lo, hi, False, 0))
    else:
        lo, hi = _span2(sa, rows, ss, ch, 4, 4)
        s = _new(Access, ("src", _SRAM, lo, hi, False, 0))
    p = ch if pm == ParamMode.PER_CHANNEL else 1
    w = _NBYTES[od]
    dlo, dhi = _span2(da, rows, ds, ch, w, w)
    return (s, _new(Access, ("params", _SRAM, pa, pa + 12 * p, False, 0)),
            _new(Access, ("dst", _SRAM, dlo, dhi, True, 0)))


_ELTWISE = tuple(_view_at(Opcode.ELTWISE, p, 3) for p in ("a", "b", "out"))
_ELTWISE_TYPES = _at(Opcode.ELTWISE, "a_dtype", "b_dtype", "out_dtype")


def _eltwise(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    ta, tb, to = (_NBYTES[a[k]] for k in _ELTWISE_TYPES)
    alo, ahi = _strided(a, _ELTWISE[0], ta)
    blo, bhi = _strided(a, _ELTWISE[1], tb)
    olo, ohi = _strided(a, _ELTWISE[2], to)
    return (_new(Access, ("a", _SRAM, alo, ahi, False, 0)),
            _new(Access, ("b", _SRAM, blo, bhi, False, 0)),
            _new(Access, ("out", _SRAM, olo, ohi, True, 0)))


_COPY = (_view_at(Opcode.COPY, "src", 4), _view_at(Opcode.COPY, "dst", 4))
_COPY_TYPE = _POS[Opcode.COPY]["dtype"]


def _copy(i: Instruction) -> tuple[Access, ...]:
    a = i.args
    w = _NBYTES[a[_COPY_TYPE]]
    slo, shi = _strided(a, _COPY[0], w)
    dlo, dhi = _strided(a, _COPY[1], w)
    return (_new(Access, ("src", _SRAM, slo, shi, False, 0)),
            _new(Access, ("dst", _SRAM, dlo, dhi, True, 0)))


_BY_OPCODE = {Opcode.DMA_LOAD: _dma, Opcode.DMA_STORE: _dma, Opcode.CONV: _conv,
              Opcode.MATMUL: _matmul, Opcode.DWCONV: _dwconv, Opcode.REQUANT: _requant,
              Opcode.ELTWISE: _eltwise, Opcode.COPY: _copy}


@functools.lru_cache(maxsize=1 << 17)
def accesses(i: Instruction) -> tuple[Access, ...]:
    """Every operand box of ``i`` (empty for WAIT / SIGNAL / END). Memoised: the schedule
    stage asks for the same instructions' boxes several times (residency, prefetch, emit)."""
    f = _BY_OPCODE.get(i.opcode)
    return f(i) if f is not None else _vector_accesses(i)


def _dims(i: Instruction, n: int) -> list[int]:
    return [getattr(i, f"d{k}") for k in range(n)]


def _nhwc_in(i: Instruction, ch: int, elem: int) -> Access:
    lo, hi = box(i.in_addr, (i.in_h, i.in_w, ch), (i.in_stride_h, i.in_stride_w, elem), elem)
    return Access("in", Space.SRAM, lo, hi, False)


def _vector_accesses(i: Instruction) -> tuple[Access, ...]:
    """The operand boxes of the less frequent vector instructions (by field name)."""
    op = i.opcode
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
