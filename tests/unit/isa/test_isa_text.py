"""Assembly text: readable, round-trips, and errors carry line and column."""

from __future__ import annotations

import pytest

from tessel.errors import TesselParseError
from tessel.isa import DType, Engine, Instruction, Opcode, assemble, disassemble, encode_stream

PROGRAM = """\
# load a 8 x 64 tile, hand it to the matrix engine
DMA_LOAD mem=0 dtype=i8 d0=64 d1=8 ext_addr=0x1000 ext_s0=1 ext_s1=256 \
sram_addr=0 sram_s0=1 sram_s1=64   ; trailing comment
SIGNAL engine=MATRIX token=0
END
"""


def test_assemble_reads_hand_written_text() -> None:
    prog = assemble(PROGRAM.replace("\\\n", ""))
    assert [i.opcode for i in prog] == [Opcode.DMA_LOAD, Opcode.SIGNAL, Opcode.END]
    load = prog[0]
    assert (load.dtype, load.d0, load.d1, load.d2, load.ext_addr) == (DType.I8, 64, 8, 1, 0x1000)
    assert prog[1].engine is Engine.MATRIX


def test_disassemble_writes_every_field_and_roundtrips() -> None:
    prog = assemble(PROGRAM.replace("\\\n", ""))
    text = disassemble(prog)
    assert text.splitlines()[0].startswith("DMA_LOAD mem=0 dtype=I8 d0=64 d1=8 d2=1 d3=1 ")
    assert "sram_s3=0" in text and text.endswith("END\n")
    again = assemble(text)
    assert again == prog and encode_stream(again) == encode_stream(prog)
    assert disassemble([]) == ""


def test_number_forms() -> None:
    (i,) = assemble("DMA_STORE mem=0b11 dtype=I32 ext_addr=0x10 ext_s0=-4 sram_addr=010 "
                    "sram_s0=+4 d0=2")
    assert (i.mem, i.ext_addr, i.ext_s0, i.sram_addr, i.sram_s0) == (3, 16, -4, 10, 4)


@pytest.mark.parametrize("text,line,col,message", [
    ("END\nFROB x=1", 2, 1, "unknown instruction 'FROB'"),
    ("WAIT engine=MATRIX token", 1, 20, "expected field=value, got 'token'"),
    ("  WAIT engine=MATRIX tok=1", 1, 22, "WAIT has no field 'tok'"),
    ("WAIT engine=MATRIX token=1 token=2", 1, 28, "field 'token' given twice"),
    ("WAIT engine=GPU token=1", 1, 13, "WAIT.engine must be one of DMA_IN, MATRIX"),
    ("WAIT engine=MATRIX token=1.5", 1, 26, "WAIT.token must be an integer, got '1.5'"),
    ("WAIT engine=MATRIX token=16", 1, 26, r"WAIT.token must be in \[0, 15\], got 16"),
    ("\n\nWAIT token=1", 3, 1, "WAIT.engine is required"),
])
def test_errors_have_line_and_column(text: str, line: int, col: int, message: str) -> None:
    with pytest.raises(TesselParseError, match=message) as info:
        assemble(text, source="prog.s")
    assert (info.value.line, info.value.column) == (line, col)
    assert str(info.value).startswith(f"prog.s:{line}:{col}: ")


def test_instruction_str_is_its_text() -> None:
    i = Instruction.make(Opcode.SIGNAL, engine=Engine.DMA_OUT, token=7)
    assert str(i) == "SIGNAL engine=DMA_OUT token=7" and assemble(str(i)) == [i]
