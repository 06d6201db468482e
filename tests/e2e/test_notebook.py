"""The example notebook (examples/tour.ipynb: compile, run, profile, estimate, compare two
targets, per-layer accuracy, advise, explore) runs end to end in a real Jupyter kernel
(nbclient); each result cell shows its object as short, well-formed HTML, and the text/plain
form is the short ``__repr__``. The committed notebook is the one examples/make_notebook.py
writes."""

from __future__ import annotations

import os
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "tour.ipynb"
VIEWS = {  # a result cell's last line -> the class whose HTML view it shows
    "cm": "CompiledModel", "qm": "QuantizedModel", "cm.profile": "Profile",
    'estimate_graph(qm.graph, load_target("tnpu-m"), name="ds_cnn")': "EstimateReport",
    "comparison": "TargetComparison", "accuracy": "LayerAccuracyReport",
    'tessel.advise(qm.graph, cm.arch, name="ds_cnn")': "Advice",
    'tessel.explore({"ds_cnn": qm.graph}, {"matrix": {"rows": [8, 16]}}, workers=0)':
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


def test_committed_notebook_is_the_generated_one():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from make_notebook import notebook
    finally:
        sys.path.remove(str(ROOT / "examples"))
    committed = nbformat.read(NOTEBOOK, as_version=4)
    assert [c.source for c in committed.cells] == [c.source for c in notebook().cells]
    assert all(not c.get("outputs") for c in committed.cells)  # committed without outputs


@pytest.mark.slow
def test_example_notebook_runs_and_renders_short_html_views(tmp_path: Path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env_path if env_path else "")
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()  # raises CellExecutionError on any failing cell
    finally:
        os.environ["PYTHONPATH"] = env_path
    seen = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        last = cell.source.strip().splitlines()[-1]
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        if last not in VIEWS:
            continue
        kind = VIEWS[last]
        seen.add(kind)
        assert len(results) == 1, (last, cell.outputs)
        data = results[0].data
        plain, page = data["text/plain"], data.get("text/html", "")
        assert plain.startswith(kind + "(") and len(plain) < 2000, (last, plain[:300])
        assert kind in page and 0 < len(page) < 60_000, (last, len(page))
        parser = Balanced()
        parser.feed(page)
        assert not parser.errors and not parser.stack, (last, parser.errors, parser.stack)
        assert "table" in parser.tags or kind == "QuantizedModel", last
    assert seen == set(VIEWS.values())
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.outputs if o.output_type == "stream")
    assert "bit-exact: True" in printed
    assert (tmp_path / "compare.html").stat().st_size > 10_000
