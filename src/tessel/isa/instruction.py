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


@dataclass(frozen=True)
class Instruction:
    """One NPU instruction. ``args`` follow the field order of ``SPECS[opcode]``.

    Build with ``Instruction.make(Opcode.X, field=value, ...)`` (fields with a default may be
    left out); read fields as attributes (``instr.sram_addr``) or with ``instr.as_dict()``.
    """

    opcode: Opcode
    args: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        try:
            op = Opcode(self.opcode)
        except ValueError:
            raise TesselFormatError(f"unknown opcode {self.opcode!r}") from None
        spec = SPECS[op]
        args = tuple(self.args)
        if len(args) != len(spec.fields):
            raise TesselFormatError(
                f"{op.name} takes {len(spec.fields)} field values, got {len(args)}"
            )
        norm = []
        for f, v in zip(spec.fields, args, strict=True):
            why = f.check(v)
            if why is not None:
                raise TesselFormatError(f"{op.name}.{f.name} {why}")
            norm.append(f.enum(v) if f.enum is not None else int(v))
        object.__setattr__(self, "opcode", op)
        object.__setattr__(self, "args", tuple(norm))

    @classmethod
    def make(cls, opcode: Opcode, **values: Any) -> Instruction:
        """Build from keyword values; omitted fields take their table default."""
        spec = SPECS[Opcode(opcode)]
        names = {f.name for f in spec.fields}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TesselFormatError(f"{spec.opcode.name} has no field {unknown[0]!r}")
        args = []
        for f in spec.fields:
            if f.name in values:
                args.append(values[f.name])
            elif f.default is not None:
                args.append(f.default)
            else:
                raise TesselFormatError(f"{spec.opcode.name}.{f.name} is required")
        return cls(spec.opcode, tuple(args))

    @property
    def spec(self) -> InstrSpec:
        return SPECS[self.opcode]

    def as_dict(self) -> dict[str, int]:
        """Field name -> value, in table order."""
        return {f.name: v for f, v in zip(self.spec.fields, self.args, strict=True)}

    def replace(self, **values: Any) -> Instruction:
        """A copy with some fields changed."""
        merged = self.as_dict()
        merged.update(values)
        return Instruction.make(self.opcode, **merged)

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
