"""A few seeded random models with the weight features drawn (`fuzz_models.py --weights`,
weight_features.py): 2:4 masks and prune_2_4, int4 weights by default and per layer, int16
element-wise ops (by the integer generator, and by QuantConfig sets and overrides), targets
with the weight decoder and / or 2:4 sparsity. Every output equals the golden model bit for
bit (integer models: the C runtime on the C NPU model too, from the same binary), no model is
refused, and the seeds are chosen so that their binaries together hold every feature: each is
asserted present, so a generator or compiler change that drops one fails here. The broad
sweep: `make fuzz-weights` (docs/reliability.md)."""

from __future__ import annotations

import collections

from fuzz_models import one_int, one_mixed

from tessel.arch import list_presets
from tessel.runtime.cengine import available

PRESETS = list_presets()
C_RAN = set() if available() else {"C runtime: ran"}  # no C compiler: the C runtime is skipped

INT_SEEDS = (56, 134, 68, 1)
INT_FEATURES = {"CONV I4", "CONV I8_2_4", "CONV I4_2_4", "2:4 linear as conv",
                "DMA_LOAD_W mode 1", "DMA_LOAD_W mode 2", "DMA_LOAD_W mode 3", "int16 ELTWISE",
                "int16 qadd on the NPU", "int16 qsub on the NPU",
                "int16 qmul on the NPU"} | C_RAN
MIXED_SEEDS = (169, 183, 108)
MIXED_FEATURES = {"CONV I4", "CONV I8_2_4", "CONV I4_2_4", "2:4 linear as conv",
                  "DMA_LOAD_W mode 1", "DMA_LOAD_W mode 2", "DMA_LOAD_W mode 3",
                  "int16 qadd on the NPU", "int16 qmul on the NPU",
                  "host ops between NPU regions", "rank-2 input", "rank-3 input",
                  "rank-4 input"} | C_RAN


def test_integer_models_with_weight_features_bit_exact() -> None:
    seen: collections.Counter = collections.Counter()
    for seed in INT_SEEDS:
        outcome = one_int(seed, PRESETS, None, weights=True)
        assert outcome.status == "ok", f"seed {seed}: {outcome.status}"
        seen.update(outcome.features)
    assert INT_FEATURES <= set(seen), INT_FEATURES - set(seen)


def test_mixed_models_with_weight_features_bit_exact() -> None:
    seen: collections.Counter = collections.Counter()
    for seed in MIXED_SEEDS:
        outcome = one_mixed(seed, PRESETS, weights=True)
        assert outcome.status == "ok", f"seed {seed}: {outcome.status}"
        seen.update(outcome.features)
    assert MIXED_FEATURES <= set(seen), MIXED_FEATURES - set(seen)
