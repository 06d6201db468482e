"""`--dump-after emit` text (tessel.emit.text.streams_text): the same for a program holding instruction
tuples and for one holding the same streams encoded as bytes."""

from __future__ import annotations

from tessel.binary import TslProgram
from tessel.emit.text import streams_text
from tessel.isa import DType, Engine, Instruction, Opcode
from tessel.isa.codec import encode_stream


def test_encoded_streams_disassemble_like_instruction_tuples():
    load = Instruction.make(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=32, d1=4, ext_addr=64,
                            ext_s0=1, ext_s1=32, sram_addr=0, sram_s0=1, sram_s1=32)
    end = Instruction.make(Opcode.END)
    streams = {Engine.DMA_IN: (load, end), Engine.MATRIX: (end,)}
    as_tuples = TslProgram(bytes(32), streams)
    as_bytes = TslProgram(bytes(32), {e: encode_stream(s) for e, s in streams.items()})
    assert isinstance(as_bytes.streams[Engine.DMA_IN], bytes)
    text = streams_text(as_tuples)
    assert text == streams_text(as_bytes)
    assert text.count("\n") == 5 and "DMA_LOAD" in text.upper()
