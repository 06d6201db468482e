"""The timing rules (tessel.sim.clock) are written once and run in two forms: compiled (ahead of
time, or numba's just-in-time compile of the same source) and as their Python source. Both
give the same figures on every program the plan times for zoo models (the searches'
candidates, residency and prefetch estimates), with each preset's latencies and 1, 2 and 4 DMA
channels; CostCache takes the compiled form once the process has timed KERNEL_AFTER programs
and kernels are on."""

from __future__ import annotations

import numpy as np
import pytest

from compile_region import compile_region
from tessel.analysis.estimate import estimate_graph
from tessel.analysis.explore import quantised_graphs
from tessel.arch import load_target
from tessel.ir import DType, GraphBuilder, Layout, Op, TensorType, verify
from tessel.isa import Instruction, Opcode
from tessel.isa.fields import DType as IsaDType
from tessel.schedule import estimate as step_estimate
from tessel.schedule.estimate import CostCache, StepProgram
from tessel.sim import clock, jit


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
def test_compiled_form_equals_the_python_source(model, preset, form, monkeypatch):
    """Both compiled forms: the one built ahead of time (the kernel declares its signature:
    tessel.sim.aot) and numba's just-in-time compile of the same source."""
    loop = (clock.run_arrays if form is jit.Form.AHEAD_OF_TIME
            else jit.Kernel(clock.run_arrays.py))
    loop.compiled  # noqa: B018 (a Kernel without a signature: just in time)
    assert loop.form is form
    monkeypatch.setattr(clock, "run_arrays", loop)
    progs = _programs(model, preset)
    assert len(progs) > 50
    seen = set()
    for prog, vals, lats in progs:
        if (prog.shape_id, vals, lats) in seen:
            continue
        seen.add((prog.shape_id, vals, lats))
        for channels in (1, 2, 4):
            want = step_estimate._time(prog, vals, lats, channels, compiled=False)
            got = step_estimate._time(prog, vals, lats, channels, compiled=True)
            assert got == want, (prog.shape_id, channels)


def test_the_table_holds_every_op():
    prog, _, _ = _programs("ds_cnn", "tnpu-s")[0]
    rows, starts, sig_off, boxes = prog.table(compiled=True)
    assert rows.shape == (sum(len(q) for q in prog.queues) * clock.COLS,)
    assert list(np.diff(starts)) == [len(q) for q in prog.queues]
    assert boxes is None  # no transfers of a tile overlap: no hazard boxes to time
    assert [None if x is None else list(x) for x in prog.table(compiled=True)] == \
        list(prog.table(compiled=False))
    assert sig_off[-1] == sum(1 for q in prog.queues for op in q if op[0] == step_estimate._SIGNAL) + sum(
        len(op[3]) for q in prog.queues for op in q if op[0] == step_estimate._TILE)


def _count_compiled(monkeypatch) -> list[int]:
    """A list that grows by one each time the compiled form runs."""
    calls: list[int] = []
    real = clock.time_rows

    def spy(*a, **kw):
        if kw.get("compiled"):
            calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(clock, "time_rows", spy)
    return calls


def test_cost_cache_takes_the_compiled_form_and_the_source_with_kernels_off(monkeypatch):
    """CostCache.run times with the compiled form when kernels are on (and the process has
    timed KERNEL_AFTER programs), with the Python source when TESSEL_SIM_KERNELS=0; the same
    figures on every NPU."""
    calls = _count_compiled(monkeypatch)
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 0)  # (tiered: after this many timings)
    prog, _, _ = _programs("ds_cnn", "tnpu-s")[-1]
    a = load_target("tnpu-s")
    b = a.with_params({"dma.channels": 1, "vector.lanes": 8})
    figures = {}
    for kernels in ("1", "0"):
        monkeypatch.setenv("TESSEL_SIM_KERNELS", kernels)
        monkeypatch.setattr(step_estimate, "_RUNS", {})
        step_estimate._compiled_available.cache_clear()
        calls.clear()
        for arch in (a, b):
            cost = CostCache(arch)
            figures[kernels, arch.dma_channels] = got = cost.run(prog)
            assert got == step_estimate._time(prog, cost.term_values(prog.terms), cost.lats,
                                              arch.dma_channels, compiled=False)
        assert len(calls) == (2 if kernels == "1" else 0)
    step_estimate._compiled_available.cache_clear()
    assert figures["1", 2] == figures["0", 2] and figures["1", 1] == figures["0", 1]


def _assert_timed_from(progs, calls, first: int | None) -> None:
    """Each program timed equal to the Python source's; the compiled form called for the
    programs from index ``first`` on (never when None)."""
    for k, (prog, vals, lats) in enumerate(progs):
        want = step_estimate._time(prog, vals, lats, 2, compiled=False)
        calls_before = len(calls)
        assert step_estimate._time(prog, vals, lats, 2) == want
        assert len(calls) - calls_before == (1 if first is not None and k >= first else 0), k


