"""The rules a parameter's value must obey, declared next to the parameter (``Param.checks``).

Each rule says what it requires in the words of an error (``error``, "must be ...") and of
the parameter table of docs/architecture.md (``rule``). ``value_error`` is the check every
parameter gets from its type. A rule that reads other parameters (``reads_arch``) can only
be checked on a whole ``NpuArch``; the others also check a value alone (an explored value).

The limits come from the ISA's field widths (docs/isa.md): e.g. the accumulator is addressed
by a 24-bit entry index, an off-chip address is 32 bits, a memory index 3 bits. The ISA package
derives them from its field table (``tessel.isa.limits``) but sits above this one (its costs
read the parameters), so they are written here too, and tests/unit/isa/test_isa_limits.py
checks each equals the ISA's.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch

MAX_OFFCHIP_MEMORIES = 8  # DMA "mem" field: 3 bits
MAX_OPERATING_POINTS = 8  # a preset's (clock, voltage) pairs
MAX_SRAM_BYTES = 2**28  # 256 MiB; SRAM addresses are 32-bit, strides 24-bit signed
MAX_ACC_ENTRIES = 2**24  # accumulator entry index: 24 bits
MIN_LUT_ENTRIES = 513  # one interpolated int16 table (TFLite: 512 segments + end point)
MAX_LUT_ENTRIES = 4096  # LUT index: 12 bits
MAX_OFFCHIP_BYTES = 2**32  # external address: 32 bits
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def number(n: int | float) -> str:
    """``n`` as the docs write a limit: 2^28, 1e10, 4096."""
    if isinstance(n, int) and n > 65536 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    if isinstance(n, int) and n >= 10**6 and str(n).rstrip("0") == "1":
        return f"1e{len(str(n)) - 1}"
    return str(n)


def type_name(ptype: Any) -> str:
    """The type column of the parameter table."""
    if isinstance(ptype, type) and issubclass(ptype, enum.Enum):
        return "enum"
    return {int: "int", float: "number", bool: "bool", str: "string"}[ptype]


def value_error(ptype: Any, value: Any) -> str | None:
    """What is wrong with the type of ``value`` for a parameter of type ``ptype`` (None: ok).
    Enums must be members here; the loader turns a member's name into the member first."""
    if isinstance(ptype, type) and issubclass(ptype, enum.Enum):
        return None if isinstance(value, ptype) else "must be one of " + members(ptype)
    if ptype is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(value, bool):  # (a bool is an int to Python, never to a preset)
        return "must be " + ("an integer" if ptype is int else "a number")
    if ptype is int:
        return None if isinstance(value, int) else "must be an integer"
    if ptype is float:
        return None if isinstance(value, (int, float)) else "must be a number"
    return None if isinstance(value, str) else "must be a string"


def members(ptype: type[enum.Enum]) -> str:
    return ", ".join(m.name for m in ptype)


class Check:
    """One rule of a parameter's values."""

    reads_arch = False  # True: the rule reads other parameters of the arch

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        """The rule ``value`` breaks ("must be ..."), or None. ``index``: which off-chip
        memory, for a per-memory parameter."""
        raise NotImplementedError

    def rule(self) -> str:
        """The rule for the parameter table."""
        raise NotImplementedError


@dataclass(frozen=True)
class Pow2(Check):
    hi: int

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        if 0 < value <= self.hi and value & (value - 1) == 0:
            return None
        return f"must be a positive power of two <= {self.hi}"

    def rule(self) -> str:
        return f"power of two <= {number(self.hi)}"


@dataclass(frozen=True)
class IntIn(Check):
    lo: int
    hi: int

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        return None if self.lo <= value <= self.hi else \
            f"must be an integer in [{self.lo}, {self.hi}]"

    def rule(self) -> str:
        return f"{number(self.lo)} .. {number(self.hi)}"


@dataclass(frozen=True)
class MultipleOf(Check):
    n: int
    why: str = ""

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        why = f" ({self.why})" if self.why else ""
        return None if value % self.n == 0 else f"must be a multiple of {self.n}{why}"

    def rule(self) -> str:
        return f"multiple of {self.n}"


@dataclass(frozen=True)
class Finite(Check):
    """A finite number >= 0 (energies, areas)."""

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        return None if math.isfinite(value) and value >= 0 else "must be a finite number >= 0"

    def rule(self) -> str:
        return "finite, >= 0"


@dataclass(frozen=True)
class Between(Check):
    """A finite number in ``[lo, hi]`` (a voltage)."""

    lo: float
    hi: float

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        ok = math.isfinite(value) and self.lo <= value <= self.hi
        return None if ok else f"must be a number in [{self.lo}, {self.hi}]"

    def rule(self) -> str:
        return f"{self.lo} .. {self.hi}"


@dataclass(frozen=True)
class Name(Check):
    """A name: lower-case letters, digits, '.', '_', '-'."""

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        return None if _NAME.match(value) else \
            "must be lower-case letters, digits, '.', '_' or '-'"

    def rule(self) -> str:
        return "lower-case, digits, `.`, `_`, `-`"


@dataclass(frozen=True)
class Divides(Check):
    """The value divides another parameter (named by its dotted key)."""

    key: str
    reads_arch = True

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        assert arch is not None
        other = arch.param(self.key)
        return None if other % value == 0 else f"must divide {self.key} ({other})"

    def rule(self) -> str:
        return f"divides `{self.key}`"


@dataclass(frozen=True)
class NamesMemory(Check):
    """The name of one of the arch's off-chip memories."""

    reads_arch = True

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        assert arch is not None
        names = [m.name for m in arch.offchip]
        return None if value in names else f"must name one of the off-chip memories {names}"

    def rule(self) -> str:
        return "an `offchip` name"


@dataclass(frozen=True)
class NamesPoint(Check):
    """The name of one of the arch's operating points."""

    reads_arch = True

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        assert arch is not None
        names = [p.name for p in arch.operating_points]
        return None if value in names else f"must name one of the operating points {names}"

    def rule(self) -> str:
        return "an `operating_point` name"


@dataclass(frozen=True)
class Unique(Check):
    """A value no earlier table of its list of tables has (the memories' or the operating
    points' names)."""

    field: str
    entries: str = "offchip"  # the NpuArch field holding the list
    reads_arch = True

    def error(self, value: Any, arch: NpuArch | None, index: int | None) -> str | None:
        assert arch is not None and index is not None
        earlier = [getattr(m, self.field) for m in getattr(arch, self.entries)[:index]]
        return "must be unique" if value in earlier else None

    def rule(self) -> str:
        return "unique"
