"""What the CLI says while it works, off a terminal: never silent for more than 2 s (ViT's
compile, the longest common command), counts that are the real counts, and other packages'
warnings hidden unless -v."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from tessel.progress import configure, info, watching
from tessel.quiet import third_party_messages

SRC = str(Path(__file__).resolve().parents[2] / "src")
RNN = """\
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(8, 8, batch_first=True)
        self.fc = torch.nn.Linear(8, 4)
    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])
def make():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(1, 5, 8),)
"""


def _timed_stderr(argv: list[str], cwd: Path) -> tuple[list[tuple[float, str]], float, int]:
    """Run `tessel ARGV` with stderr piped: (seconds after the start each stderr line
    arrived, its text), the run's seconds, the exit code."""
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tessel", *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.perf_counter() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    proc.stdout.read()  # type: ignore[union-attr]
    code = proc.wait(timeout=600)
    reader.join()
    return lines, time.perf_counter() - t0, code


@pytest.mark.slow
def test_compiling_vit_off_a_terminal_is_never_silent_for_2_s(tmp_path):
    lines, took, code = _timed_stderr(["compile", "vit_small", "-o", "vit.tsl",
                                       "--calibration", "8"], tmp_path)
    assert code == 0, lines
    times = [0.0] + [t for t, _ in lines]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[worst] <= 2.0, (gaps[worst], lines[max(0, worst - 1):worst + 1], took)
    assert (tmp_path / "vit.tsl").stat().st_size > 0


@pytest.mark.slow
def test_rnn_warnings_are_hidden_and_the_calibration_count_is_real(tmp_path):
    (tmp_path / "rnn.py").write_text(RNN)
    lines, _, code = _timed_stderr(["compile", "rnn.py:make", "-o", "rnn.tsl"], tmp_path)
    text = "\n".join(t for _, t in lines)
    assert code == 0, text
    assert "Warning" not in text and "_flat_weights" not in text, text
    # one example input, 32 samples asked: the message says 1, and why
    assert "(1 calibration sample, all there are; 32 asked)" in text, text
    assert "32 calibration samples" not in text


def test_other_packages_warnings_hidden_unless_verbose():
    theirs = {"__name__": "torch.nn.modules.rnn"}  # warnings are attributed to a module
    mine = {"__name__": "tessel.analysis.accuracy"}  # by the globals of the warning frame
    for where, text in ((theirs, "from a library"), (mine, "from tessel")):
        exec(f"import warnings\ndef warn():\n    warnings.warn({text!r}, UserWarning)", where)
    for shown in (False, True):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with third_party_messages(shown=shown):
                theirs["warn"]()
                mine["warn"]()
                assert logging.getLogger("torchao.kernel").isEnabledFor(logging.WARNING) \
                    is shown
        texts = [str(w.message) for w in seen]
        assert ("from a library" in texts) is shown and "from tessel" in texts, (shown, texts)


def test_watchdog_says_what_runs_when_nothing_was_written(monkeypatch):
    import io

    import tessel.progress

    monkeypatch.setattr(tessel.progress, "SILENCE_S", 0.5)
    stream = io.StringIO()
    configure(0, stream=stream)
    try:
        with watching("tessel test: starting"):
            time.sleep(0.9)  # one silence: one line naming what runs
            info("step two ...")
            time.sleep(0.9)
    finally:
        configure(-1)
    lines = stream.getvalue().splitlines()
    assert "tessel test: starting (still running, " in lines[0], lines
    assert lines[1].endswith("step two ...") and "step two (still running, " in lines[2], lines
    assert len(lines) == 3, lines
