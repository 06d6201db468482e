"""The estimate follows the program's group buffer slots (emit/step.py acquires a group's
slot before its weight loads): single-buffered mappings are not under-estimated."""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_codegen import conv_graph

from compile_region import compile_region, simulated_layer_cycles
from tessel.arch import load_preset
from tessel.ops import conv_emit
from tessel.ops.context import CodegenContext, ConstPool
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import estimation_context
from tessel.sim import simulate


@pytest.mark.parametrize("double_buffer", [False, True])
def test_single_buffered_groups_on_u55(double_buffer):
    arch = load_preset("u55-256")  # weights in 1 B/cycle flash: group loads dominate
    rng = np.random.default_rng(1)
    g = conv_graph(rng, h=8, w=8, c=32, cout=64)
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    m = conv_emit.ConvMapping(rows=8, chunk=16, double_buffer=double_buffer)
    est_ctx = estimation_context(ctx)
    est = estimate_step(conv_emit.step(node, m, est_ctx), arch)
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"},
                        units=[(node, m, est)])
    x = rng.integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    simulate(rp.program, arch, {"x": x})  # runs: its data-independent traps hold
    assert (est.cycles,) == simulated_layer_cycles(rp, arch)
