"""Short reprs and notebook HTML of the result objects; one table model for every format."""

from __future__ import annotations

import re

import numpy as np
import pytest
from analysis_nets import conv_pool_net

from tessel.analysis.advise import advise
from tessel.analysis.estimate import estimate_graph
from tessel.display import Table, fmt_change, fmt_int


@pytest.fixture(scope="module")
def graph():
    return conv_pool_net(np.random.default_rng(0))


def test_reprs_are_short_and_html_views_exist(compiled, graph):
    objs = {"CompiledModel": compiled, "Profile": compiled.profile,
            "EstimateReport": estimate_graph(graph, compiled.arch, name="net"),
            "Advice": advise(graph, compiled.arch, name="net")}
    for kind, obj in objs.items():
        text = repr(obj)
        assert text.startswith(kind + "(") and len(text) < 2000 and "\n" not in text, text
        page = obj._repr_html_()
        assert page.startswith("<div") and page.endswith("</div>") and "<table" in page, kind


def test_profile_table_fits_100_columns_and_names_layers(compiled):
    text = compiled.profile.table()
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= 100
    assert lines[0] == f"{len(compiled.profile.layers)} layers"
    assert lines[1].split()[:3] == ["layer", "op", "cycles"]
    wide = compiled.profile.table(None).splitlines()  # one line per layer, the IR name last
    assert len(wide) == 3 + len(compiled.profile.layers) and wide[1].endswith("IR name")
    for lay, line in zip(compiled.profile.layers, wide[3:], strict=True):
        assert re.split(r" {3,}", line)[-2:] == [lay.mapping, lay.name] and \
            line.startswith(lay.label + " ")


def _columns(t: Table, text: str, width: int) -> list[list[str]]:
    """The cells of a fitted table read back: each column sliced out of every line by its
    width, a row starting at a line with a number in column 2 (numbers never wrap)."""
    widths = t.widths(width)
    starts = [sum(widths[:k]) + 3 * k for k in range(len(widths))]
    rule = next(i for i, x in enumerate(text.splitlines()) if x.startswith("\u2500"))
    rows: list[list[list[str]]] = []
    for line in text.splitlines()[rule + 1:]:
        parts = [line[a:a + w].strip() for a, w in zip(starts, widths, strict=True)]
        if parts[2]:
            rows.append([[p] for p in parts])
        else:
            for k, p in enumerate(parts):
                rows[-1][k].append(p)
    return [[" ".join(x for x in cell if x) for cell in row] for row in rows]


@pytest.mark.parametrize("width", [100, 60, 42])
def test_narrow_tables_wrap_text_and_never_cut_a_cell(width):
    cells = [("layer1.0.downsample.0", "qconv2d+max_pool2d", fmt_int(1234567),
              "weight-stationary rows=4 cout_chunk=32"), ("a|b", "qadd", "5", "split=dma")]
    t = Table(("name", "op", "n", "mapping"), cells, numeric=(False, False, True, False))
    text = t.text(width)
    assert max(len(x) for x in text.splitlines()) <= width and "…" not in text
    for row, got in zip(cells, _columns(t, text, width), strict=True):
        for cell, back in zip(row, got, strict=True):  # every character, in order
            assert back.replace(" ", "") == cell.replace(" ", ""), (cell, text)
    assert t.text(None).splitlines()[2].startswith("layer1.0.downsample.0   qconv2d+max_pool2d")


def test_a_table_too_wide_to_wrap_folds_each_row_into_header_value_lines():
    t = Table(("layer", "op", "cycles", "mapping"),
              [("features.17.conv.0.0", "qconv2d", "1,234", "weight-stationary rows=4")],
              numeric=(False, False, True, False))
    text = t.text(24)
    assert t.widths(24) is None and max(len(x) for x in text.splitlines()) <= 24
    assert "layer: features.17.conv." in text and "cycles: 1,234" in text


def test_secondary_columns_are_left_out_with_a_note_rather_than_wrapping():
    t = Table(("layer", "op", "IR name"), [("conv1", "qconv2d", "conv2d_q" * 6)],
              secondary=(2,))
    assert "IR name" in t.text(None) and "IR name" in t.text(200)
    narrow = t.text(40)
    assert "conv2d_q" not in narrow and "IR name: left out to fit 40 columns" in narrow
    assert "IR name" in t.html() and "IR name" in t.markdown()


def test_table_formats_agree():
    t = Table(("name", "n"), [("x" * 80, fmt_int(1234567)), ("a|b", "5")], numeric=(False, True))
    md = t.markdown().splitlines()
    assert md[0] == "| name | n |" and md[1] == "|---|---:|" and "a\\|b" in md[3]
    page = t.html()
    assert page.count("<tr>") == 3 and '<td class="num">1,234,567</td>' in page
    with pytest.raises(ValueError):
        Table(("a", "b"), [("only one",)])


def test_signed_changes_are_one_convention():
    assert fmt_change(4.567) == "+4.57 %" and fmt_change(-4.567) == "-4.57 %"
    assert fmt_change(-0.0001) == "+0.00 %"


def test_advice_shows_the_same_signed_energy_change_in_text_and_html(graph, compiled):
    a = advise(graph, compiled.arch, name="net")
    for g in a.ranked:
        change = fmt_change(-g.energy_gain_pct)
        row = next(r for r in a.ranked_table().rows if r[1] == g.change)
        assert row[5] == change
    assert all(fmt_change(-g.energy_gain_pct) in a._repr_html_() for g in a.ranked)
