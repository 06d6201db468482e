"""schedule/estimate_kernel.py's compiled timing loop equals schedule.estimate._run, the Python reference,
on every program the plan times for zoo models (the searches' candidates, residency and
prefetch estimates), with each preset's latencies and 1, 2 and 4 DMA channels; and CostCache
serves the compiled figures only where they are the reference's."""

from __future__ import annotations

import numpy as np
import pytest

from tessel.analysis.estimate import estimate_graph
from tessel.analysis.explore import quantised_graphs
from tessel.arch import load_target
from tessel.schedule import estimate as step_estimate
from tessel.schedule import estimate_kernel as step_kernel
from tessel.schedule.estimate import CostCache, StepProgram
from tessel.sim import jit


def _programs(model: str, preset: str) -> list[tuple[StepProgram, tuple[int, ...], tuple]]:
    """(program, its term cycles, the latencies) of every program timed estimating `model`."""
    got = []
    real = CostCache.run

    def spy(self, prog):
        got.append((prog, self.term_values(prog.terms), self.lats))
        return real(self, prog)

    graph = quantised_graphs([model], 2, None)[model]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CostCache, "run", spy)
        estimate_graph(graph, load_target(preset))
    return got


@pytest.mark.parametrize("form", list(jit.Form))
@pytest.mark.parametrize("model,preset", [
    ("ds_cnn", "tnpu-s"), ("ds_cnn", "u55-256"),
    pytest.param("mobilenet_v2", "tnpu-s", marks=pytest.mark.slow)])
def test_compiled_loop_equals_the_reference(model, preset, form):
    """Both compiled forms: the one built ahead of time (the loop declares its signature:
    tessel.sim.aot) and numba's just-in-time compile of the same source."""
    loop = step_kernel.run if form is jit.Form.AHEAD_OF_TIME else jit.Kernel(step_kernel.run.py)
    kernel = loop.compiled  # (a Kernel without a signature: just in time)
    assert loop.form is form
    progs = _programs(model, preset)
    assert len(progs) > 50
    seen = set()
    for prog, vals, lats in progs:
        if (prog.shape_id, vals, lats) in seen:
            continue
        seen.add((prog.shape_id, vals, lats))
        for channels in (1, 2, 4):
            want = step_estimate._run(prog, vals, lats, channels)
            got = step_estimate._run_compiled(kernel, prog, vals, lats, channels)
            assert got == want, (prog.shape_id, channels)


def test_the_table_holds_every_op():
    prog, _, _ = _programs("ds_cnn", "tnpu-s")[0]
    rows, starts, sig_off = prog.table()
    assert rows.shape == (sum(len(q) for q in prog.queues), step_kernel.COLS)
    assert list(np.diff(starts)) == [len(q) for q in prog.queues]
    assert sig_off[-1] == sum(1 for q in prog.queues for op in q if op[0] == step_estimate._SIGNAL) + sum(
        len(op[3]) for q in prog.queues for op in q if op[0] == step_estimate._TILE)


def test_cost_cache_takes_the_compiled_loop_and_the_reference_with_kernels_off(monkeypatch):
    """CostCache.run times with the compiled loop when kernels are on (and the process has
    timed KERNEL_AFTER programs), with _run when TESSEL_SIM_KERNELS=0; the same figures on every
    NPU."""
    calls = []
    real = step_estimate._run_compiled
    monkeypatch.setattr(step_estimate, "_run_compiled", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 0)  # (tiered: after this many _runs)
    prog, _, _ = _programs("ds_cnn", "tnpu-s")[-1]
    a = load_target("tnpu-s")
    b = a.with_params({"dma.channels": 1, "vector.lanes": 8})
    figures = {}
    for kernels in ("1", "0"):
        monkeypatch.setenv("TESSEL_SIM_KERNELS", kernels)
        monkeypatch.setattr(step_estimate, "_RUNS", {})
        step_estimate._kernel.cache_clear()
        calls.clear()
        for arch in (a, b):
            cost = CostCache(arch)
            figures[kernels, arch.dma_channels] = got = cost.run(prog)
            assert got == step_estimate._run(prog, cost.term_values(prog.terms), cost.lats,
                                    arch.dma_channels)
        assert len(calls) == (2 if kernels == "1" else 0)
    step_estimate._kernel.cache_clear()
    assert figures["1", 2] == figures["0", 2] and figures["1", 1] == figures["0", 1]


def test_the_compiled_loop_waits_for_kernel_after_runs(monkeypatch):
    """Tiered: the first KERNEL_AFTER timings of a process are _run's, the later ones the
    compiled loop's (kernels on); every one equal to _run."""
    progs = _programs("ds_cnn", "tnpu-s")[:6]
    calls = []
    real = step_estimate._run_compiled
    monkeypatch.setattr(step_estimate, "_run_compiled", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 3)
    monkeypatch.setattr(step_estimate, "_TIMED", [0])
    on = step_estimate._kernel() is not None
    for k, (prog, vals, lats) in enumerate(progs):
        assert step_estimate._time(prog, vals, lats, 2) == step_estimate._run(prog, vals, lats, 2)
        assert len(calls) == (max(0, k - 2) if on else 0), k


def test_expect_programs_moves_the_tier_only_when_the_expected_total_reaches_it(monkeypatch):
    """expect_programs: run compiled from now when the programs timed so far and the ones
    expected reach KERNEL_AFTER; fewer expected leave the tier counting."""
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 100)
    monkeypatch.setattr(step_estimate, "_TIMED", [40])
    step_estimate.expect_programs(59)
    assert step_estimate.programs_run() == 40
    step_estimate.expect_programs(60)
    assert step_estimate.programs_run() == 100
    monkeypatch.setattr(step_estimate, "_TIMED", [0])
    step_estimate.expect_programs(0)
    assert step_estimate.programs_run() == 0
