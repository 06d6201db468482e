"""A slice of `make fuzz-users` (fuzz_user_models.py): one seeded model of each family that users
build and the other generators do not (a BERT layer with Hugging Face's eager padding mask
of float32's minimum, a recurrent layer unrolled, a vision chain of conv-transpose, dilated
depthwise, ceil_mode pooling, slices and pads), quantised, compiled, written and read back:
every output equals the golden model bit for bit, and the C runtime's the simulator's where it
loads the binary."""

from __future__ import annotations

import pytest
from fuzz_user_models import one

from tessel.arch import list_presets

pytest.importorskip("transformers")  # a declared test dependency (pyproject dev)

SEEDS = [pytest.param("transformer", 11, marks=pytest.mark.slow),  # torch.export of a BERT
         ("recurrent", 3), ("vision", 0)]


@pytest.mark.parametrize(("family", "seed"), SEEDS, ids=["transformer11", "recurrent3", "vision0"])
def test_user_model_bit_exact(family: str, seed: int) -> None:
    outcome = one(seed, family, list_presets())
    assert outcome.status == "ok", f"{family} seed {seed}: {outcome.status}"
