"""Operand boxes: the memory interval an operand of an instruction reads or writes.

``Access`` is one operand's box; ``box`` the interval of an affine strided pattern (the
smallest and largest address are corners of it, so the interval is tight). The unrolled
``span*`` forms and the positional field readers serve the instructions' ``accesses`` rules
(``tessel.isa.instrs``), which run for every instruction the compiler builds and the
simulator loads.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Sequence
from typing import NamedTuple

from tessel.isa.fields import Field


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


# an Access from its six values without the named tuple's Python-level __new__ (hot path):
# every field given, in this order (`mem` 0 where Access's default is meant)
new_access = tuple.__new__
assert Access._fields == ("what", "space", "lo", "hi", "write", "mem") and (
    Access._field_defaults == {"mem": 0})


def box(base: int, dims: Sequence[int], strides: Sequence[int], elem: int) -> tuple[int, int]:
    """[lo, hi) of ``base + sum(i_k * s_k)`` over ``0 <= i_k < dims[k]``, ``elem`` units each."""
    lo = hi = base
    for n, st in zip(dims, strides, strict=True):
        span = st * (n - 1)
        lo, hi = lo + min(0, span), hi + max(0, span)
    return lo, hi + elem


def span2(base: int, n0: int, s0: int, n1: int, s1: int, elem: int) -> tuple[int, int]:
    """`box` of a two-dimensional pattern (unrolled; `span3` and `span4` build on it)."""
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


def span3(base: int, n0: int, s0: int, n1: int, s1: int, n2: int, s2: int, elem: int
          ) -> tuple[int, int]:
    """`box` of a three-dimensional pattern."""
    lo, hi = span2(base, n0, s0, n1, s1, 0)
    span = s2 * (n2 - 1)
    if span < 0:
        lo += span
    else:
        hi += span
    return lo, hi + elem


def span4(base: int, n0: int, s0: int, n1: int, s1: int, n2: int, s2: int, n3: int, s3: int,
          elem: int) -> tuple[int, int]:
    """`box` of a four-dimensional pattern (every DMA's two sides): two `span2`s added."""
    lo, hi = span2(base, n0, s0, n1, s1, 0)
    more_lo, more_hi = span2(0, n2, s2, n3, s3, elem)
    return lo + more_lo, hi + more_hi


# ---- reading an instruction's arguments by position ------------------------------------------
View = tuple[int, tuple[tuple[int, int], ...]]  # (base position, ((extent, stride) positions))


def positions(fields: Sequence[Field], *names: str) -> tuple[int, ...]:
    """Positions in ``Instruction.args`` of the fields ``names`` of a row ``fields``."""
    index = {f.name: k for k, f in enumerate(fields)}
    return tuple(index[n] for n in names)


def getter(fields: Sequence[Field], *names: str) -> operator.itemgetter:
    """args -> the values of the fields ``names`` (a tuple, in that order)."""
    return operator.itemgetter(*positions(fields, *names))


def view_at(fields: Sequence[Field], prefix: str, n: int) -> View:
    """(position of ``prefix``_addr, ((position of d_k, position of ``prefix``_s_k), ...)) of
    an n-dimensional strided view over the extents d0 .. d{n-1}."""
    (base,) = positions(fields, f"{prefix}_addr")
    return base, tuple(zip(positions(fields, *(f"d{k}" for k in range(n))),
                           positions(fields, *(f"{prefix}_s{k}" for k in range(n))),
                           strict=True))


def strided(args: tuple, at: View, elem: int) -> tuple[int, int]:
    """`box` of the strided view whose base, extents and strides sit at positions ``at``."""
    lo = hi = args[at[0]]
    for d, st in at[1]:
        span = args[st] * (args[d] - 1)
        if span < 0:
            lo += span
        else:
            hi += span
    return lo, hi + elem
