"""The Schedule: the value the schedule stage (`tessel.schedule.plan`) produces and the emit stage
(`tessel.emit.program.emit`) emits from, once.

A `ScheduledStep` is one NPU step: its unit (a node, or a fused group of nodes), the emitter's
mapping, the cost model's estimate (and so its bound), its region, the resident tensors it
reads / writes on chip, and its work (`StepWork`: the step's program, bound to where every
tensor lives; the emit stage turns it into instructions). The `Schedule` adds where every tensor lives
(DRAM arena offsets, on-chip ranges of resident tensors) and the constant layout. The types
live here, below the planner, because the emit stage reads them; docs/backend.md ("Schedule").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tessel.arch import NpuArch
from tessel.ir import Graph, Node
from tessel.isa import Instruction
from tessel.ops.context import DramTensor
from tessel.ops.fused_geometry import FusedChain
from tessel.ops.step import StepWork
from tessel.schedule.estimate import Estimate
from tessel.schedule.events import EventTally
from tessel.schedule.resident_rewrite import Resident

Unit = Node | FusedChain  # what one step computes: a node, or a fused group run as one step


def unit_nodes(unit: Unit) -> tuple[Node, ...]:
    """The IR nodes of a step, in order (several when fused)."""
    return unit.nodes if isinstance(unit, FusedChain) else (unit,)


@dataclass(frozen=True)
class ScheduledStep:
    unit: Unit
    mapping: Any  # the emitter's mapping (a frozen dataclass; str() reads well)
    estimate: Estimate  # of the step as emitted (residency included)
    region: int  # index of its NPU region
    work: StepWork  # the step's program, bound to the placement of its Schedule
    residents: tuple[Resident, ...] = ()  # tensors it reads / writes on chip
    prefetched: bool = False  # its first group's loads are issued by the previous step
    prefetch: tuple[Instruction, ...] = ()  # the next step's first-group loads it issues
    # its instructions counted by cost key, for its energy events (None: count `work`'s)
    tally: EventTally | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.unit.name

    @property
    def nodes(self) -> tuple[Node, ...]:
        return unit_nodes(self.unit)

    @property
    def op(self) -> str:
        """The op names, '+'-joined for a fused step ('qconv2d+qconv2d')."""
        return "+".join(n.op.value for n in self.nodes)


@dataclass(frozen=True)
class ConstantLayout:
    """The constant blob (weights pre-tiled in read order, parameters, tables) and where it is:
    `memory` (the weights memory) from address 0; `data` are the constants that data-movement
    ops read like activations (ViT's class token), placed first."""

    memory: int
    blob: bytes
    data: Mapping[str, DramTensor]


@dataclass(frozen=True)
class Schedule:
    """Everything the emit stage needs to emit the NPU program of `graph`, and what estimate, advise
    and explore read instead of compiling."""

    arch: NpuArch
    graph: Graph
    steps: tuple[ScheduledStep, ...]
    region_count: int
    inputs: tuple[str, ...]  # the program's inputs / outputs (the runtime writes / reads them)
    outputs: tuple[str, ...]
    tensors: Mapping[str, DramTensor]  # every activation's (and data constant's) DRAM place
    arena_peak: int  # bytes of the activation arena actually needed
    arena_naive: int  # every tensor in its own range
    constants: ConstantLayout
    spilled: Mapping[str, str] | None = None  # residency on: candidate kept in DRAM -> why

    def region_steps(self, region: int) -> tuple[ScheduledStep, ...]:
        return tuple(s for s in self.steps if s.region == region)

    @property
    def cycles(self) -> int:
        """The estimated NPU cycles: the steps' estimates added up."""
        return sum(s.estimate.cycles for s in self.steps)
