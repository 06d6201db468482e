"""`plan` skips its second, chain-free plan when that plan's `compute_floor` (each step's busier
compute engine in the search's estimates) is not below the first plan's cycles. The floor
must stay below what residency and prefetch make of those steps, step by step, or the skip
would drop a faster schedule; and a skipped plan must leave the schedule unchanged."""

from __future__ import annotations

import pytest

from tessel.analysis.explore import quantised_graphs
from tessel.analysis.explore_space import build_arch
from tessel.arch import load_target
from tessel.isa import Engine
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.schedule import plan as program


def _parts(model: str):
    graph = legalize(quantised_graphs([model], 2, None)[model])
    return graph, partition(graph)


def _schedule(graph, part, arch):
    return program.plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                        region_sizes=[len(r.nodes) for r in part.regions] or None,
                        on_chip_residency=True)


@pytest.mark.parametrize("model,target", [("ds_cnn", "tnpu-s"), ("ds_cnn", "u55-256"),
                                          ("digits_cnn", "tnpu-m"), ("resnet18", "tnpu-s")])
def test_each_step_keeps_its_compute_floor_under_residency_and_prefetch(model, target,
                                                                        monkeypatch):
    graph, part = _parts(model)
    arch = load_target(target)
    searched = []
    real = program.plan_units

    def keep(*a, **k):
        out = real(*a, **k)
        if not k.get("chains", True):
            searched.extend(out)
        return out

    monkeypatch.setattr(program, "plan_units", keep)
    alone = program._plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                          [len(r.nodes) for r in part.regions] or None, True, True, None,
                          False, None)
    assert alone is not None and len(alone.steps) == len(searched)
    assert any(s.residents or s.prefetched or s.prefetch for s in alone.steps)
    for step, (_, _, est) in zip(alone.steps, searched, strict=True):
        floor = max(est.busy.get(Engine.MATRIX, 0), est.busy.get(Engine.VECTOR, 0))
        assert floor <= step.estimate.cycles, step.name  # (0: a DMA-only step)
    assert 0 < program.compute_floor(e for _, _, e in searched) <= alone.cycles


def test_a_skipped_plan_leaves_the_schedule_unchanged(monkeypatch):
    # a small array: ds_cnn's steps are compute-bound, so the chain-free plan is skipped
    graph, part = _parts("ds_cnn")
    arch = build_arch(load_target("tnpu-s"), {"matrix.rows": 8, "matrix.cols": 8,
                                              "vector.lanes": 16})
    skipped = []
    real = program._plan

    def watch(*a, **k):
        out = real(*a, **k)
        skipped.append(out is None)
        return out

    monkeypatch.setattr(program, "_plan", watch)
    pruned = _schedule(graph, part, arch)
    assert skipped == [False, True]
    monkeypatch.setattr(program, "compute_floor", lambda estimates: -1)  # never skips
    skipped.clear()
    full = _schedule(graph, part, arch)
    assert skipped == [False, False]
    assert [(s.name, str(s.mapping), s.estimate, s.residents) for s in pruned.steps] == \
        [(s.name, str(s.mapping), s.estimate, s.residents) for s in full.steps]
