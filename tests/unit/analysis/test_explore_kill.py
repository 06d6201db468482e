"""`tessel explore` killed (SIGKILL) mid-way on ds_cnn: the re-run finishes every point,
none lost, none computed twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tessel.analysis.explore import explore, quantised_graphs

CLI = ("import argparse, sys\n"
       "from tessel.cli.explore import register\n"
       "p = argparse.ArgumentParser(); register(p.add_subparsers())\n"
       "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n")


def _lines(path: Path) -> list[str]:
    """Complete lines only (the last one may be cut by the kill)."""
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text('[matrix]\nrows = [8, 16, 32]\ncols = [8, 16]\n'
                     '[params]\n"vector.lanes" = [16, 32]\n'
                     'dram_bytes_per_cycle = [4, 8, 16]\n'
                     '"onchip.sram_bytes" = [262144]\n')  # 36 points
    out = tmp_path / "out"
    graphs = quantised_graphs(["ds_cnn"], 2, out)  # fills the graph cache the CLI reads
    study = out / "study.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "explore", "ds_cnn", "--space", str(space), "--out",
         str(out), "--workers", "1", "--calibration", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(_lines(study)) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done_before = len(_lines(study))
    assert 4 <= done_before < 36, done_before
    res = explore(graphs, space, out=out, workers=2)
    keys = [json.loads(line)["key"] for line in _lines(study)]
    assert len(keys) == 36 and len(set(keys)) == 36
    assert res.evaluated == 36 - done_before and len(res.points) == 36
