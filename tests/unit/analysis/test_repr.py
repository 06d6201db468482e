"""Short reprs and notebook HTML of the result objects; one table model for every format."""

from __future__ import annotations

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
    assert lines[0].split()[:3] == ["layer", "op", "cycles"]
    assert len(lines) == 2 + len(compiled.profile.layers)


def test_table_formats_agree_and_long_cells_are_ellipsised():
    t = Table(("name", "n"), [("x" * 80, fmt_int(1234567)), ("a|b", "5")], numeric=(False, True),
              max_widths=(20, None))
    text = t.text(40).splitlines()
    assert max(len(x) for x in text) <= 40 and "1,234,567" in text[2] and "…" in text[2]
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
