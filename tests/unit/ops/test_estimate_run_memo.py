"""CostCache.run: the timing of a step's program is memoised by its shape and its terms' cycles
(and the DMA channels and off-chip latencies, all the timing reads of the arch; one memo for every
CostCache); an estimate served from the memo equals the one that runs the program, and its
busy map is its own."""

from __future__ import annotations

import numpy as np
import pytest
from test_eltwise_codegen import binary_graph

from tessel.arch import load_preset
from tessel.ir import Op
from tessel.isa.costs import instruction_cost
from tessel.ops import eltwise_emit
from tessel.ops.context import CodegenContext, ConstPool
from tessel.schedule import estimate as step_estimate
from tessel.schedule.estimate import CostCache, StepProgram, estimate_step
from tessel.schedule.plan import estimation_context


def _values(prog, arch) -> list[int]:
    """The cycles of the program's terms, each instruction's cost computed afresh."""
    return [sum(instruction_cost(i, arch, t.engine).cycles for i in t.instrs)
            for t in prog.terms]


def _time(prog, vals, lats, channels):
    return step_estimate._time(prog, vals, lats, channels, compiled=False)


def _lats(arch) -> list[int]:
    return [m.latency_cycles for m in arch.offchip]


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
def test_memoised_run_equals_a_fresh_run(preset, monkeypatch):
    monkeypatch.setattr(step_estimate, "_RUNS", {})
    arch = load_preset(preset)
    g = binary_graph(np.random.default_rng(5), Op.QADD, (1, 28, 28, 40), (1, 28, 28, 40))
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    cands = eltwise_emit.candidates(node, est_ctx)
    assert len(cands) > 1
    shared = CostCache(arch)
    for m in cands:
        work = eltwise_emit.step(node, m, est_ctx)
        for sample in (None, 2):
            first = estimate_step(work, arch, sample=sample, cache=shared)
            again = estimate_step(work, arch, sample=sample, cache=shared)  # from the memo
            alone = estimate_step(work, arch, sample=sample)  # a fresh cache
            assert first == again == alone, (str(m), sample)
            assert again.busy is not first.busy
            prog = StepProgram(work, sample)
            assert shared.run(prog) == _time(prog, _values(prog, arch), _lats(arch),
                                            arch.dma_channels)
    assert 0 < len(shared._runs) <= 2 * len(cands)


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(step_estimate, "_RUNS", {})
    arch = load_preset("tnpu-s")
    g = binary_graph(np.random.default_rng(5), Op.QADD, (1, 28, 28, 40), (1, 28, 28, 40))
    node = g.nodes[-1]
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    est_ctx = estimation_context(ctx)
    monkeypatch.setattr(CostCache, "RUNS", 1)
    cache = CostCache(arch)
    for m in eltwise_emit.candidates(node, est_ctx)[:3]:
        estimate_step(eltwise_emit.step(node, m, est_ctx), arch, cache=cache)
        assert len(cache._runs) == 1


@pytest.mark.parametrize("param,value,shared", [
    ("vector.lanes", 8, False), ("matrix.rows", 8, True), ("clock_hz", 10**8, True),
    ("offchip.lpddr.latency_cycles", 7, False), ("dma.channels", 1, False)])
def test_arches_alike_in_what_run_reads_share_timings(param, value, shared, monkeypatch):
    # one arch-free program timed on two arches: the second is served the first's timing only if
    # the timing would time it alike (the same term cycles, DMA channels and latencies)
    monkeypatch.setattr(step_estimate, "_RUNS", {})
    a = load_preset("tnpu-s")
    b = a.with_param(param, value)
    g = binary_graph(np.random.default_rng(5), Op.QADD, (1, 28, 28, 40), (1, 28, 28, 40))
    node = g.nodes[-1]
    wmem, amem = (a.memory_index(n) for n in (a.weights_memory, a.activations_memory))
    est_ctx = estimation_context(CodegenContext(a, g, {}, ConstPool(wmem), amem))
    work = eltwise_emit.step(node, eltwise_emit.candidates(node, est_ctx)[0], est_ctx)
    prog = StepProgram(work, None)
    # (a transfer's cycles include its memory's latency)
    alike = param not in ("vector.lanes", "offchip.lpddr.latency_cycles")
    assert (_values(prog, a) == _values(prog, b)) is alike
    assert CostCache(a).run(prog) == _time(prog, _values(prog, a), _lats(a), a.dma_channels)
    assert CostCache(b).run(prog) == _time(prog, _values(prog, b), _lats(b), b.dma_channels)
    assert len(step_estimate._RUNS) == (1 if shared else 2)
