"""``InstrSpec``: everything the ISA says about one opcode, declared in one place.

An instruction's spec holds its encoding row (the ordered fields: their widths, ranges and
defaults are its limits), its cost rule on each engine that runs it and the fields that cost
reads, its operand boxes (``accesses``) and the static rules of docs/isa.md section 3 that
concern it, and where its semantics are stated (docs/isa.md section 4; the simulator's
implementation registers in ``tessel.isa.semantics``). The specs live in the modules of
``tessel.isa.instrs``, one per family; ``tessel.isa.table.SPECS`` collects them, and the
encoder, decoder, assembler, costs, footprint, limits and docs read nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessel.isa.cost_rules import CostRule, Product
from tessel.isa.fields import DType, Engine, Field
from tessel.isa.opcode import OPCODE_BITS, WORD_BYTES, Opcode
from tessel.isa.semantics import implementation

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch
    from tessel.isa.access import Access
    from tessel.isa.instruction import Instruction


# ---- static rules (docs/isa.md section 3) -------------------------------------------------------
class Rule:
    """A static rule of an instruction's field values alone (rules 3 and 4)."""

    def error(self, i: Instruction) -> str | None:
        """Why ``i`` breaks the rule, or None."""
        raise NotImplementedError

    def doc(self) -> str:
        """The rule as docs/isa.md's table of static rules writes it."""
        raise NotImplementedError


@dataclass(frozen=True)
class AccRowsApart(Rule):
    """``acc_stride >= width``: output rows must not overlap in the accumulator."""

    width: str  # the field giving a row's results
    wide: bool = False  # the instruction has `in_type`: I16 results take two entries each

    def error(self, i: Instruction) -> str | None:
        w = getattr(i, self.width)
        if self.wide and i.in_type:
            if i.acc_stride < 2 * w:
                return (f"acc_stride {i.acc_stride} < 2 * {self.width} {w} (wide entries): "
                        "output rows overlap")
        elif i.acc_stride < w:
            return f"acc_stride {i.acc_stride} < {self.width} {w}: output rows overlap"
        return None

    def doc(self) -> str:
        if self.wide:
            return f"`acc_stride >= {self.width}` (`in_type` I16: `>= 2*{self.width}`)"
        return f"`acc_stride >= {self.width}`"


@dataclass(frozen=True)
class WideInput(Rule):
    """``in_type`` I16: a symmetric input (zero point 0), dense weights, and wide entries at
    even accumulator entries (``acc_addr``, ``acc_stride`` even: each is 8 bytes, aligned)."""

    zp: str  # the input's zero-point field
    weights: str  # the weight-storage field

    def error(self, i: Instruction) -> str | None:
        if not i.in_type:
            return None
        if getattr(i, self.zp):
            return f"in_type I16 needs {self.zp} 0 (symmetric int16), not {getattr(i, self.zp)}"
        if getattr(i, self.weights) >= 2:
            return f"in_type I16 takes dense weights only ({self.weights} I8 or I4)"
        if i.acc_addr % 2 or i.acc_stride % 2:
            return (f"in_type I16 needs acc_addr and acc_stride even (wide entries), not "
                    f"{i.acc_addr} and {i.acc_stride}")
        return None

    def doc(self) -> str:
        return (f"`in_type` I16: `{self.zp} == 0`, `{self.weights}` I8 or I4, `acc_addr` and "
                "`acc_stride` even")


@dataclass(frozen=True)
class TypeIn(Rule):
    """An element type field takes only some of the types."""

    field: str
    allowed: tuple[DType, ...]

    def error(self, i: Instruction) -> str | None:
        if getattr(i, self.field) in self.allowed:
            return None
        return f"{i.opcode.name} works on {' or '.join(t.name for t in self.allowed)} only"

    def doc(self) -> str:
        return f"`{self.field}` is {' or '.join(f'`{t.name}`' for t in self.allowed)}"


@dataclass(frozen=True)
class ClampWithin(Rule):
    """``type.lo <= act_min <= act_max <= type.hi`` for the output type in field ``dtype``."""

    dtype: str

    def error(self, i: Instruction) -> str | None:
        t: DType = getattr(i, self.dtype)
        if not t.lo <= i.act_min <= i.act_max <= t.hi:
            return f"clamp [{i.act_min}, {i.act_max}] is empty or outside {t.name} [{t.lo}, {t.hi}]"
        return None

    def doc(self) -> str:
        return f"`{self.dtype}.min <= act_min <= act_max <= {self.dtype}.max`"


