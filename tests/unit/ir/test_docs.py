"""docs/ir.md's op table is generated from the op specs and must be up to date."""

from pathlib import Path

from tessel.ir import docgen

DOC = Path(__file__).resolve().parents[3] / "docs" / "ir.md"


def test_ir_doc_op_table_is_current():
    text = DOC.read_text()
    assert docgen.render(text) == text, "run: python -m tessel.ir.docgen"
    assert "`conv2d` | input, weight, [bias]" in text
