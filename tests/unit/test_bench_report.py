"""The page `make bench` writes (benchmarks.report): targets judged from the figures, not typed;
every section under its command; the commit marked dirty when the tree is."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is a package at the repository's root
    sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402
from benchmarks.report import TARGETS, Section, Target  # noqa: E402


def _page(figures: dict[str, float], quick: bool = False) -> tuple[str, int]:
    sections = [Section("Simulation", "python -m benchmarks.bench_sim --models resnet18",
                        "| a |\n|---|\n| 1 |", figures)]
    started = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    return report.page(sections, "abc1234", started, 90.0, quick)


def test_verdict_follows_the_figure():
    t = Target("simulation <= 2x eager", "resnet18", "k", "<=", 2.0, "x")
    assert t.verdict({"k": 2.0}) == ("2.00x", "met")
    assert t.verdict({"k": 2.01}) == ("2.01x", "**NOT met**")
    assert t.verdict({}) == ("-", "not measured")
    assert Target("g", "s", "k", "<", 0.5).verdict({"k": 0.5})[1] == "**NOT met**"
    assert Target("g", "s", "k", ">=", 0.85).verdict({"k": 0.85})[1] == "met"


@pytest.mark.parametrize(("ratio", "failed"), [(1.2, 0), (2.5, 1)])
def test_page_counts_targets_not_met(ratio, failed):
    text, n = _page({"sim_vs_eager_cpu/resnet18": ratio})
    assert n == failed
    row = next(line for line in text.splitlines()
               if "| resnet18 |" in line and "simulation <=" in line)
    assert f"{ratio:.2f}x" in row
    assert row.endswith("| met |") if not failed else "NOT met" in row


def test_page_names_commands_commit_and_targets():
    text, _ = _page({})
    assert "## Simulation: `python -m benchmarks.bench_sim --models resnet18`" in text
    assert "- Commit: `abc1234`" in text
    assert "figures.md" in text  # the definitions
    assert text.count("not measured") == len(TARGETS)
    assert "Quick mode" not in text and "Quick mode" in _page({}, quick=True)[0]


def test_every_target_key_is_one_a_benchmark_reports():
    prefixes = {"sim_vs_eager_cpu/", "batch_vs_eager_cpu/", "compile_vs_export_cpu/",
                "check_vs_run_cpu/", "help_wall", "fail_fast_wall", "backend_s/",
                "dse_per_worker/16", "dse_scaling_local/64", "dse_scaling_ray/64",
                "fidelity_p90", "fidelity_max", "fidelity_whole", "auto_bytes_saved/",
                "auto16_bytes_saved/", "auto16_metric_loss/",
                "auto_metric_loss/", "auto_energy_saved/", "fit_vs_memory/",
                "wcodec_vs_zstd/", "wcodec_random_ratio", "wcodec_npu_cycles/",
                "xr_explore_saving", "sparse_conv_matrix_speedup/", "sparse_bytes_ratio/",
                "sparse_int4_constants/"}
    for t in TARGETS:
        assert any(t.key.startswith(p) for p in prefixes), t.key


def test_commit_is_marked_dirty_when_the_tree_differs(monkeypatch):
    answers = {"rev-parse": "abc1234", "status": " M src/x.py"}

    class Done:
        def __init__(self, out):
            self.stdout = out

    monkeypatch.setattr(report.subprocess, "run",
                        lambda argv, **kw: Done(answers[argv[1]]))
    assert report.commit() == "abc1234+dirty"
    answers["status"] = ""
    assert report.commit() == "abc1234"
