"""Prefetch of a step's first group during the previous step (schedule/prefetch.py): the program
stays bit-exact, no token is left outstanding (the binary reader reloads it), the estimate of
every layer equals its simulated cycles, it is never slower than the strict step barrier, and
the planner moves a step only where its group slot would overlap the running step's SRAM."""

from __future__ import annotations

import numpy as np
import pytest
from test_driver_e2e import two_conv_net

from tessel.arch import CompileOptions, load_preset
from tessel.driver import compile_graph
from tessel.emit.streams import STEP_DONE_TOKEN
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.fields import DType
from tessel.isa.footprint import Space, accesses
from tessel.ops.step import GroupWork, Slots, StepShape, StepWork, TileWork
from tessel.quant.golden import run_golden
from tessel.runtime.compiled import load
from tessel.schedule import prefetch


def _compile(g, preset, on):
    return compile_graph(g, load_preset(preset), name="net",
                         options=CompileOptions(prefetch_groups=on))


def _prefetching_steps(cm) -> int:
    """Steps whose end waits for DMA_IN (the prefetch token of Streams.end_step)."""
    out = cm.program.streams[Engine.DMA_OUT]
    return sum(1 for i in out if i.opcode == Opcode.WAIT and i.engine == Engine.DMA_IN
               and i.token == STEP_DONE_TOKEN)


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs"])
def test_prefetch_is_bit_exact_exactly_estimated_and_not_slower(preset, tmp_path):
    rng = np.random.default_rng(0)
    g = two_conv_net(rng, pool=True)
    x = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
    gold = run_golden(g, [x])[0]
    off, on = _compile(g, preset, False), _compile(g, preset, True)
    assert _prefetching_steps(off) == 0
    assert _prefetching_steps(on) >= 1  # c2's weights are loaded while c1 runs
    for cm in (off, on):
        np.testing.assert_array_equal(cm.run(x)[0], gold)
        for layer in cm.profile.layers:
            assert layer.estimated_cycles == layer.cycles, layer.name
    assert on.profile.cycles < off.profile.cycles
    path = tmp_path / "net.tsl"
    on.save(path)  # the reader's token check: no deadlock, no token outstanding
    again = load(path)
    assert again.binary == on.binary
    np.testing.assert_array_equal(again.run(x)[0], gold)
    assert _compile(g, preset, True).binary == on.binary  # deterministic


def _load(sram: int, nbytes: int, ext: int = 0) -> Instruction:
    return Instruction.make(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=nbytes, ext_addr=ext,
                            ext_s0=1, sram_addr=sram, sram_s0=1)


def _copy(src: int, dst: int, n: int) -> Instruction:
    return Instruction.make(Opcode.COPY, dtype=DType.I8, d0=n, src_addr=src, src_s0=1,
                            dst_addr=dst, dst_s0=1)


def _work(group_bytes: int, tile_bytes: int, ext: int = 0) -> StepWork:
    """One group (its constants at [0, group_bytes)) and one tile (input after it)."""
    def group_fn(g, slot):
        return GroupWork([], [_load(slot * group_bytes, group_bytes, ext)], [], 1)

    def tile_fn(g, t, s):
        base = 2 * group_bytes + s.inp * tile_bytes
        return TileWork([_load(base, tile_bytes, 4096)], [],
                        [_copy(base, 8192 + s.out * tile_bytes, tile_bytes)],
                        [Instruction.make(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=tile_bytes,
                                          ext_addr=8192, ext_s0=1,
                                          sram_addr=8192 + s.out * tile_bytes, sram_s0=1)])

    return StepWork(StepShape(uses_matrix=False), 1, group_fn, tile_fn)


def _sram(ins: Instruction) -> list[tuple[int, int]]:
    return [(a.lo, a.hi) for a in accesses(ins) if a.space is Space.SRAM]


def test_plan_moves_a_step_above_the_previous_working_set_and_alternates():
    works = [_work(64, 128) for _ in range(3)]
    plan = prefetch.plan_prefetch(works, [0, 0, 0], [[], [], []], 1 << 20, (0, 4096))
    top = 8192 + 2 * 128  # the highest SRAM byte the steps touch (second output slot)
    assert plan[0] == prefetch.StepPrefetch(0, False)  # the first step of a region
    assert plan[1] == prefetch.StepPrefetch(top, True)  # its group slot 0 overlapped step 0
    assert plan[2] == prefetch.StepPrefetch(0, True)  # slot 0 at the bottom misses step 1
    steps = prefetch.plan_steps(works, [0, 0, 0], None, 1 << 20, (0, 4096))
    assert [ins.sram_addr for ins in steps[0].prefetch] == [top]
    moved = steps[1].work.tile_fn(0, 0, Slots())
    assert moved.loads[0].sram_addr == top + 128 and moved.stores[0].sram_addr == top + 8192
    assert not steps[2].prefetch


def test_plan_does_not_prefetch_activations_other_regions_or_what_does_not_fit():
    works = [_work(64, 128), _work(64, 128, ext=5000)]  # group 1 reads past the constants
    assert not prefetch.plan_prefetch(works, [0, 0], [[], []], 1 << 20, (0, 4096))[1].prefetched
    works = [_work(64, 128), _work(64, 128)]
    assert not prefetch.plan_prefetch(works, [0, 1], [[], []], 1 << 20, (0, 4096))[1].prefetched
    # moving step 1 above step 0 would reach a resident tensor (limit)
    assert not prefetch.plan_prefetch(works, [0, 0], [[], []], 9000, (0, 4096))[1].prefetched
    assert not prefetch.plan_steps(works, [0, 0], None, 1 << 20, (0, 4096),
                                   enabled=False)[0].prefetch


def test_shift_keeps_resident_operands_and_refuses_straddling_ones():
    keep = [(100_000, 101_000)]
    ins = _copy(100_000, 512, 256)  # reads a resident tensor into a slot
    (moved,) = prefetch._shift([ins], 1024, keep)
    assert moved.src_addr == 100_000 and moved.dst_addr == 512 + 1024
    with pytest.raises(prefetch.NotShiftable):
        prefetch._shift([_copy(99_900, 0, 256)], 1024, keep)
    assert _sram(moved) == [(100_000, 100_256), (1536, 1792)]
