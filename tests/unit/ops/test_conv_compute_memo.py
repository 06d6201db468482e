"""conv_emit: a step keeps its tiles' CONV / DWCONV and REQUANT by what they read, so tiles
alike share them. Every tile of every candidate (both ring slots, both orders of building)
equals the tile a fresh step builds alone; a grouped conv's tiles differ by their chunk."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_conv_codegen import conv_graph

from tessel.arch import load_preset
from tessel.isa import Opcode
from tessel.ops import conv_emit, conv_geometry
from tessel.ops.context import CodegenContext, ConstPool
from tessel.ops.step import Slots
from tessel.schedule.plan import estimation_context

_CASES = [dict(h=20, w=20, c=16, cout=40, k=1, p=0),  # pointwise
          dict(h=19, w=17, c=24, cout=24, k=3, s=2, groups=24),  # depthwise
          dict(h=14, w=14, c=16, cout=32, k=3, groups=4),  # grouped
          dict(h=23, w=9, c=8, cout=24, k=3, p=1)]


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("case", _CASES)
def test_tiles_with_shared_computes_equal_tiles_built_alone(preset, case):
    arch = load_preset(preset)
    g = conv_graph(np.random.default_rng(7), **case)
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    cands = conv_emit.candidates(node, est_ctx)
    assert cands
    checked = 0
    for m in cands[:12]:
        shared = conv_emit.step(node, m, est_ctx)
        slots = [Slots(i, i, i, i) for i in (0, 1)]
        keys = [(j, t, s) for j in range(shared.group_count) for s in slots
                for t in range(shared.group_fn(j, 0).tile_count)]
        for order in (keys, keys[::-1]):
            shared = conv_emit.step(node, m, est_ctx)
            for j, t, s in order:
                alone = conv_emit.step(node, m, est_ctx).tile_fn(j, t, s)
                assert shared.tile_fn(j, t, s) == alone, (str(m), j, t, s)
                checked += 1
    assert checked
    if case.get("groups", 1) not in (1, case["c"]):
        # a grouped conv's CONVs read their chunk's input channels: tiles of other chunks
        # must not be served each other's
        m = next(m for m in cands if len(conv_emit._chunk_list(conv_geometry.geometry(node, est_ctx),
                                                              m)) > 1 and not m.order.input_resident)
        w = conv_emit.step(node, m, est_ctx)
        a, b = (w.tile_fn(j, 0, Slots()) for j in (0, 1))
        assert _conv_inputs(a) != _conv_inputs(b)


def _conv_inputs(tile) -> list[int]:
    return [i.in_addr for i in itertools.chain(tile.matrix, tile.vector) if i.opcode is Opcode.CONV]
