"""`tessel asm` / `tessel disasm`: a hand-written program round-trips to the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessel.binary import load_tsl
from tessel.binary.text import program_from_text, program_to_text
from tessel.cli import main
from tessel.errors import TesselParseError
from tessel.isa import Engine, Opcode

HERE = Path(__file__).parent


def test_hand_written_program_roundtrips_through_cli(tmp_path, capsys):
    first, second = tmp_path / "a.tsl", tmp_path / "b.tsl"
    assert main(["asm", str(HERE / "copy16.tasm"), "-o", str(first)]) == 0
    program = load_tsl(first)
    assert [i.opcode for i in program.streams[Engine.VECTOR]] == [
        Opcode.WAIT, Opcode.COPY, Opcode.SIGNAL, Opcode.END]
    assert program.metadata == {"model": "copy16"}
    capsys.readouterr()
    assert main(["disasm", str(first)]) == 0
    text = capsys.readouterr().out
    assert "COPY dtype=I8 d0=16" in text and ".input x dtype=INT8 shape=1x16" in text
    (tmp_path / "a.tasm").write_text(text)
    assert main(["asm", str(tmp_path / "a.tasm"), "-o", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()


def test_text_roundtrip_is_identity():
    program = program_from_text((HERE / "copy16.tasm").read_text())
    assert program_from_text(program_to_text(program)) == program


@pytest.mark.parametrize("edit, line, what", [
    (lambda t: t.replace(".engine MATRIX", ".engine TENSOR"), 15, "unknown engine"),
    (lambda t: t.replace("COPY dtype=I8", "COPY dtype=I9"), 12, "I9"),
    (lambda t: t.replace("SIGNAL engine=VECTOR", "SIGNAL bogus=1 engine=VECTOR"), 8, "bogus"),
    (lambda t: t.replace(".metadata {", ".metadata {{"), 5, "JSON"),
])
def test_asm_errors_name_the_line(edit, line, what):
    text = edit((HERE / "copy16.tasm").read_text())
    with pytest.raises(TesselParseError) as err:
        program_from_text(text, source="p.tasm")
    assert err.value.line == line and what in str(err.value)


def test_cli_reports_malformed_binary(tmp_path, capsys):
    bad = tmp_path / "bad.tsl"
    bad.write_bytes(b"TSL\0" + b"\xff" * 40)
    assert main(["disasm", str(bad)]) == 1
    assert "error" in capsys.readouterr().err
