"""The backend of a set of NPU nodes without the partition (schedule, then emit), for tests that
compile one op or a few: `tessel.driver.compile_graph` partitions the whole graph first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessel.arch import NpuArch
from tessel.emit.program import RegionProgram, emit
from tessel.ir import Graph, Node
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
