"""The residency planner ranks candidate tensors on keyed estimates (`rewrite_step(keyed=True)`:
one rewritten tile per tile key); they must equal the estimates with every tile rewritten. A
tile the keys skipped that cannot be rewritten keeps its tensor in DRAM (the plan is made
again) instead of failing the compile."""

from __future__ import annotations

import numpy as np
import pytest
from test_resident_codegen import chain

from compile_region import compile_region
from tessel.arch import load_preset
from tessel.ir import Op
from tessel.quant.golden import run_golden
from tessel.schedule import residency
from tessel.schedule import resident_rewrite as resident
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import plan
from tessel.sim import simulate


def _nodes(g):
    return [n for n in g.nodes if n.op is Op.QCONV2D]


@pytest.mark.parametrize("preset,sram,partial", [
    ("tnpu-s", None, False), ("u65-512", None, False), ("u55-256", None, False),
    ("tnpu-s", 16384, True), ("tnpu-s", 32768, True)])  # a prefix on chip: tiles differ
def test_keyed_estimates_equal_every_tile_rewritten(preset, sram, partial, monkeypatch):
    rng = np.random.default_rng(5)
    arch = load_preset(preset)
    if sram is not None:
        arch = arch.with_param("onchip.sram_bytes", sram)
    g = chain(rng, 24, 20, 8, 32, 16)  # several row tiles per step, alike but for the edges
    asked = []
    real = resident.rewrite_step

    def spy(work, res, *, keyed=False):
        if keyed:
            asked.append((work, tuple(res)))
        return real(work, res, keyed=keyed)

    monkeypatch.setattr(residency, "rewrite_step", spy)  # (the planner without a search cache)
    monkeypatch.setattr(resident, "rewrite_step", spy)  # (its shared programs: schedule/plan.py)
    nodes = _nodes(g)
    schedule = plan(g, nodes, ["x"], [nodes[-1].name], arch, on_chip_residency=True)
    assert any(s.residents for s in schedule.steps)
    assert any(r.partial for s in schedule.steps for r in s.residents) == partial
    assert asked and all(w.tile_key is not None for w, _ in asked)
    for work, res in asked:
        keyed = real(work, res, keyed=True)
        assert keyed.tile_key is not None
        assert estimate_step(keyed, arch) == estimate_step(real(work, res), arch)


def test_a_tile_the_keys_skipped_that_fails_spills_its_tensor(monkeypatch):
    """Every tile but the first of each group refuses the rewrite when all tiles are rewritten
    (never in the keyed estimates): the planner's validation finds it, the tensor stays in
    DRAM with the reason, and the program is the one without residency, bit-exact."""
    rng = np.random.default_rng(6)
    arch = load_preset("tnpu-s")
    g = chain(rng, 24, 20, 8, 32, 16)
    real = resident.rewrite_step

    def fragile(work, res, *, keyed=False):
        w = real(work, res, keyed=keyed)
        if keyed or not res:
            return w

        def tile_fn(gi, t, s):
            if t > 0:
                raise resident.NotResidentCapable("refused by the test")
            return w.tile_fn(gi, t, s)

        return type(w)(w.shape, w.group_count, w.group_fn, tile_fn, w.tile_key)

    monkeypatch.setattr(resident, "rewrite_step", fragile)
    nodes = _nodes(g)
    out = nodes[-1].name
    schedule = plan(g, nodes, ["x"], [out], arch, on_chip_residency=True)
    assert not any(s.residents for s in schedule.steps)
    assert any("refused by the test" in why for why in schedule.spilled.values())
    x = rng.integers(-128, 128, (1, 24, 20, 8)).astype(np.int8)
    on = compile_region(g, nodes, ["x"], [out], arch, {}, residency=True)
    off = compile_region(g, nodes, ["x"], [out], arch, {}, residency=False)
    assert on.program == off.program
    np.testing.assert_array_equal(simulate(on.program, arch, {"x": x}).outputs[out],
                                  run_golden(g, {"x": x})[0])
