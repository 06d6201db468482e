"""`step_events` counts each tile key's events once and multiplies them by its tiles:
on every step of zoo schedules (with residency, prefetch and cascaded chains) it equals the
events added up instruction by instruction over every group and every tile."""

from __future__ import annotations

import pytest

from tessel.analysis.explore import quantised_graphs
from tessel.arch import load_target
from tessel.isa import Engine
from tessel.isa.costs import Events, instruction_cost
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.ops.step import top_slots
from tessel.schedule import plan as program
from tessel.schedule.events import step_events


def _every_instruction(work, arch) -> Events:
    total = Events()
    for g in range(work.group_count):
        group = work.group_fn(g, 0)
        for ins in group.weight_loads + group.param_loads:
            total = total + instruction_cost(ins, arch).events
        for ins in group.vector_setup:
            total = total + instruction_cost(ins, arch, Engine.VECTOR).events
        for t in range(group.tile_count):
            tile = work.tile_fn(g, t, top_slots(work.shape))
            for ins in tile.loads + tile.matrix + tile.stores + [
                    i for pair in tile.copies for i in pair]:
                total = total + instruction_cost(ins, arch).events
            for ins in tile.vector:
                total = total + instruction_cost(ins, arch, Engine.VECTOR).events
    return total


@pytest.mark.parametrize("model,target", [("ds_cnn", "tnpu-s"), ("mobilenet_v2", "tnpu-xs")])
def test_step_events_equal_every_instruction(model, target):
    graph = legalize(quantised_graphs([model], 2, None)[model])
    arch = load_target(target)
    part = partition(graph)
    schedule = program.plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch,
                            region_sizes=[len(r.nodes) for r in part.regions] or None,
                            on_chip_residency=True)
    repeated = 0
    for step in schedule.steps:
        assert step_events(step.work, arch, step.tally) == _every_instruction(step.work, arch), \
            step.name
        assert step_events(step.work, arch) == _every_instruction(step.work, arch), step.name
        repeated += step.work.group_count > 1
    assert len(schedule.steps) > 10 and repeated > 5
