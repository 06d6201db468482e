"""Every example script of examples/ runs (on the small model examples/bring_your_own_model.py
defines) and writes what it says; each has a README row."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = f"{EXAMPLES / 'bring_your_own_model.py'}:make"


def _run(script: str, argv: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [script, *argv])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")


def test_every_script_is_listed_in_the_readme():
    readme = (EXAMPLES / "README.md").read_text()
    for script in EXAMPLES.glob("*.py"):
        if script.name != "make_notebook.py":
            assert f"]({script.name})" in readme, script.name


@pytest.mark.slow
def test_scripts_run_and_write_their_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _run("bring_your_own_model.py", [], monkeypatch)
    assert "['logits', 'features']" in capsys.readouterr().out
    _run("compile_and_check.py", [MODEL, "-o", "m.tsl"], monkeypatch)
    out = capsys.readouterr().out
    assert out.count("bit-exact True") == 2 and (tmp_path / "m.tsl").is_file()
    _run("profile_report.py", ["m.tsl", "--out", "reports"], monkeypatch)
    assert {p.name for p in (tmp_path / "reports").iterdir()} == {
        "report.html", "trace.json", "layers.csv"}
    _run("compare_targets.py", [MODEL, "--targets", "tnpu-s,u55-256"], monkeypatch)
    assert "u55-256" in capsys.readouterr().out and (tmp_path / "compare.html").is_file()
    _run("layer_accuracy.py", [MODEL], monkeypatch)
    assert "lowest SQNR:" in capsys.readouterr().out
    _run("explore_design_space.py", [MODEL, "--out", "x"], monkeypatch)
    assert (tmp_path / "x" / "pareto.csv").is_file()
