"""The NPU's timing rules (tessel.sim.clock, via sim.timing.instr_times) against an independent
event loop over the same rules (timing_oracle): every instruction's start and end, the total,
deadlocks and semaphore overflows, on random token programs (racy transfers, 1, 2 or 4 DMA
channels, two memories), and on compiled zoo programs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from simkit import ARCH, I, program, signal, wait
from test_linear import _random_streams
from timing_oracle import event_loop_times

from tessel.arch import load_preset
from tessel.errors import TesselSimError
from tessel.isa import DType, Engine, Opcode
from tessel.sim.prepare import prepare
from tessel.sim.timing import instr_times

DI, MX, VE, DO = Engine.DMA_IN, Engine.MATRIX, Engine.VECTOR, Engine.DMA_OUT


def _outcome(times_of, prep):
    try:
        t = times_of(prep)
    except TesselSimError as exc:
        return str(exc)
    return t.starts, t.ends, t.total_cycles


def _with_second_memory(streams, rng):
    """Some DMA transfers moved to memory 1 (a slower port: transfers finish out of order)."""
    out = {}
    for e, q in streams.items():
        out[e] = [ins.replace(mem=1) if ins.opcode in (Opcode.DMA_LOAD, Opcode.DMA_STORE)
                  and rng.random() < 0.4 else ins for ins in q]
    return out


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("channels", [1, 2, 4])
@pytest.mark.parametrize("seed", range(30))
def test_random_programs_time_as_the_event_loop(seed, channels, preset):
    arch = load_preset(preset).with_params({"dma.channels": channels})
    streams = _random_streams(seed, length=60)
    if len(arch.offchip) > 1:
        streams = _with_second_memory(streams, np.random.default_rng(seed))
    prep = prepare(program(streams, arch), arch)
    got, want = _outcome(instr_times, prep), _outcome(event_loop_times, prep)
    assert got == want
    assert (seed % 2 == 1) or not isinstance(got, str)  # balanced tokens never deadlock


def test_some_random_programs_deadlock_alike():
    texts = [o for seed in range(1, 40, 2)
             if isinstance(o := _outcome(instr_times, prepare(program(_random_streams(seed)),
                                                              ARCH)), str)]
    assert texts and all(t.startswith("deadlock") for t in texts)


def test_a_semaphore_over_its_count_traps_alike():
    """VECTOR signals 300 times while MATRIX is busy in one long MATMUL: 256 tokens would wait
    at once."""
    long = I(Opcode.MATMUL, m=64, n=64, k=64, a_addr=0, a_stride_m=64, b_addr=4096,
             b_stride_k=64, acc_addr=0, acc_stride=64)
    prep = prepare(program({VE: [signal(MX, 0)] * 300, MX: [long] + [wait(VE, 0)] * 300}), ARCH)
    got, want = _outcome(instr_times, prep), _outcome(event_loop_times, prep)
    assert got == want and isinstance(got, str) and "would exceed 255" in got
    fewer = prepare(program({VE: [signal(MX, 0)] * 200, MX: [long] + [wait(VE, 0)] * 200}), ARCH)
    assert not isinstance(_outcome(instr_times, fewer), str)


def test_conflicting_transfers_wait_for_each_other():
    """Two loads into the same SRAM bytes on two channels: the second waits for the first
    (a write-after-write hazard); into other bytes they overlap."""
    arch = ARCH.with_params({"dma.channels": 2})

    def load(sram: int):
        return I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=64, ext_addr=0, ext_s0=1,
                 sram_addr=sram, sram_s0=1)

    def times(second: int):
        prep = prepare(program({DI: [load(0), load(second)]}, arch), arch)
        got = instr_times(prep)
        assert got == event_loop_times(prep)
        return got

    same, apart = times(0), times(128)
    assert same.starts[DI][1] == same.ends[DI][0]
    assert apart.starts[DI][1] == apart.starts[DI][0] + 1


@pytest.mark.parametrize("name,preset", [("ds_cnn", "tnpu-s"), ("ds_cnn", "u55-256"),
                                         pytest.param("mobilenet_v2", "tnpu-s",
                                                      marks=pytest.mark.slow)])
def test_compiled_programs_time_as_the_event_loop(name, preset):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
    from zoo_cache import quantized

    from tessel.driver import compile_graph
    from tessel.sim.prepare import prepared

    arch = load_preset(preset)
    cm = compile_graph(quantized(name)[0].graph, arch)
    prep = prepared(cm.program, arch)
    assert instr_times(prep) == event_loop_times(prep)
