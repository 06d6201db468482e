"""How the container encodes and validates instruction streams: a small bundle of functions,
by default taken from tessel.isa, replaceable (e.g. by a fake ISA in tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tessel.binary.tokens import TokenOp


@dataclass(frozen=True)
class StreamCodec:
    """The ISA as the container sees it.

    engine_type: the Engine enum (members DMA_IN, MATRIX, VECTOR, DMA_OUT).
    encode: instructions -> bytes.
    decode: (engine, bytes) -> instructions; raises TesselFormatError on any bad opcode, field or
        truncation. The reader adds the section and file offset to its message.
    is_end: whether an instruction is END (every stream must end with one).
    token_op: for SIGNAL / WAIT, (is_signal, peer engine, token id), else None; when given, the
        streams are checked for deadlock and unconsumed tokens (tessel.binary.tokens).
    """

    engine_type: type[Enum]
    encode: Callable[[Sequence[Any]], bytes]
    decode: Callable[[Any, bytes], Sequence[Any]]
    is_end: Callable[[Any], bool]
    token_op: TokenOp | None = None


def isa_codec() -> StreamCodec:
    """The codec of the real ISA (tessel.isa), imported on first use."""
    from tessel import isa
    from tessel.isa.table import SPECS

    end, signal, wait = isa.Opcode.END, isa.Opcode.SIGNAL, isa.Opcode.WAIT
    assert all([f.name for f in SPECS[op].fields] == ["engine", "token"] for op in (signal, wait))

    def is_end(instruction: Any) -> bool:
        return instruction.opcode is end

    def encode(instructions: Sequence[Any]) -> bytes:
        # a program's queues hold each instruction object several times (token instructions
        # are shared, memoized tiles repeat): each object is encoded once (its id is stable
        # while `instructions` holds it)
        memo: dict[int, bytes] = {}
        out = []
        for ins in instructions:
            b = memo.get(id(ins))
            if b is None:
                b = memo[id(ins)] = isa.encode(ins)
            out.append(b)
        return b"".join(out)

    def token_op(instruction: Any) -> tuple[bool, Any, int] | None:
        # once per instruction of every stream written or read: opcodes compared by identity,
        # the fields read from args (SIGNAL and WAIT are (engine, token))
        op = instruction.opcode
        if op is signal:
            return (True, *instruction.args)
        if op is wait:
            return (False, *instruction.args)
        return None

    return StreamCodec(
        engine_type=isa.Engine,
        encode=encode,
        decode=isa.decode_stream,
        is_end=is_end,
        token_op=token_op,
    )