class WideSource(Rule):
    """REQUANT ``acc_width`` WIDE: from the accumulator, at even entries (wide entries are 8
    bytes, aligned), to int8 or int16."""

    def error(self, i: Instruction) -> str | None:
        if not i.acc_width:
            return None
        if i.src != 0:
            return "acc_width WIDE reads the accumulator (src ACC)"
        if i.src_addr % 2 or i.src_stride % 2:
            return (f"acc_width WIDE needs src_addr and src_stride even, not {i.src_addr} and "
                    f"{i.src_stride}")
        if i.out_dtype == DType.I32:
            return "acc_width WIDE writes I8 or I16"
        return None

    def doc(self) -> str:
        return "`acc_width` WIDE: `src` ACC, `src_addr` and `src_stride` even, `out_dtype` I8 or I16"


@dataclass(frozen=True)
class Frame:
    """The window frame bound of rule 5 (CONV, DWCONV, POOL): the frame the window sweeps
    times ``channels`` (and CONV's im2col) has at most WINDOW_FACTOR x SRAM bytes elements."""

    channels: str
    im2col: Product | None = None


def no_accesses(i: Instruction) -> tuple[Access, ...]:
    return ()


# ---- the spec -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class InstrSpec:
    """One opcode. ``engine`` None: the instruction may sit in any engine's queue; ``also``: a
    second engine that runs it too (DWCONV: the array's depthwise mode, or the vector engine),
    with that engine's cost rule ``also_cost``."""

    opcode: Opcode
    engine: Engine | None
    summary: str
    fields: tuple[Field, ...]
    cost: CostRule
    # the fields `cost` reads (its cycles and events on any engine); addresses, strides, zero
    # points and the like are not among them, so tiles at other addresses share one cost
    # (tests/unit/isa/test_isa_cost_key.py traces the reads)
    cost_fields: tuple[str, ...] = ()
    also: Engine | None = None
    also_cost: CostRule | None = None
    # every operand box, by position in Instruction.args (docs/isa.md rule 1)
    accesses: Callable[[Instruction], tuple[Access, ...]] = no_accesses
    sram_elements: tuple[tuple[str, Product], ...] = ()  # rule 5: SRAM patterns' elements
    frame: Frame | None = None  # rule 5: the window frame bound
    rules: tuple[Rule, ...] = ()  # rules 3 and 4
    section: str = ""  # the heading of docs/isa.md section 4 that states its semantics
    # why a target cannot run the instruction (a unit it lacks, or one the instruction's
    # fields ask for), or None
    requires: Callable[[NpuArch, Instruction], str | None] | None = None

    def __post_init__(self) -> None:
        names = {f.name for f in self.fields}
        assert len(names) == len(self.fields), f"{self.opcode.name}: a field name twice"
        used = set(self.cost_fields) | {n for _, p in self.sram_elements for n in p.names}
        assert used <= names, f"{self.opcode.name}: no fields {sorted(used - names)}"
        assert (self.also is None) == (self.also_cost is None), self.opcode.name

    def runs_on(self, engine: Engine) -> bool:
        """Whether an instruction of this opcode may sit in ``engine``'s queue."""
        return self.engine is None or engine in (self.engine, self.also)

    def cost_on(self, engine: Engine | None) -> CostRule:
        """The cost rule in ``engine``'s queue (its own engine's when None)."""
        if engine is not None and engine == self.also:
            return self.also_cost  # type: ignore[return-value]
        return self.cost

    @property
    def bits(self) -> int:
        return OPCODE_BITS + sum(f.bits for f in self.fields)

    @property
    def size(self) -> int:
        """Encoded size in bytes (a multiple of 8)."""
        return -(-self.bits // (8 * WORD_BYTES)) * WORD_BYTES

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def offsets(self) -> tuple[int, ...]:
        """Bit offset of each field (opcode at bits 0-7)."""
        out, at = [], OPCODE_BITS
        for f in self.fields:
            out.append(at)
            at += f.bits
        return tuple(out)

    @property
    def implementation(self) -> Callable | None:
        """The simulator's implementation of the instruction, once registered
        (``tessel.isa.semantics``)."""
        return implementation(self.opcode)
