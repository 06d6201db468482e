"""The scenario report (`tessel scenario run --html`) looked at in a real browser: headless
Chromium through WebDriver (Debian's chromium and chromium-driver, `make browser`), as the
profile and comparison pages are (tests/unit/analysis/test_pages_in_browser.py). Every image
decodes, the tables have their rows, and a screenshot of the timeline shows its bars: one
coloured lane per model in the zoomed view."""

from __future__ import annotations

import io

import numpy as np

from tessel.arch import load_target
from tessel.scenario import load_scenario
from tessel.scenario.html import write_scenario_html
from tessel.scenario.run import run_scenario


def _rgb(png: bytes) -> np.ndarray:
    from matplotlib.image import imread

    return imread(io.BytesIO(png), format="png")[..., :3]


def test_scenario_page_shows_the_timeline(browser, tmp_path):
    report = run_scenario(load_scenario("xr_glasses"), load_target("tnpu-s"), window_s=0.05)
    page = write_scenario_html(report, tmp_path / "xr.html")
    browser.get(page.as_uri())
    images = dict(browser.execute_script(
        "return Array.from(document.images).map(i => [i.id, i.complete && i.naturalWidth]);"))
    assert set(images) == {"scenario-timeline", "scenario-zoom", "scenario-power"}
    assert all(w > 500 for w in images.values()), images
    rows = browser.execute_script(
        "return Object.fromEntries(Array.from(document.querySelectorAll('table[id]')).map("
        "t => [t.id, t.tBodies[0].rows.length]));")
    assert rows["scenario-models"] == len(report.scenario.models)
    zoom = browser.find_element("css selector", "#scenario-zoom")
    browser.execute_script("arguments[0].scrollIntoView();", zoom)
    (tmp_path / "xr.png").write_bytes(browser.get_screenshot_as_png())
    rgb = _rgb(zoom.screenshot_as_png)
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.2
    assert coloured.mean() > 0.02  # the bars are drawn
    # one lane per model: the coloured rows form one band per model, top to bottom
    bands = np.flatnonzero(np.diff(coloured.any(axis=1).astype(int)) == 1)
    assert len(bands) == len(report.scenario.models), len(bands)
