"""Writes tour.ipynb from the cells below (the notebook is generated so that its text stays
reviewable here; `python examples/make_notebook.py` after editing a cell)."""

from __future__ import annotations

from pathlib import Path

import nbformat

CELLS = [
    ("md", """# A tour of Tessel

Compile a PyTorch model for the Tessel NPU, run it on the bit-exact simulator, profile it,
estimate it on another design point, compare two NPU targets side by side, and see where
quantisation loses precision, layer by layer. Every result object shows a short summary in a
notebook; `print(...)` of its `table()` gives the text form.

The model is DS-CNN, the keyword-spotting network of the zoo (`tessel models` lists them);
any `nn.Module` in eval mode with example inputs works the same way."""),
    ("code", """import numpy as np

import tessel
from tessel.arch import load_target
from tessel.models import load, resolve

model, inputs = load("ds_cnn")                          # (nn.Module in eval mode, example inputs)
calibration = resolve("ds_cnn").calibration_data(8)    # samples to calibrate the int8 scales"""),
    ("md", """## Compile and run
`tessel.compile` exports the model, quantises it to int8 (post-training, on the calibration
samples), and builds the NPU binary. `run` simulates the NPU bit-exactly; the quantised model's
golden (integer) interpreter gives the same bits."""),
    ("code", """cm = tessel.compile(model, inputs, target="tnpu-s", calibration_data=calibration)
cm"""),
    ("code", """qm = tessel.quantize(model, inputs, calibration_data=calibration)  # the integer model
scores, = cm.run(*inputs)
golden, = qm.run(*inputs)
print(cm.output_names, scores.shape, "bit-exact:", np.array_equal(scores, golden))
qm"""),
    ("md", """## Profile
Cycles, energy and MAC utilisation from the simulator's timing model, per layer (layers are
named by their module path). `tessel profile model.tsl --html report.html` writes the full
report; `cm.save("ds_cnn.tsl")` saves the binary."""),
    ("code", """cm.profile"""),
    ("code", """print(cm.profile.layer_table(5).text(100))"""),
    ("md", """## Estimate
The analytical estimate needs no binary: the schedule the compiler would emit, on any target.
It is what design-space exploration runs thousands of times."""),
    ("code", """from tessel.analysis.estimate import estimate_graph

estimate_graph(qm.graph, load_target("tnpu-m"), name="ds_cnn")"""),
    ("md", """## Compare two targets
The same model on two NPUs, side by side: latency, energy, area at each target's process
node, MAC utilisation, off-chip traffic, and the layers whose bound changes.
`tessel compare ds_cnn --targets tnpu-s,u55-256 --html compare.html` does the same from the
command line."""),
    ("code", """comparison = tessel.compare_targets({"ds_cnn": qm.graph},
                                    [load_target("tnpu-s"), load_target("u55-256")])
comparison"""),
    ("code", """from tessel.analysis.compare_html import write_compare_html

write_compare_html(comparison, "compare.html")   # the comparison plotted, one self-contained page"""),
    ("md", """## Per-layer accuracy
Where does quantisation lose precision? At every activation the model quantises, the SQNR
of the quantised value against the float one (weights int8 in both)."""),
    ("code", """accuracy = tessel.layer_accuracy(qm, inputs)
accuracy"""),
    ("code", """for layer in accuracy.worst(3):
    print(f"{layer.layer:16s} {layer.op:8s} {layer.sqnr_db:5.1f} dB")"""),
    ("md", """## Co-design
What limits the model on this NPU, and what doubling each hardware parameter would buy
(compiler in the loop); then a two-point design-space exploration."""),
    ("code", """tessel.advise(qm.graph, cm.arch, name="ds_cnn")"""),
    ("code", """tessel.explore({"ds_cnn": qm.graph}, {"matrix": {"rows": [8, 16]}}, workers=0)"""),
]


def notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(text) if kind == "md"
                else nbformat.v4.new_code_cell(text) for kind, text in CELLS]
    for k, cell in enumerate(nb.cells):
        cell.id = f"cell-{k:02d}"  # fixed ids: the same file every time it is written
    return nb


if __name__ == "__main__":
    path = Path(__file__).with_name("tour.ipynb")
    nbformat.write(notebook(), path)
    print(f"wrote {path}")
