"""The backend of a set of NPU nodes without the partition (schedule, then emit), for tests that
compile one op or a few: `tessel.driver.compile_graph` partitions the whole graph first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessel.arch import NpuArch
from tessel.emit.program import RegionProgram, emit
from tessel.ir import Graph, Node
from tessel.runtime.profile import build_profile
from tessel.schedule.plan import plan


def compile_region(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
                   outputs: Sequence[str], arch: NpuArch, metadata: dict[str, Any],
                   units: list | None = None, region_sizes: Sequence[int] | None = None,
                   residency: bool = False, prefetch: bool = True) -> RegionProgram:
    """The program of the NPU nodes `nodes` of `graph` (see `tessel.schedule.plan.plan` for the
    arguments)."""
    schedule = plan(graph, nodes, inputs, outputs, arch, region_sizes=region_sizes,
                    on_chip_residency=residency, prefetch=prefetch, units=units)
    return emit(schedule, metadata)


def simulated_layer_cycles(rp: RegionProgram, arch: NpuArch) -> tuple[int, ...]:
    """Per step of `rp`, its simulated cycles as `tessel profile` counts a layer (from the step's
    first non-control instruction to its last instruction's end): what a step's estimate
    predicts. The program's total differs from it by the program's own start and end."""
    return tuple(layer.cycles for layer in build_profile(rp.program, arch).layers)


def assert_estimates_exact(rp: RegionProgram, arch: NpuArch) -> None:
    """Every step's estimate equals its simulated cycles: the estimate runs the step's program
    by the simulator's timing rules (docs/backend.md), so a single step is predicted exactly."""
    sim = simulated_layer_cycles(rp, arch)
    est = tuple(layer.estimate.cycles for layer in rp.layers)
    assert est == sim, [(lp.mapping, e, s) for lp, e, s in zip(rp.layers, est, sim, strict=True)
                        if e != s]
