"""The parameter tables of docs/architecture.md and docs/analysis.md are the ones generated
from the parameter declarations, up to date."""

from __future__ import annotations

from pathlib import Path

from tessel.analysis import docgen as analysis_docgen
from tessel.arch import docgen
from tessel.arch.params import FIELDS

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_architecture_doc_is_up_to_date() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    assert docgen.block_names(text) == ["params"]
    assert docgen.update(text) == text, "run: python -m tessel.arch.docgen docs/architecture.md"


def test_analysis_doc_is_up_to_date() -> None:
    text = (DOCS / "analysis.md").read_text(encoding="utf-8")
    assert docgen.block_names(text) == ["advise knobs", "explore params"]
    assert analysis_docgen.update(text) == text, \
        "run: python -m tessel.analysis.docgen docs/analysis.md"


def test_param_table_has_a_row_per_key() -> None:
    table = docgen.param_table()
    for p in FIELDS:
        assert f"| `{p.key}` |" in table, p.key
    assert "| `matrix.feed_bytes_per_cycle` | int | bytes/cycle | `64` | 1 .. 4096 | costs |" \
        in table
    stale = "<!-- BEGIN GENERATED params -->\nstale\n<!-- END GENERATED params -->"
    assert "stale" not in docgen.update(stale) and "`onchip.sram_bytes`" in docgen.update(stale)
