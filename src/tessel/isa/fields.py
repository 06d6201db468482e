"""Building blocks of the ISA table: the enums that fields take, and ``Field`` itself.

A field is a name, a bit width, a signedness or an enum type, the legal range (narrower than
the width allows when the hardware needs it, e.g. sizes >= 1) and an optional default used by
``Instruction.make`` and the assembler. Encoding, decoding, range checks, text and the field
tables of docs/isa.md are all derived from these values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# re-exported: REQUANT's `rounding` field takes its values
from tessel.isa.fixedpoint import Rounding as Rounding


class Engine(enum.IntEnum):
    """The four engines; each runs its own instruction queue."""

    DMA_IN = 0
    MATRIX = 1
    VECTOR = 2
    DMA_OUT = 3


class DType(enum.IntEnum):
    """Element type of a tensor operand (little-endian two's complement)."""

    I8 = 0
    I16 = 1
    I32 = 2

    @property
    def nbytes(self) -> int:
        return (1, 2, 4)[self.value]

    @property
    def lo(self) -> int:
        return -(1 << (8 * self.nbytes - 1))

    @property
    def hi(self) -> int:
        return (1 << (8 * self.nbytes - 1)) - 1


class AccMode(enum.IntEnum):
    """Whether a matrix / depthwise tile overwrites or adds to the accumulator."""

    OVERWRITE = 0
    ACCUMULATE = 1


class InType(enum.IntEnum):
    """The activation input of CONV / MATMUL: int8 into int32 accumulator entries, or int16
    (symmetric: its zero point 0) into wide 48-bit entries (docs/isa.md, "The wide
    accumulator")."""

    I8 = 0
    I16 = 1

    @property
    def nbytes(self) -> int:
        return 1 << self.value

    @property
    def entries(self) -> int:
        """Accumulator entries (int32 words) one result takes: a wide result two."""
        return 1 << self.value

    @property
    def acc_width(self) -> AccWidth:
        """How REQUANT reads this input's results."""
        return AccWidth(self.value)


class AccWidth(enum.IntEnum):
    """What REQUANT reads from the accumulator: int32 entries, or wide 48-bit values held one
    per two entries (the results of an int16 CONV / MATMUL), with an int64 bias."""

    NARROW = 0
    WIDE = 1


class AccSrc(enum.IntEnum):
    """Where REQUANT reads its int32 input: the accumulator SRAM or int32 words in SRAM."""

    ACC = 0
    SRAM = 1


class ParamMode(enum.IntEnum):
    """REQUANT parameters: one (bias, multiplier, shift) per channel, or one for all."""

    PER_CHANNEL = 0
    PER_TENSOR = 1


class EltOp(enum.IntEnum):
    ADD = 0
    SUB = 1
    MUL = 2
    MAX = 3
    MIN = 4


class LutMode(enum.IntEnum):
    """How LUT maps an element through a table of int16 entries in LUT memory.

    I8_256: int8 -> int8, entry ``centre + x``; I16_513: int16 -> int16, interpolated between
    entry ``centre + (x >> 7)`` and the next (one entry per ``step`` input values, plus the end
    point). A member's name carries its table size (``entries``; tests/unit/isa checks both).
    """

    I8_256 = 0
    I16_513 = 1

    @property
    def dtype(self) -> DType:
        """Element type of the instruction's source and destination."""
        return DType.I16 if self.interpolated else DType.I8

    @property
    def interpolated(self) -> bool:
        return self is LutMode.I16_513

    @property
    def step(self) -> int:
        """Input values between neighbouring entries."""
        return 1 << INTERPOLATION_BITS if self.interpolated else 1

    @property
    def centre(self) -> int:
        """The entry of input 0 (relative to the table's first entry)."""
        return -self.dtype.lo // self.step

    @property
    def entries(self) -> int:
        """Entries of one table: every input value (I8), or every segment's two ends (I16)."""
        return (self.dtype.hi - self.dtype.lo + 1) // self.step + self.interpolated


INTERPOLATION_BITS = 7  # I16_513: the low 7 bits of the input interpolate within a segment


class PoolOp(enum.IntEnum):
    MAX = 0
    AVG = 1


class ReduceOp(enum.IntEnum):
    SUM = 0
    SUMSQ = 1
    MAX = 2
    MIN = 3


class UnaryOp(enum.IntEnum):
    """int32 -> int32 fixed-point functions of the vector engine's iterative divider."""

    RECIP = 0
    RSQRT = 1


@dataclass(frozen=True)
class Field:
    """One field of an instruction: ``bits`` wide, signed or unsigned or an enum."""

    name: str
    bits: int
    doc: str
    signed: bool = False
    enum: type[enum.IntEnum] | None = None
    lo: int | None = None  # smallest legal value (defaults to the type's minimum)
    hi: int | None = None  # largest legal value (defaults to the type's maximum)
    default: int | None = None  # None: the field must be given
    hex: bool = False  # print in hexadecimal (addresses)

    @property
    def min(self) -> int:
        if self.lo is not None:
            return self.lo
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        if self.hi is not None:
            return self.hi
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def type_name(self) -> str:
        """``u16``, ``s24``, or the enum's name (for docs and error messages)."""
        if self.enum is not None:
            return self.enum.__name__
        return f"{'s' if self.signed else 'u'}{self.bits}"

    def check(self, value: object) -> str | None:
        """None if ``value`` is legal for this field, else why not."""
        if self.enum is not None:
            if isinstance(value, self.enum):
                return None
            if isinstance(value, int) and not isinstance(value, bool):
                try:
                    self.enum(value)
                    return None
                except ValueError:
                    pass
            names = ", ".join(m.name for m in self.enum)
            return f"must be one of {names}, got {value!r}"
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if not self.min <= value <= self.max:
            return f"must be in [{self.min}, {self.max}], got {value}"
        return None


def unsigned_field(name: str, bits: int, doc: str, *, lo: int | None = None,
                   hi: int | None = None, default: int | None = None, hex: bool = False) -> Field:
    """An unsigned field."""
    return Field(name, bits, doc, lo=lo, hi=hi, default=default, hex=hex)


def signed_field(name: str, bits: int, doc: str, *, lo: int | None = None,
                 hi: int | None = None, default: int | None = None) -> Field:
    """A signed (two's complement) field."""
    return Field(name, bits, doc, signed=True, lo=lo, hi=hi, default=default)


def enum_field(name: str, cls: type[enum.IntEnum], bits: int, doc: str, *,
               default: enum.IntEnum | None = None) -> Field:
    """An enum field stored as its integer value."""
    assert max(m.value for m in cls) < (1 << bits), f"{cls.__name__} does not fit {bits} bits"
    return Field(name, bits, doc, enum=cls, default=None if default is None else int(default))
