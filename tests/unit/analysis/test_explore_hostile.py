"""`tessel explore` against careless reruns and faults: a changed base target or an edited model
file is recomputed, never answered from the old study; kill -9 of the explore process leaves no
worker behind; a failing output write leaves the previous outputs intact."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tessel.analysis import explore_output
from tessel.analysis.explore import explore
from tessel.errors import TesselConfigError

SPACE = {"matrix": {"rows": [8, 16], "cols": [8, 16]}}
MODEL = ("import torch\n"
         "class M(torch.nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "        self.fc = torch.nn.Linear(16, {width})\n"
         "    def forward(self, x):\n"
         "        return torch.relu(self.fc(x))\n"
         "def make():\n"
         "    torch.manual_seed(0)\n"
         "    return M().eval(), (torch.randn(1, 16),)\n")


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MODEL.format(width=8))
    return path


def test_changed_target_is_recomputed(model_file, tmp_path):
    out, spec = tmp_path / "out", f"{model_file}:make"
    small = explore([spec], SPACE, target="tnpu-s", out=out, workers=0, calibration_samples=1)
    assert small.evaluated == 4
    again = explore([spec], SPACE, target="tnpu-s", out=out, workers=0, calibration_samples=1)
    assert again.evaluated == 0 and again.points == small.points
    other = explore([spec], SPACE, target="tnpu-m", out=out, workers=0, calibration_samples=1)
    assert other.evaluated == 4 and len(other.points) == 4
    assert all(p.arch.startswith("tnpu-m") for p in other.points)
    assert {p.key for p in other.points}.isdisjoint({p.key for p in small.points})


def test_edited_model_is_recomputed(model_file, tmp_path):
    out, spec = tmp_path / "out", f"{model_file}:make"
    first = explore([spec], SPACE, out=out, workers=0, calibration_samples=1)
    model_file.write_text(MODEL.format(width=64))  # same name, different model
    second = explore([spec], SPACE, out=out, workers=0, calibration_samples=1)
    assert second.evaluated == 4, "the edited model reused the old model's results"
    cached = sorted((out / "graphs").iterdir())  # docs/analysis.md: graphs/KEY.tir
    assert len(cached) == 2, cached  # the graph cache is keyed by content
    assert all(p.suffix == ".tir" and p.read_text().lstrip().startswith("graph") for p in cached)
    assert [p.latency_ms() for p in second.points] != [p.latency_ms() for p in first.points]


def test_failed_output_write_keeps_previous_outputs(model_file, tmp_path, monkeypatch):
    out, spec = tmp_path / "out", f"{model_file}:make"
    explore([spec], SPACE, out=out, workers=0, calibration_samples=1)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def full_disk(path, data):
        raise TesselConfigError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(explore_output, "write_atomic", full_disk)
    with pytest.raises(TesselConfigError, match="No space left"):
        explore([spec], {"matrix": {"rows": [8, 16, 32]}}, out=out, workers=0,
                calibration_samples=1)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for name in ("pareto.csv", "pareto.png"):
        assert after[name] == before[name]
    assert not [p for p in out.rglob("*.tmp")]


CLI = ("import sys\n"
       "from tessel.cli import main\n"
       "sys.exit(main(sys.argv[1:]))\n")


def test_kill_9_leaves_no_worker_behind(model_file, tmp_path):
    space = tmp_path / "space.toml"
    space.write_text('[matrix]\nrows = [4, 8, 16, 32]\ncols = [4, 8, 16, 32]\n'
                     '[params]\n"vector.lanes" = [8, 16, 32, 64]\n')  # 64 points
    out = tmp_path / "out"
    explore([f"{model_file}:make"], {"matrix": {"rows": [8]}}, out=out, workers=0,
            calibration_samples=1)  # fills the graph cache: the CLI goes straight to the pool
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "explore", f"{model_file}:make", "--space", str(space),
         "--out", str(out), "--workers", "2", "--calibration", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[psutil.Process] = []
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = parent.children(recursive=True)
            time.sleep(0.05)
        assert len(workers) >= 2, "explore did not start its workers"
        os.kill(proc.pid, signal.SIGKILL)  # only the parent: no cleanup code of it runs
        proc.wait()
        _gone, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive, f"workers still alive 10 s after kill -9: {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for w in workers:  # a failed run must not leave its orphans either
            with contextlib.suppress(psutil.NoSuchProcess):
                w.kill()


@pytest.mark.slow
def test_kill_9_with_local_ray_leaves_nothing_behind(model_file, tmp_path):
    pytest.importorskip("ray", reason="the 'ray' package is not installed")
    space = tmp_path / "space.toml"
    space.write_text('[matrix]\nrows = [4, 8, 16, 32]\ncols = [4, 8, 16, 32]\n'
                     '[params]\n"vector.lanes" = [8, 16, 32, 64]\n')  # 64 points
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "explore", f"{model_file}:make", "--space", str(space),
         "--out", str(out), "--ray", "auto", "--calibration", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "RAY_ADDRESS": ""})  # never join a cluster another test started
    tree: dict[int, psutil.Process] = {}
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        study = out / "study.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            for p in parent.children(recursive=True):
                tree.setdefault(p.pid, p)
            if study.exists() and study.stat().st_size > 0:  # Ray is up, points are flowing
                break
            time.sleep(0.05)
        names = {p.name() for p in tree.values() if p.is_running()}
        assert "raylet" in names, f"explore did not start a local Ray: {names}"
        os.kill(proc.pid, signal.SIGKILL)  # only the driver: no cleanup code of it runs
        proc.wait()
        _gone, alive = psutil.wait_procs(list(tree.values()), timeout=5)
        assert not alive, f"still alive 5 s after kill -9: {[(p.pid, p.name()) for p in alive]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for p in tree.values():  # a failed run must not leave its orphans either
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
