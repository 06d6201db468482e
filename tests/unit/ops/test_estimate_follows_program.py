"""The estimate follows the program: estimate_step runs a step's queues and tokens by the
simulator's timing rules, with each off-chip port serving transfers first come, first served
(booking transfers first-fit in tile order would over-estimate DMA-bound steps by tens of
percent on u55-256). The simulator is the oracle: every mapping the search
considers is compiled alone, simulated, and compared with its full estimate."""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_codegen import conv_graph
from test_eltwise_codegen import binary_graph

from compile_region import compile_region, simulated_layer_cycles
from tessel.arch import load_preset
from tessel.ir import Op
from tessel.ops import conv_emit, eltwise_emit
from tessel.ops.context import CodegenContext, ConstPool
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import estimation_context
from tessel.sim import simulate


def _check_all(g, em, arch, feeds, pick=lambda m: True, limit=4):
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    mappings = [m for m in em.candidates(node, est_ctx) if pick(m)][:limit]
    assert mappings
    for m in mappings:
        est = estimate_step(em.step(node, m, est_ctx), arch)
        rp = compile_region(g, [node], list(feeds), [node.name], arch, {"model": "t"},
                            units=[(node, m, est)])
        simulate(rp.program, arch, feeds)  # runs: its data-independent traps hold
        assert (est.cycles,) == simulated_layer_cycles(rp, arch), str(m)


def test_resnet18_residual_add_on_u55():
    """ResNet-18's first residual add (1x56x56x64 + 1x56x56x64) on u55-256: two loads and a
    store per chunk on one LPDDR port, DMA-bound (first-fit booking would over-estimate it)."""
    arch = load_preset("u55-256")
    rng = np.random.default_rng(3)
    g = binary_graph(rng, Op.QADD, (1, 56, 56, 64), (1, 56, 56, 64))
    feeds = {v.name: rng.integers(-128, 128, v.type.shape).astype(np.int8) for v in g.inputs}
    _check_all(g, eltwise_emit, arch, feeds)


@pytest.mark.parametrize("double_buffer", [False, True])
def test_resnet_conv_on_u55(double_buffer):
    """A ResNet-like 3x3 conv (14x14x64 -> 128) on u55-256, weights streamed from its 1 B/cycle
    flash while activations go through LPDDR: single- and double-buffered mappings."""
    arch = load_preset("u55-256")
    rng = np.random.default_rng(4)
    g = conv_graph(rng, h=14, w=14, c=64, cout=128)
    x = rng.integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    _check_all(g, conv_emit, arch, {"x": x}, pick=lambda m: m.double_buffer == double_buffer)
