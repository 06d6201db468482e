"""The short seeded fuzz run of the normal suite: each harness of tests/fuzz/harness.py for a
few seconds, its structured mutations drawn by Hypothesis (derandomised, so the run is the same
every time). The long run is ``make fuzz`` (tests/fuzz/run_fuzz.py)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import HARNESSES  # noqa: E402

EXAMPLES = {"ir": 600, "asm": 300, "tsl": 60, "onnx": 120, "tflite": 200, "tosa": 200, "pt2": 25}
HANG_S = 5.0


def _alarm(signum: int, frame: object) -> None:
    raise TimeoutError(f"a fuzz case ran longer than {HANG_S} s (hang)")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_short_fuzz_run_raises_only_tessel_errors(name: str) -> None:
    harness = HARNESSES[name]
    seeds = harness.seeds()
    outcomes: dict[str, int] = {}

    @settings(max_examples=EXAMPLES[name], derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(seeds) - 1), st.randoms(use_true_random=False))
    def case(index: int, rng) -> None:
        value = harness.mutate(rng, seeds[index])
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            label = harness.run(value)  # anything but a Tessel error propagates: a finding
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        outcomes[label] = outcomes.get(label, 0) + 1

    case()
    # the mutations reach both accepted inputs and the checks behind them
    assert len(outcomes) >= 2, outcomes
