"""What one NPU step is made of, independent of the op: groups of tiles, each tile a few
instructions per engine, plus the buffers (rings) it needs; its analytical estimate is
tessel.schedule.estimate.

Every op emitter (tessel.ops.*_emit) describes its step through `StepWork`; the emit
stage turns it into token-ordered queues, the cost model into cycles. Both use the same
instructions, so the estimate and the program cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from tessel.isa import Instruction


@dataclass(frozen=True)
class Slots:
    """Ring slot indices a tile's instructions should address (estimates: `top_slots`)."""

    inp: int = 0
    acc: int = 0
    out: int = 0
    group: int = 0


@dataclass
class TileWork:
    """Instructions of one tile, per stage."""

    loads: list[Instruction] = field(default_factory=list)  # DMA_IN
    matrix: list[Instruction] = field(default_factory=list)
    vector: list[Instruction] = field(default_factory=list)
    stores: list[Instruction] = field(default_factory=list)  # DMA_OUT
    # constants staged for a later step (schedule/staging.py): (DMA_LOAD from the weights
    # memory into a bounce slot, DMA_STORE of that slot to the activation memory), passed
    # through the step's copy ring (`StepShape.copy_depth`)
    copies: list[tuple[Instruction, Instruction]] = field(default_factory=list)


@dataclass
class GroupWork:
    """A group of tiles sharing resident data loaded once (weights for MATRIX, parameters or
    tables for VECTOR), e.g. one output-channel chunk of a convolution."""

    weight_loads: list[Instruction]  # DMA_IN, consumed by MATRIX
    param_loads: list[Instruction]  # DMA_IN, consumed by VECTOR
    vector_setup: list[Instruction]  # VECTOR, once per group (e.g. LUT_LOAD)
    tile_count: int


@dataclass(frozen=True)
class StepShape:
    """Ring depths of a step (1 = no double buffering)."""

    uses_matrix: bool
    in_depth: int = 2
    acc_depth: int = 2
    out_depth: int = 2
    group_depth: int = 2
    copy_depth: int = 0  # bounce slots of the DMA_IN -> DMA_OUT copy ring (0: no copies)
    copy_early: bool = False  # DMA_OUT stores a tile's copies before its outputs (else after)


def top_slots(shape: StepShape) -> Slots:
    """The highest slot of each ring: the tiles the working-set and hull questions read
    (`SramPlan` lays a ring's slots out upwards), and the ones the estimate builds (costs do
    not depend on addresses), so a memoized step builds them once for all of these."""
    return Slots(inp=shape.in_depth - 1, acc=shape.acc_depth - 1, out=shape.out_depth - 1,
                 group=shape.group_depth - 1)


@dataclass
class StepWork:
    """Everything one step does: `group_fn(g, slot)` gives group g's resident loads when they
    go to group slot `slot`; `tile_fn(g, t, slots)` gives tile t of group g."""

    shape: StepShape
    group_count: int
    group_fn: Callable[[int, int], GroupWork]
    tile_fn: Callable[[int, int, Slots], TileWork]
    # optional: (group, tile) -> a key equal for tiles whose instructions cost the same (the
    # estimate then builds one tile per key instead of every tile)
    tile_key: Callable[[int, int], Hashable] | None = None
    # optional: a token of the unit and context the step was built for
    # (`CodegenContext.cost_scope`); tiles of works with the same scope and an equal tile_key
    # cost the same, so an estimate's CostCache shares their costs between such works (the
    # mapping search's candidates of one step). None: tile keys hold within this work only
    cost_scope: Hashable | None = None


def memoized(work: StepWork) -> StepWork:
    """`work` building each group (per slot) and each tile (per slots) once: the schedule
    stage asks for a step's instructions several times (its estimate, the residency planner's
    working sets and rewrites, the prefetch planner's hull). The lists returned are shared:
    callers must not mutate them (none does: they build new lists)."""
    groups: dict[tuple[int, int], GroupWork] = {}
    tiles: dict[tuple[int, int, Slots], TileWork] = {}

    def group_fn(g: int, slot: int) -> GroupWork:
        key = (g, slot)
        gr = groups.get(key)
        if gr is None:
            gr = groups[key] = work.group_fn(g, slot)
        return gr

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        key = (g, t, s)
        tile = tiles.get(key)
        if tile is None:
            tile = tiles[key] = work.tile_fn(g, t, s)
        return tile

    return StepWork(work.shape, work.group_count, group_fn, tile_fn, work.tile_key,
                    work.cost_scope)
