"""The HTML report: parsed with html.parser, it has every summary field, one table row per
layer, three or more embedded PNG plots that decode, no external resource or link, and all
text escaped."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest
from analysis_nets import LAYERS, build

from tessel.analysis.html import report_html, write_html
from tessel.errors import TesselConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_FIELDS = {"latency", "throughput", "energy", "power", "tops_per_w", "mac_utilisation",
                  "sram_peak", "dram_arena", "offchip_traffic", "area", "host_ops"}


class Page(HTMLParser):
    """Start tags with their attributes, text per summary field, layer table rows."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.field: str | None = None
        self.fields: dict[str, str] = {}
        self.in_tbody = False
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.title = ""
        self.in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "tr" and "data-field" in a:
            self.field = a["data-field"]
            self.fields[self.field] = ""
        self.in_tbody |= tag == "tbody"
        if self.in_tbody and tag == "tr":
            self.rows.append([])
        if self.in_tbody and tag == "td":
            self.cell = []
        self.in_title |= tag == "title"

    def handle_endtag(self, tag):
        if tag == "tr":
            self.field = None
        if tag == "tbody":
            self.in_tbody = False
        if tag == "td" and self.cell is not None:
            self.rows[-1].append("".join(self.cell))
            self.cell = None
        if tag == "title":
            self.in_title = False

    def handle_data(self, data):
        if self.field:
            self.fields[self.field] += data
        if self.cell is not None:
            self.cell.append(data)
        if self.in_title:
            self.title += data


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def page_text(compiled, tmp_path_factory):
    path = write_html(compiled, tmp_path_factory.mktemp("html") / "report.html", fps=30)
    return path.read_text(encoding="utf-8")


def test_every_element_is_there(page_text, compiled):
    page = parse(page_text)
    assert set(page.fields) == SUMMARY_FIELDS
    assert all(v.strip() for v in page.fields.values())
    assert "at 30 fps" in page.fields["power"] and "mW" in page.fields["power"]
    ids = {a.get("id") for _, a in page.tags}
    assert {"summary", "energy", "roofline", "timeline", "layers", "host-ops",
            "definitions", "layer-table"} <= ids
    assert [r[0] for r in page.rows] == LAYERS  # no module path in this IR-built net: IR names
    assert f"{compiled.profile.cycles:,} cycles" in page.fields["latency"]


def test_plots_are_embedded_pngs(page_text):
    page = parse(page_text)
    imgs = [a for t, a in page.tags if t == "img"]
    assert len(imgs) >= 3
    assert {a["id"] for a in imgs} >= {"energy-plot", "roofline-plot", "timeline-plot"}
    for a in imgs:
        prefix = "data:image/png;base64,"
        assert a["src"].startswith(prefix) and a["alt"]
        assert base64.b64decode(a["src"][len(prefix):], validate=True).startswith(PNG_MAGIC)


def test_self_contained(page_text):
    assert not re.search(r"https?:", page_text, re.IGNORECASE)
    page = parse(page_text)
    tags = {t for t, _ in page.tags}
    assert not tags & {"link", "iframe", "object", "embed"}
    assert all(a.get("src") is None for t, a in page.tags if t == "script")  # inline only
    for _, a in page.tags:
        for key in ("src", "href"):
            assert a.get(key) is None or a[key].startswith("data:image/png;base64,")


def test_text_is_escaped():
    cm = build(name='<b>"net"</b> & <script>x</script>')
    text = report_html(cm, fps=1e9)  # also: a frame rate the design cannot reach
    assert "<script>x" not in text and "<b>" not in text  # the report's own script is inline
    page = parse(text)
    assert sum(t == "script" for t, _ in page.tags) == 1
    assert page.title == 'Tessel report: <b>"net"</b> & <script>x</script> on tnpu-s'
    assert "NOT achievable" in page.fields["power"]


def test_bad_frame_rate(compiled, tmp_path):
    with pytest.raises(TesselConfigError, match="frame rate"):
        write_html(compiled, tmp_path / "r.html", fps=0)


def test_advice_section(compiled):
    """With advice, the report carries the ranked co-design table, one row per relaxation."""
    import numpy as np
    from analysis_nets import conv_pool_net

    from tessel.analysis.advise import advise

    adv = advise(conv_pool_net(np.random.default_rng(0)), compiled.arch, name="net")
    page = parse(report_html(compiled, advice=adv))
    ids = {a.get("id") for _, a in page.tags}
    assert {"advice", "advice-table"} <= ids
    assert adv.ranked and all(g.change in report_html(compiled, advice=adv) for g in adv.ranked)