def test_the_compiled_form_waits_for_kernel_after_timings(monkeypatch):
    """Tiered: the first KERNEL_AFTER timings of a process are the Python source's, the later
    ones the compiled form's (kernels on); every one equal to the source's."""
    progs = _programs("ds_cnn", "tnpu-s")[:6]
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 3)
    monkeypatch.setattr(step_estimate, "_TIMED", [0])
    on = step_estimate._compiled_available()
    calls = _count_compiled(monkeypatch)
    _assert_timed_from(progs, calls, 3 if on else None)


@pytest.mark.parametrize("built", [True, False])
def test_a_built_ahead_of_time_module_moves_the_tier_to_kernel_after_built(monkeypatch, built):
    """With the compiled form's ahead-of-time module already built, the tier switches after
    KERNEL_AFTER_BUILT timings; without it, only after KERNEL_AFTER."""
    progs = _programs("ds_cnn", "tnpu-s")[:6]
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER", 100)
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER_BUILT", 2)
    monkeypatch.setattr(step_estimate, "_TIMED", [0])
    monkeypatch.setattr(step_estimate, "_compiled_built", lambda: built)
    on = step_estimate._compiled_available()
    calls = _count_compiled(monkeypatch)
    _assert_timed_from(progs, calls, 2 if on and built else None)
    assert step_estimate.programs_run() == (2 if on and built else 6)


@pytest.mark.parametrize("built", [True, False])
def test_expect_run_moves_the_tier_to_kernel_after_built_for_a_long_run_when_built(
        monkeypatch, built):
    """expect_run: before anything is timed, a run of RUN_POINTS_BUILT points or more takes
    the compiled form from its first program when its module is built; a shorter run, an
    unbuilt module or a process that has timed programs already leave the tier counting."""
    monkeypatch.setattr(step_estimate, "KERNEL_AFTER_BUILT", 150)
    monkeypatch.setattr(step_estimate, "_compiled_built", lambda: built)
    monkeypatch.setattr(step_estimate, "_TIMED", [0])
    step_estimate.expect_run(step_estimate.RUN_POINTS_BUILT - 1)
    assert step_estimate.programs_run() == 0
    step_estimate.expect_run(step_estimate.RUN_POINTS_BUILT)
    assert step_estimate.programs_run() == (150 if built else 0)
    monkeypatch.setattr(step_estimate, "_TIMED", [400])
    step_estimate.expect_run(100)
    assert step_estimate.programs_run() == 400


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


def _upsample_programs(preset: str) -> list[tuple[StepProgram, tuple[int, ...], tuple]]:
    """The programs timed planning a 2 x 2 nearest upsample, whose 5-D store is two 4-D
    transfers with interleaved boxes (a hazard group)."""
    b = GraphBuilder("t")
    x = b.input("x", TensorType((1, 14, 14, 32), DType.I8))
    g = verify(b.build([b.add(Op.UPSAMPLE_NEAREST, [x], {"scale": (2, 2),
                                                         "layout": Layout.NHWC})]))
    got = []
    real = CostCache.run

    def spy(self, prog):
        got.append((prog, self.term_values(prog.terms), self.lats))
        return real(self, prog)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CostCache, "run", spy)
        compile_region(g, [g.nodes[-1]], ["x"], [g.nodes[-1].name], load_target(preset), {})
    return got


def test_hazard_boxes_time_alike_in_both_forms():
    progs = [p for p in _upsample_programs("u65-512") if p[0].table(compiled=False)[3]]
    assert progs  # the interleaved stores are one hazard group
    for prog, vals, lats in progs:
        for channels in (1, 2, 4):
            want = step_estimate._time(prog, vals, lats, channels, compiled=False)
            got = step_estimate._time(prog, vals, lats, channels, compiled=True)
            assert got == want, (prog.shape_id, channels)


def _load(sram: int, ext: int) -> Instruction:
    return Instruction.make(Opcode.DMA_LOAD, mem=0, dtype=IsaDType.I8, d0=64, ext_addr=ext,
                            ext_s0=1, sram_addr=sram, sram_s0=1)


def test_hazard_groups_join_overlapping_transfers_only():
    a, apart, inside = _load(0, 0), _load(64, 0), _load(32, 4096)
    assert step_estimate.hazard_groups([a, apart]) == (0, 0)  # the same bytes read: no hazard
    assert step_estimate.hazard_groups([a, apart, inside]) == (1, 1, 1)  # writes overlap
    assert step_estimate.hazard_groups([a, inside, _load(256, 0), apart]) == (1, 1, 0, 1)
    assert step_estimate.hazard_groups([a]) == (0,)
