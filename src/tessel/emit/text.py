"""The emitted program as text (`--dump-after emit`): every engine's stream, disassembled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessel.binary import TslProgram
from tessel.isa import Engine, disassemble
from tessel.isa.codec import decode_stream


def streams_text(program: TslProgram) -> str:
    """Every engine's instruction stream, disassembled (a stream held as encoded bytes is
    decoded first)."""
    def instructions(e: Engine) -> Sequence[Any]:
        stream = program.streams[e]
        return decode_stream(e, stream) if isinstance(stream, bytes) else stream

    return "".join(f".engine {e.name}\n{disassemble(instructions(e))}" for e in Engine
                   if e in program.streams)
