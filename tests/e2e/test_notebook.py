"""A notebook executed by nbconvert (a real Jupyter kernel) shows Tessel's objects as short
HTML: CompiledModel, Profile, QuantizedModel, EstimateReport, Advice and ExploreResult of a
tiny model built in the notebook. Each cell's last expression is rendered by the kernel
through ``_repr_html_``; the text/plain form is the short ``__repr__``."""

from __future__ import annotations

import os
from html.parser import HTMLParser
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

SETUP = """\
import torch, tessel
from tessel.analysis.estimate import estimate_graph
from tessel.analysis.advise import advise

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 8 * 8, 10)
    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))

torch.manual_seed(0)
model, x = Tiny().eval(), torch.randn(1, 3, 8, 8)
qm = tessel.quantize(model, (x,))
cm = tessel.compile(model, (x,), target="tnpu-s")
"""
CELLS = {  # expression -> the class whose HTML view it shows
    "cm": "CompiledModel", "cm.profile": "Profile", "qm": "QuantizedModel",
    "estimate_graph(qm.graph, cm.arch, name='tiny')": "EstimateReport",
    "advise(qm.graph, cm.arch, name='tiny')": "Advice",
    "tessel.explore({'tiny': qm.graph}, {'matrix': {'rows': [8, 16]}}, workers=0)":
        "ExploreResult",
}


class Balanced(HTMLParser):
    """Checks that every non-void tag is closed in order."""

    VOID = {"br", "img", "meta", "hr", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unexpected </{tag}>")


@pytest.mark.slow
def test_notebook_renders_short_html_views(tmp_path: Path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + [
        nbformat.v4.new_code_cell(expr) for expr in CELLS]
    env_path = os.environ.get("PYTHONPATH", "")
    src = str(Path(__file__).resolve().parents[2] / "src")
    os.environ["PYTHONPATH"] = src + (os.pathsep + env_path if env_path else "")
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    for cell, (expr, kind) in zip(nb.cells[1:], CELLS.items(), strict=True):
        outputs = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert len(outputs) == 1, (expr, cell.outputs)
        data = outputs[0].data
        plain, page = data["text/plain"], data.get("text/html", "")
        assert plain.startswith(kind + "(") and len(plain) < 2000, (expr, plain[:300])
        assert kind in page and 0 < len(page) < 50_000, (expr, len(page))
        parser = Balanced()
        parser.feed(page)
        assert not parser.errors and not parser.stack, (expr, parser.errors, parser.stack)
        assert "table" in parser.tags or kind == "QuantizedModel", expr
