"""200 seeded random float models of mixed rank (random_mixed_models.py: ranks 2-4, 1-4 inputs,
host ops before, between and after NPU regions, inputs only a later host part reads, outputs
that are inputs), each quantised, compiled, written and read back as a .tsl and run: every
output equals the golden model bit for bit, and no model is refused. `make fuzz-models` runs
2,000 seeds of this family and of the integer one."""

from __future__ import annotations

import collections

import pytest
from fuzz_models import one_mixed

from tessel.arch import list_presets

COUNT = 200
CHUNKS = 8
PRESETS = list_presets()


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_mixed_models_bit_exact(chunk):
    features: collections.Counter = collections.Counter()
    seeds = range(chunk, COUNT, CHUNKS)
    for seed in seeds:
        outcome = one_mixed(seed, PRESETS)
        assert outcome.status == "ok", f"seed {seed}: {outcome.status}"
        features.update(outcome.features)
    n = len(seeds)
    # the generator builds the shapes it is for (seeds fixed: these counts are deterministic)
    assert features["host ops between NPU regions"] >= 0.3 * n, features
    assert features["host ops before the NPU"] and features["host ops after the NPU"]
    assert features["inputs only later host parts read"] and features["outputs that are inputs"]
    assert all(features[f"rank-{r} input"] for r in (2, 3, 4)), features
