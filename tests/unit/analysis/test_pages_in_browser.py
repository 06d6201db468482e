"""The HTML pages looked at in a real browser: headless Chromium driven through WebDriver
(Debian's chromium and chromium-driver, which `make test` installs through `make browser`).
The comparison page of `tessel compare` (targets, and two binaries) and the profile report
are opened from disk: every image decodes (naturalWidth > 0), the tables have their rows, a
screenshot is taken and shows the plot (many non-white pixels where the image is)."""

from __future__ import annotations

import io

import numpy as np
from analysis_nets import conv_pool_net

from tessel.analysis.compare import compare_binaries, compare_targets
from tessel.analysis.compare_html import write_compare_html
from tessel.analysis.html import write_html
from tessel.arch import CompileOptions, load_preset
from tessel.driver import compile_graph


def _look(browser, path, out_png):
    """Open the page; (images with their decoded width, table id -> body rows, screenshot)."""
    browser.get(path.as_uri())
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.id, i.complete && i.naturalWidth]);")
    tables = browser.execute_script(
        "return Object.fromEntries(Array.from(document.querySelectorAll('table[id]')).map("
        "t => [t.id, t.tBodies.length ? t.tBodies[0].rows.length : 0]));")
    plot = browser.find_element("css selector", "img")
    browser.execute_script("arguments[0].scrollIntoView();", plot)
    png = plot.screenshot_as_png
    out_png.write_bytes(browser.get_screenshot_as_png())
    return images, tables, png


def _coloured_share(png: bytes) -> float:
    """Share of the pixels that are neither white nor grey (the plot's coloured marks)."""
    from matplotlib.image import imread

    rgb = imread(io.BytesIO(png), format="png")[..., :3]
    spread = rgb.max(axis=-1) - rgb.min(axis=-1)
    return float((spread > 0.2).mean())


def test_comparison_pages_show_their_plot_and_tables(browser, compiled, tmp_path):
    graph = conv_pool_net(np.random.default_rng(0))
    cmp = compare_targets({"net": graph}, [load_preset(t) for t in ("tnpu-s", "u55-256")])
    page = write_compare_html(cmp, tmp_path / "targets.html")
    images, tables, png = _look(browser, page, tmp_path / "targets.png")
    assert images == [["compare-plot", images[0][1]]] and images[0][1] > 500, images
    assert tables == {"compare-table": 2, "bound-table": len(cmp.bound_changes)}
    assert _coloured_share(png) > 0.02  # the bars are drawn
    assert (tmp_path / "targets.png").stat().st_size > 10_000

    other = compile_graph(graph, load_preset("tnpu-s"), name="net",
                          options=CompileOptions(on_chip_residency=False))
    diff = compare_binaries(compiled, other, "a.tsl", "b.tsl")
    page = write_compare_html(diff, tmp_path / "binaries.html")
    images, tables, png = _look(browser, page, tmp_path / "binaries.png")
    assert images[0][1] > 500 and tables == {"compare-table": 7,
                                             "layer-table": len(diff.changed)}
    assert _coloured_share(png) > 0.02


def test_report_shows_its_plots_and_every_layer(browser, compiled, tmp_path):
    page = write_html(compiled, tmp_path / "report.html")
    images, tables, _ = _look(browser, page, tmp_path / "report.png")
    assert len(images) == 3 and all(w and w > 300 for _, w in images), images
    assert tables["layer-table"] == len(compiled.profile.layers)
    shown = browser.execute_script(  # every mapping and IR name whole: none overflows its cell
        "return Array.from(document.querySelectorAll('#layer-table td.wrap')).map("
        "c => [c.textContent, c.scrollWidth <= c.clientWidth + 1]);")
    assert {text for text, _ in shown} >= {lay.mapping for lay in compiled.profile.layers}
    assert all(fits for _, fits in shown), shown
    pager = browser.find_element("id", "layer-pager").text
    n = len(compiled.profile.layers)
    assert f"({n} layers)" in pager or f"({n} layer)" in pager
