"""Every zoo model compiles for every preset (or fails with the clear does-not-fit error) and
the simulator running the binary equals the golden model bit for bit; compiling twice gives
identical bytes."""

from __future__ import annotations

import numpy as np
import pytest
from zoo_cache import golden, quantized

from tessel.arch import list_presets, load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError

MODELS = ["digits_cnn", "ds_cnn", "mobilenet_v2", "resnet18", "vit_small", "minilm"]
# weights that cannot fit the target's memory: the compiler must say so, naming the budget
DOES_NOT_FIT = {("resnet18", "tnpu-xs"), ("minilm", "tnpu-xs")}


def _grouped(*params):
    """pytest params on one xdist worker per model (the quantised model is cached there)."""
    return [pytest.param(*p, marks=pytest.mark.xdist_group(f"zoo-{p[0]}")) for p in params]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "preset"),
                         _grouped(*[(m, p) for m in MODELS for p in list_presets()]))
def test_zoo_model_bit_exact_on_preset(name, preset):
    qm, inputs, _ = quantized(name)
    arch = load_preset(preset)
    if (name, preset) in DOES_NOT_FIT:
        with pytest.raises(TesselCompileError, match="constants need .* bytes but memory"):
            compile_graph(qm.graph, arch, name=name)
        return
    cm = compile_graph(qm.graph, arch, name=name)
    outputs = cm.run(*inputs)
    for got, want in zip(outputs, golden(name), strict=True):
        np.testing.assert_array_equal(got, want)
    prof = cm.profile
    assert prof.cycles > 0 and 0 < prof.mac_utilisation <= 1
    print(f"\n{name} on {preset}: {prof.cycles} cycles, MAC util {prof.mac_utilisation:.3f}, "
          f"host ops {len(prof.host_ops)}")


@pytest.mark.slow
@pytest.mark.parametrize("name", _grouped(*[(m,) for m in MODELS]))
def test_zoo_compile_is_deterministic(name):
    qm, _, _ = quantized(name)
    arch = load_preset("u65-512")
    assert compile_graph(qm.graph, arch, name=name).binary == \
        compile_graph(qm.graph, arch, name=name).binary


@pytest.mark.slow
@pytest.mark.parametrize("name", _grouped(*[(m,) for m in MODELS]))
def test_zoo_estimate_within_5_percent_of_simulator(name):
    """`tessel estimate` (no binary) vs the simulated binary on tnpu-s: cycles and energy."""
    from tessel.analysis.estimate import estimate_graph

    qm, _, _ = quantized(name)
    arch = load_preset("tnpu-s")
    est = estimate_graph(qm.graph, arch, name=name)
    prof = compile_graph(qm.graph, arch, name=name).profile
    print(f"\n{name}: estimate {est.cycles} cycles vs simulated {prof.cycles} "
          f"({100 * (est.cycles - prof.cycles) / prof.cycles:+.1f} %), energy "
          f"{est.energy_uj:.1f} vs {prof.energy_uj:.1f} uJ")
    assert abs(est.cycles - prof.cycles) <= 0.05 * prof.cycles
    assert abs(est.energy_uj - prof.energy_uj) <= 0.05 * prof.energy_uj


@pytest.mark.slow
@pytest.mark.parametrize("name", _grouped(("mobilenet_v2",)))
def test_mobilenet_html_report_and_trace(name, tmp_path):
    """The HTML report of MobileNetV2 on tnpu-s has every element; the trace parses."""
    import json

    from tessel.analysis.html import write_html
    from tessel.analysis.trace import write_trace

    qm, _, _ = quantized(name)
    cm = compile_graph(qm.graph, load_preset("tnpu-s"), name=name)
    text = write_html(cm, tmp_path / "report.html", fps=30).read_text(encoding="utf-8")
    for element in ('id="summary"', 'id="layer-table"', 'id="roofline-plot"',
                    'id="energy-plot"', 'id="timeline-plot"', "fps", "TOPS/W", "MAC",
                    "arena"):
        assert element in text, element
    assert text.count("data:image/png;base64,") >= 3 and "http" not in text
    assert all(layer.name in text for layer in cm.profile.layers)
    trace = json.loads(write_trace(cm, tmp_path / "trace.json").read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len({e["tid"] for e in slices}) == 4 and len(slices) >= len(cm.profile.layers)


@pytest.mark.slow
@pytest.mark.parametrize("name", _grouped(("mobilenet_v2",)))
def test_mobilenet_report_names_colours_and_sorting(name):
    """What a reader of MobileNetV2's report sees: layers named by module path (the IR name in
    the next column), a distinct colour for each of the 10 slowest layers (grey for the rest), a
    layer table whose numeric cells carry sortable values, a short repr."""
    from html.parser import HTMLParser

    from tessel.analysis import plots
    from tessel.analysis.html import report_html

    qm, _, _ = quantized(name)
    cm = compile_graph(qm.graph, load_preset("tnpu-s"), name=name)
    prof = cm.profile
    assert len(repr(cm)) < 2000 and len(repr(prof)) < 2000 and len(cm._repr_html_()) < 50_000
    named = [lay for lay in prof.layers if lay.module]
    assert len(named) >= 0.9 * len(prof.layers)
    assert any(lay.module.startswith("features.") for lay in named)

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.on, self.head = [], False, []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            self.on |= a.get("id") == "layer-table"
            if self.on and tag == "tr":
                self.rows.append([])
            if self.on and tag == "td":
                self.rows[-1].append(a)
            if self.on and tag == "th":
                self.head.append(a.get("data-key"))

        def handle_data(self, data):
            if self.on and self.rows and self.rows[-1] and "text" not in self.rows[-1][-1]:
                self.rows[-1][-1]["text"] = data

        def handle_endtag(self, tag):
            self.on &= tag != "table"

    page = Rows()
    text = report_html(cm)
    page.feed(text)
    body = [r for r in page.rows if r]
    assert [r[0]["text"] for r in body] == [lay.label for lay in prof.layers]
    assert [r[1]["text"] for r in body] == [lay.name for lay in prof.layers]
    assert page.head[:2] == ["layer", "ir_name"]
    cycles = page.head.index("cycles")
    assert [float(r[cycles]["data-v"]) for r in body] == [lay.cycles for lay in prof.layers]
    assert "getElementById(\"layer-table\")" in text and "sort" in text
    colours = plots.layer_colours(prof)
    top = plots.top_layers(prof, 10)
    assert len({colours[k] for k in top}) == 10 and plots.GREY not in {colours[k] for k in top}
    assert all(colours[k] == plots.GREY for k in range(len(prof.layers)) if k not in top)
