"""The mapping search's estimates share tile costs between the candidates of one step
(`StepWork.cost_scope`, `CostCache.tiles`): a tile key must then mean the same costs in every
candidate of the unit, not only within one work. On every candidate of every step the plan
asks about (zoo models), sampled and full, estimates through one shared cache equal those
made alone, whatever the order the candidates come in."""

from __future__ import annotations

import pytest

from tessel.analysis.estimate import estimate_graph
from tessel.analysis.explore import quantised_graphs
from tessel.arch import load_target
from tessel.schedule import plan as program
from tessel.schedule import search
from tessel.schedule.estimate import CostCache, estimate_step


@pytest.fixture(scope="module")
def graphs():
    return {}


def _graph(graphs, name):
    if name not in graphs:  # (2 calibration samples: costs depend on shapes)
        graphs[name] = quantised_graphs([name], 2, None)[name]
    return graphs[name]


def _check(graph, arch, monkeypatch) -> tuple[int, int]:
    """(candidates checked, tiles the shared caches reused)."""
    checked, reused = 0, 0
    real = program._choose
    seen = set()  # the steps' signatures (repeated blocks are checked once)

    def spy(node, ctx, *, required=True, cost_model=None, input_resident_orders=True):
        nonlocal checked, reused
        em = program._emitter(node)
        est_ctx = program.estimation_context(ctx)
        sig = search.unit_signature(node, est_ctx)
        cands = [] if sig in seen else list(em.candidates(node, est_ctx))
        seen.add(sig)
        for order in (cands, cands[::-1]):
            shared = CostCache(ctx.arch)
            alone_tiles = 0
            for m in order:
                for sample in (search.SAMPLE_TILES, None):
                    work = em.step(node, m, est_ctx)
                    alone = CostCache(ctx.arch)
                    want = estimate_step(work, ctx.arch, sample=sample, cache=alone)
                    got = estimate_step(em.step(node, m, est_ctx), ctx.arch, sample=sample,
                                        cache=shared)
                    assert got == want, (str(node), str(m), sample)
                    alone_tiles += len(alone.tiles)
                    checked += 1
            reused += alone_tiles - len(shared.tiles)
        return real(node, ctx, required=required, cost_model=cost_model,
                    input_resident_orders=input_resident_orders)

    with monkeypatch.context() as mp:
        mp.setattr(program, "_choose", spy)
        estimate_graph(graph, arch)
    return checked, reused


@pytest.mark.parametrize("model,target", [
    ("ds_cnn", "u55-256"), ("ds_cnn", "u65-512"), ("resnet18", "tnpu-s"),
    pytest.param("mobilenet_v2", "tnpu-s", marks=pytest.mark.slow),
    pytest.param("mobilenet_v2", "u65-512", marks=pytest.mark.slow)])
def test_shared_tile_costs_equal_estimates_alone(graphs, model, target, monkeypatch):
    checked, reused = _check(_graph(graphs, model), load_target(target), monkeypatch)
    assert checked > 100
    assert reused > 0  # the candidates did share tiles
