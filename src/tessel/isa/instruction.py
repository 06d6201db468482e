"""``Instruction``: an opcode and one value per field of its row in the ISA table.

Values are checked against the table when an instruction is built, so an ``Instruction``
always encodes; enum fields hold enum members (``DType.I8``), other fields plain ints.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tessel.errors import TesselFormatError
from tessel.isa.table import SPECS, InstrSpec, Opcode

# field name -> position in Instruction.args, per opcode (attribute access is on hot paths)
_FIELD_INDEX = {op: {f.name: i for i, f in enumerate(spec.fields)} for op, spec in SPECS.items()}
# per opcode: (field, min, max, enum) for validation, and (names, defaults) for make()
_CHECKS = {op: tuple((f, f.min if f.enum is None else 0, f.max if f.enum is None else 0, f.enum)
                     for f in spec.fields) for op, spec in SPECS.items()}
_MAKE = {op: (tuple(f.name for f in spec.fields), tuple(f.default for f in spec.fields))
         for op, spec in SPECS.items()}
_ABSENT = object()
# Instruction.make's instances by request, bounded (cleared when full: a few MB at most)
_MADE: dict[tuple, Instruction] = {}
_MADE_MAX = 1 << 16


def _checked(op: Opcode, check: tuple, v: Any) -> Any:
    """Field value `v` as stored (an int, or its enum member), or a TesselFormatError naming
    the field; `check`: its (field, min, max, enum) row of _CHECKS. Callers test the common
    case (a plain int in range, or the enum member itself) inline first."""
    f, _, _, en = check
    if v is None:
        raise TesselFormatError(f"{op.name}.{f.name} is required")
    why = f.check(v)
    if why is not None:
        raise TesselFormatError(f"{op.name}.{f.name} {why}")
    return f.enum(v) if en is not None else int(v)


@dataclass(frozen=True)
class Instruction:
    """One NPU instruction. ``args`` follow the field order of ``SPECS[opcode]``.

    Build with ``Instruction.make(Opcode.X, field=value, ...)`` (fields with a default may be
    left out); read fields as attributes (``instr.sram_addr``) or with ``instr.as_dict()``.
    """

    opcode: Opcode
    args: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        op = self.opcode
        if type(op) is not Opcode:
            try:
                op = Opcode(op)
            except ValueError:
                raise TesselFormatError(f"unknown opcode {self.opcode!r}") from None
        checks = _CHECKS[op]
        args = self.args if type(self.args) is tuple else tuple(self.args)
        if len(args) != len(checks):
            raise TesselFormatError(
                f"{op.name} takes {len(checks)} field values, got {len(args)}"
            )
        norm = []
        for check, v in zip(checks, args):  # noqa: B905 - lengths checked above
            _, lo, hi, en = check
            if (en is None and type(v) is int and lo <= v <= hi) or (
                    en is not None and type(v) is en):
                norm.append(v)
            else:
                norm.append(_checked(op, check, v))
        object.__setattr__(self, "opcode", op)
        object.__setattr__(self, "args", tuple(norm))

    @classmethod
    def make(cls, opcode: Opcode, **values: Any) -> Instruction:
        """Build from keyword values; omitted fields take their table default.

        Instructions are immutable, so equal requests (the same opcode, field names, values
        and value types) share one instance: the schedule stage builds the same tiles for
        many candidates and design points (about 85 % of its requests repeat one)."""
        vals = tuple(values.values())
        key = (opcode, tuple(values), vals, tuple(map(type, vals)))
        try:
            hit = _MADE.get(key) if cls is Instruction else None
        except TypeError:  # an unhashable value: built (and refused) below, not kept
            hit, key = None, None
        if hit is not None:
            return hit
        op = opcode if type(opcode) is Opcode else Opcode(opcode)
        template, required = _TEMPLATE[op]
        checks = _CHECKS[op]
        args = template.copy()  # the defaults, checked once (_TEMPLATE); given values over them
        _set_given(op, args, values)
        for k in required:  # fields without a default must be given
            if args[k] is _ABSENT:
                _checked(op, checks[k], None)
        if cls is not Instruction:
            return cls(op, tuple(args))
        made = _unchecked(op, args)  # checked above: __post_init__ would repeat it
        if key is not None:
            if len(_MADE) >= _MADE_MAX:
                _MADE.clear()
            _MADE[key] = made
        return made

    @property
    def spec(self) -> InstrSpec:
        return SPECS[self.opcode]

    def as_dict(self) -> dict[str, int]:
        """Field name -> value, in table order."""
        return {f.name: v for f, v in zip(self.spec.fields, self.args, strict=True)}

    def replace(self, **values: Any) -> Instruction:
        """A copy with some fields changed (only the changed values are checked: the others
        were when this instruction was built)."""
        op = self.opcode
        args = list(self.args)
        _set_given(op, args, values)
        return _unchecked(op, args)

    def __getattr__(self, name: str) -> Any:
        # only called for names that are not real attributes: look the field up
        if name.startswith("__"):
            raise AttributeError(name)
        opcode = object.__getattribute__(self, "opcode")
        index = _FIELD_INDEX[opcode].get(name)
        if index is None:
            raise AttributeError(f"{opcode.name} has no field {name!r}")
        return object.__getattribute__(self, "args")[index]

    def __str__(self) -> str:
        parts = [self.opcode.name]
        for f, v in zip(self.spec.fields, self.args, strict=True):
            if isinstance(v, enum.Enum):
                parts.append(f"{f.name}={v.name}")
            elif f.hex:
                parts.append(f"{f.name}=0x{v:x}")
            else:
                parts.append(f"{f.name}={v}")
        return " ".join(parts)


# per opcode: the field values of make() before the given ones (each default as stored,
# _ABSENT where the field has none) and the positions of the fields without a default
_TEMPLATE: dict[Opcode, tuple[list[Any], tuple[int, ...]]] = {
    op: ([_ABSENT if d is None else _checked(op, c, d)
          for d, c in zip(_MAKE[op][1], _CHECKS[op], strict=True)],
         tuple(k for k, d in enumerate(_MAKE[op][1]) if d is None))
    for op in SPECS}


def _set_given(op: Opcode, args: list[Any], values: dict[str, Any]) -> None:
    """``args[k] = value`` for each given field, checked (the in-range int or enum member of
    the right type passes without ``_checked``'s conversion)."""
    index, checks = _FIELD_INDEX[op], _CHECKS[op]
    for name, v in values.items():
        k = index.get(name)
        if k is None:
            raise TesselFormatError(f"{op.name} has no field {name!r}")
        _, lo, hi, en = checks[k]
        if not ((en is None and type(v) is int and lo <= v <= hi)
                or (en is not None and type(v) is en)):
            v = _checked(op, checks[k], v)
        args[k] = v


def _unchecked(op: Opcode, args: list) -> Instruction:
    """An Instruction of already checked field values (no __post_init__)."""
    new = object.__new__(Instruction)
    object.__setattr__(new, "opcode", op)
    object.__setattr__(new, "args", tuple(args))
    return new


def _field_property(name: str) -> property:
    def get(self: Instruction) -> Any:
        d = self.__dict__
        k = _FIELD_INDEX[d["opcode"]].get(name)
        if k is None:
            raise AttributeError(f"{d['opcode'].name} has no field {name!r}")
        return d["args"][k]

    return property(get, doc=f"the `{name}` field (for the opcodes that have it)")


# every field name is a property (a descriptor on the class is found before __getattr__'s
# failed lookup: field reads are on the compiler's and simulator's hot paths)
for _name in sorted({f.name for spec in SPECS.values() for f in spec.fields}):
    if not hasattr(Instruction, _name):
        setattr(Instruction, _name, _field_property(_name))
