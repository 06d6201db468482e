"""`plan` estimates every mapping search, and the residency and prefetch estimates, through one
analytical cost model (one CostCache of tile ops and program timings): the schedule is the one
planned with a fresh model (and cache) per search."""

from __future__ import annotations

import pytest

from tessel.analysis.explore import quantised_graphs
from tessel.arch import load_target
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.schedule import estimate as step_estimate
from tessel.schedule import plan as program
from tessel.schedule.cost_model import AnalyticalCostModel


def _schedule(graph, arch):
    graph = legalize(graph)
    part = partition(graph)
    return program.plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                        region_sizes=[len(r.nodes) for r in part.regions] or None,
                        on_chip_residency=True)


def _figures(schedule) -> list:
    return [(s.name, str(s.mapping), s.estimate, s.prefetched, s.prefetch, s.residents)
            for s in schedule.steps] + [schedule.cycles]


@pytest.mark.parametrize("model,target", [("ds_cnn", "u55-256"), ("ds_cnn", "tnpu-s"),
                                          ("digits_cnn", "tnpu-m")])
def test_one_shared_model_plans_what_fresh_models_plan(model, target, monkeypatch):
    graph = quantised_graphs([model], 2, None)[model]
    arch = load_target(target)
    made = []
    real_init = step_estimate.CostCache.__init__

    def counting_init(self, a):
        made.append(self)
        real_init(self, a)

    with monkeypatch.context() as mp:
        mp.setattr(step_estimate.CostCache, "__init__", counting_init)
        shared = _schedule(graph, arch)
    assert len(made) == 1  # the plan's one model: every search and the residency estimates

    real = program._choose

    def fresh(node, ctx, *, required=True, cost_model=None, input_resident_orders=True):
        return real(node, ctx, required=required, cost_model=AnalyticalCostModel(),
                    input_resident_orders=input_resident_orders)

    with monkeypatch.context() as mp:
        mp.setattr(program, "_choose", fresh)
        alone = _schedule(graph, arch)
    assert _figures(shared) == _figures(alone)
