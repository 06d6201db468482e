"""CostCache.run: the timing of a step's program is memoised by its queues; an estimate
served from the memo equals the one that runs the program, and its busy map is its own."""

from __future__ import annotations

import numpy as np
import pytest
from test_eltwise_codegen import binary_graph

from tessel.arch import load_preset
from tessel.codegen import ops_eltwise
from tessel.codegen.context import CodegenContext, ConstPool
from tessel.codegen.step import CostCache, _run, _StepProgram, estimate_step
from tessel.ir import Op
from tessel.schedule.plan import estimation_context


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
def test_memoised_run_equals_a_fresh_run(preset):
    arch = load_preset(preset)
    g = binary_graph(np.random.default_rng(5), Op.QADD, (1, 28, 28, 40), (1, 28, 28, 40))
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    cands = ops_eltwise.candidates(node, est_ctx)
    assert len(cands) > 1
    shared = CostCache(arch)
    for m in cands:
        work = ops_eltwise.step(node, m, est_ctx)
        for sample in (None, 2):
            first = estimate_step(work, arch, sample=sample, cache=shared)
            again = estimate_step(work, arch, sample=sample, cache=shared)  # from the memo
            alone = estimate_step(work, arch, sample=sample)  # a fresh cache
            assert first == again == alone, (str(m), sample)
            assert again.busy is not first.busy
            prog = _StepProgram(work, CostCache(arch), sample)
            assert shared.run(prog) == _run(prog, arch)
    assert 0 < len(shared._runs) <= 2 * len(cands)


def test_the_memo_is_bounded(monkeypatch):
    arch = load_preset("tnpu-s")
    g = binary_graph(np.random.default_rng(5), Op.QADD, (1, 28, 28, 40), (1, 28, 28, 40))
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    monkeypatch.setattr(CostCache, "RUNS", 1)
    cache = CostCache(arch)
    for m in ops_eltwise.candidates(node, est_ctx)[:3]:
        estimate_step(ops_eltwise.step(node, m, est_ctx), arch, cache=cache)
        assert len(cache._runs) == 1
