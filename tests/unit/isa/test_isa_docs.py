"""docs/isa.md holds the tables generated from the ISA table, up to date, for every opcode."""

from __future__ import annotations

from pathlib import Path

from tessel.isa import SPECS, Opcode
from tessel.isa.docgen import block_names, field_table, update

DOC = Path(__file__).resolve().parents[3] / "docs" / "isa.md"


def test_isa_doc_is_up_to_date() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert update(text) == text, "run: python -m tessel.isa.docgen docs/isa.md"


def test_isa_doc_has_every_opcode() -> None:
    names = block_names(DOC.read_text(encoding="utf-8"))
    assert "opcodes" in names
    assert {n.split()[1] for n in names if n.startswith("fields ")} == {op.name for op in Opcode}


def test_field_table_lists_bits_and_types() -> None:
    table = field_table(SPECS[Opcode.WAIT])
    assert "| 8-9 | `engine` | Engine | DMA_IN=0, MATRIX=1, VECTOR=2, DMA_OUT=3 |" in table
    assert "| 10-13 | `token` | u4 | 0 .. 15 |" in table
    assert update("<!-- BEGIN GENERATED fields END -->\nstale\n<!-- END GENERATED fields END -->"
                  ).count("No fields.") == 1


def test_the_cost_tables_cover_every_instruction_and_engine() -> None:
    from tessel.isa.docgen import cost_table, gemm_table, vector_table

    costs = cost_table()
    for op in SPECS:
        assert op.name in costs
    assert "DWCONV in MATRIX" in gemm_table() and "| DWCONV |" in vector_table()
    assert "`8*d0*d1*d2`" in vector_table()  # UNARY: the divider's steps per element
