"""fused_geometry._per_chunk allocates a run of chunks of one width at once: the same addresses as
one SramPlan.sram per chunk, and where a region does not fit the same TesselCompileError."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from tessel.errors import TesselCompileError
from tessel.ops import fused_geometry as F
from tessel.ops.context import SramPlan, align


def _allocate(sram_bytes, used, chunks, per, at_once):
    """(addresses, bytes used after) or the error's message."""
    arch = SimpleNamespace(onchip=SimpleNamespace(sram_bytes=sram_bytes))  # what SramPlan reads
    plan = SramPlan(arch, "chain", sram_used=used)
    try:
        if at_once:
            addrs = F._per_chunk(plan, chunks, lambda cn: align(per * cn), "w")
        else:
            addrs = tuple(plan.sram(align(per * cn), "w") for _, cn in chunks)
    except TesselCompileError as e:
        return str(e)
    return addrs, plan.sram_used


@pytest.mark.parametrize("seed", range(4))
def test_per_chunk_allocates_as_one_region_per_chunk(seed):
    rng = random.Random(seed)
    for _ in range(500):
        c, chunk = rng.randint(1, 200), rng.randint(1, 64)
        chunks = [(c0, min(chunk, c - c0)) for c0 in range(0, c, chunk)]
        per, used = rng.randint(0, 300), rng.randint(0, 40)
        sram = rng.randint(0, 2 * per * c + 64)
        assert (_allocate(sram, used, chunks, per, True)
                == _allocate(sram, used, chunks, per, False))
