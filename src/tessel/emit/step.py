"""Turn a step's work (tessel.ops.step.StepWork) into token-ordered engine queues.

Rings (tessel.emit.streams): group data DMA_IN -> MATRIX (weights) and DMA_IN -> VECTOR
(parameters, tables); tile inputs DMA_IN -> first compute engine; accumulators MATRIX ->
VECTOR; outputs VECTOR -> DMA_OUT.

Prefetch (schedule/prefetch.py): a step whose first group was loaded by the previous step
(`prefetched`) emits no loads for group 0 but keeps its ring tokens; a step given the next
step's group-0 loads (`prefetch`) issues them on DMA_IN after its last tile's loads, before
the drains, and its end waits for them to land (`Streams.end_step`). When a step loads its
first group itself, DMA_IN issues the first tile's loads before signalling the group ready.

Staging copies (schedule/staging.py): a tile's copies pass through a DMA_IN -> DMA_OUT ring
(`StepShape.copy_depth` bounce slots): DMA_IN loads each after the tile's input is published
and publishes it with the next tile's input (a DMA SIGNAL waits for every transfer in flight:
the copy runs while DMA_IN waits for a free input slot and loads the next input), DMA_OUT
stores it after the tile's outputs, or before them (`StepShape.copy_early`: its slot is free
again sooner, so one slot of a whole SRAM gap carries as much per tile as two of half of it).
"""

from __future__ import annotations

from collections.abc import Sequence

from tessel.emit.streams import Ring, Streams
from tessel.isa import Engine, Instruction
from tessel.ops.step import Slots, StepWork


def emit_step(work: StepWork, streams: Streams, *, prefetched: bool = False,
              prefetch: Sequence[Instruction] = ()) -> None:
    shape = work.shape
    first = Engine.MATRIX if shape.uses_matrix else Engine.VECTOR
    streams.begin_step()
    gw = streams.ring(Engine.DMA_IN, Engine.MATRIX, shape.group_depth) if shape.uses_matrix \
        else None
    gp = streams.ring(Engine.DMA_IN, Engine.VECTOR, shape.group_depth)
    inp = streams.ring(Engine.DMA_IN, first, shape.in_depth)
    acc = streams.ring(Engine.MATRIX, Engine.VECTOR, shape.acc_depth) if shape.uses_matrix \
        else None
    out = streams.ring(Engine.VECTOR, Engine.DMA_OUT, shape.out_depth)
    cp = streams.ring(Engine.DMA_IN, Engine.DMA_OUT, shape.copy_depth) if shape.copy_depth \
        else None
    q_in, q_mx, q_vec, q_out = (streams.queues[e] for e in (Engine.DMA_IN, Engine.MATRIX,
                                                             Engine.VECTOR, Engine.DMA_OUT))
    unpublished = 0  # copies loaded but not yet published
    for g in range(work.group_count):
        gslot = gp.acquire()
        if gw is not None:
            gw.acquire()
        group = work.group_fn(g, gslot)
        loads = [] if prefetched and g == 0 else group.weight_loads + group.param_loads
        q_in.extend(loads)
        # a step's first group: its first tile's loads are issued before the group's "ready"
        # tokens (a DMA SIGNAL waits for every transfer in flight), so the two overlap
        defer = g == 0 and bool(loads) and group.tile_count > 0
        if not defer:
            _publish_group(gw, gp)
        if gw is not None:
            gw.consume()
        gp.consume()
        q_vec.extend(group.vector_setup)
        for t in range(group.tile_count):
            islot = inp.acquire()
            aslot = acc.slot_after_acquire() if acc is not None else 0
            oslot = out.slot_after_acquire()
            tile = work.tile_fn(g, t, Slots(inp=islot, acc=aslot, out=oslot, group=gslot))
            q_in.extend(tile.loads)
            if defer and t == 0:
                _publish_group(gw, gp)
            inp.publish()
            for _ in range(unpublished):  # the previous tile's copies: landed by now
                cp.publish()
            for load, _ in tile.copies:
                cp.acquire()
                q_in.append(load)
            unpublished = len(tile.copies)
            inp.consume()
            if acc is not None:
                acc.acquire()
                q_mx.extend(tile.matrix)
                inp.release()
                acc.publish()
                acc.consume()
            out.acquire()
            q_vec.extend(tile.vector)
            (acc if acc is not None else inp).release()
            out.publish()
            if shape.copy_early:
                _store_copies(cp, q_out, tile.copies)
            out.consume()
            q_out.extend(tile.stores)
            out.release()
            if not shape.copy_early:
                _store_copies(cp, q_out, tile.copies)
        if gw is not None:
            gw.release()
        gp.release()
    for _ in range(unpublished):
        cp.publish()
    streams.emit(Engine.DMA_IN, *prefetch)
    streams.end_step(prefetched=bool(prefetch))


def _store_copies(cp: Ring | None, q_out: list[Instruction],
                  copies: list[tuple[Instruction, Instruction]]) -> None:
    for _, store in copies:
        cp.consume()
        q_out.append(store)
        cp.release()


def _publish_group(gw: Ring | None, gp: Ring) -> None:
    if gw is not None:
        gw.publish()
    gp.publish()
