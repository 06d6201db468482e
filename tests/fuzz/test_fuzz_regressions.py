"""Replay every input the fuzzers ever found crashing (tests/fuzz/regressions/<harness>/): each
must now give an outcome of its harness (accepted, or a tessel.errors type), never another
exception."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import HARNESSES, REGRESSIONS, load_input  # noqa: E402

FILES = sorted(p for p in REGRESSIONS.glob("*/*") if p.parent.name in HARNESSES)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_regression_input_is_handled(path: Path) -> None:
    label = HARNESSES[path.parent.name].run(load_input(path))
    assert label == "ok" or "Tessel" in label


def test_regressions_are_kept() -> None:
    assert FILES, "tests/fuzz/regressions/ holds the crashing inputs found so far"
