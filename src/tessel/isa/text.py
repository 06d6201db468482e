"""Readable text form of instructions: ``disassemble`` and its inverse ``assemble``.

One instruction per line: the opcode name, then ``field=value`` pairs (any order; fields with
a default may be left out). Values are decimal or ``0x`` hex integers, or enum member names.
``#`` or ``;`` starts a comment. ``disassemble`` writes every field, in table order, so that
``assemble(disassemble(p)) == p``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tessel.errors import TesselFormatError, TesselParseError
from tessel.isa.fields import Field
from tessel.isa.instruction import Instruction
from tessel.isa.table import SPECS, Opcode

_TOKEN = re.compile(r"\S+")
MAX_LITERAL = 80  # characters; a 64-bit field in binary needs 66
_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)$")


def disassemble(instrs: Iterable[Instruction]) -> str:
    """Text of ``instrs``, one line each, ending with a newline (empty string for none)."""
    return "".join(f"{ins}\n" for ins in instrs)


def assemble(text: str, source: str = "<asm>") -> list[Instruction]:
    """Parse assembly text; raises TesselParseError with the 1-based line and column."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = re.split(r"[#;]", raw, maxsplit=1)[0]
        tokens = [(m.group(), m.start() + 1) for m in _TOKEN.finditer(line)]
        if tokens:
            out.append(_parse_line(tokens, lineno, source))
    return out


def _parse_line(tokens: list[tuple[str, int]], lineno: int, source: str) -> Instruction:
    name, col = tokens[0]
    try:
        op = Opcode[name.upper()]
    except KeyError:
        raise TesselParseError(f"unknown instruction {name!r}", lineno, col, source) from None
    spec = SPECS[op]
    fields = {f.name: f for f in spec.fields}
    values: dict[str, int] = {}
    for tok, col in tokens[1:]:
        key, eq, val = tok.partition("=")
        if not eq or not key or not val:
            raise TesselParseError(f"expected field=value, got {tok!r}", lineno, col, source)
        if key not in fields:
            raise TesselParseError(f"{op.name} has no field {key!r}", lineno, col, source)
        if key in values:
            raise TesselParseError(f"field {key!r} given twice", lineno, col, source)
        values[key] = _parse_value(fields[key], val, op, lineno, col + len(key) + 1, source)
    try:
        return Instruction.make(op, **values)
    except TesselFormatError as exc:
        raise TesselParseError(str(exc), lineno, tokens[0][1], source) from None


def _parse_value(f: Field, text: str, op: Opcode, lineno: int, col: int, source: str) -> int:
    if f.enum is not None:
        try:
            return f.enum[text.upper()]
        except KeyError:
            names = ", ".join(m.name for m in f.enum)
            raise TesselParseError(
                f"{op.name}.{f.name} must be one of {names}, got {text!r}", lineno, col, source
            ) from None
    if not _INT.match(text):
        raise TesselParseError(
            f"{op.name}.{f.name} must be an integer, got {text!r}", lineno, col, source
        )
    if len(text) > MAX_LITERAL:
        raise TesselParseError(
            f"{op.name}.{f.name}: integer literal of {len(text)} characters is out of range",
            lineno, col, source)
    value = int(text, 0) if not re.match(r"^[+-]?0[0-9]", text) else int(text, 10)
    why = f.check(value)
    if why is not None:
        raise TesselParseError(f"{op.name}.{f.name} {why}", lineno, col, source)
    return value
