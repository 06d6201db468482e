"""The linearised functional run (``functional.linear_plan``) against the engine loop itself:
random token programs (racy ones included, so any change of order shows in the memories),
deadlocks, SIGNAL stalls, region stops, and every zoo binary."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from simkit import ARCH, I, program, signal, wait

from tessel.errors import TesselSimError
from tessel.isa import DType, Engine, Opcode
from tessel.sim.functional import FunctionalRun, linear_plan
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

DI, MX, VE, DO = Engine.DMA_IN, Engine.MATRIX, Engine.VECTOR, Engine.DMA_OUT
REGION = 256  # SRAM bytes the random instructions read and write (so they race)


def _work(engine: Engine, rng: np.random.Generator):
    """One random data instruction of ``engine`` on the first REGION bytes of SRAM / DRAM."""
    n = int(rng.integers(1, 32))
    a, b = (int(v) for v in rng.integers(0, REGION - n, 2))
    if engine == DI:
        return I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=n, ext_addr=a, ext_s0=1,
                 sram_addr=b, sram_s0=1)
    if engine == DO:
        return I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=n, ext_addr=REGION + a, ext_s0=1,
                 sram_addr=b, sram_s0=1)
    if engine == VE:
        return I(Opcode.COPY, dtype=DType.I8, d0=n, src_addr=a, src_s0=1, dst_addr=b, dst_s0=1)
    m, k = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    return I(Opcode.MATMUL, m=m, n=4, k=k, a_addr=a % 128, a_stride_m=k, b_addr=128,
             b_stride_k=4, acc_addr=int(rng.integers(0, 64)), acc_stride=4)


def _random_streams(seed: int, length: int = 40, tokens: int = 3):
    """Random queues of data instructions and WAIT / SIGNAL pairs on a few tokens, built in
    one global order: each WAIT joins its queue after its SIGNAL was issued, so that order is
    a valid run (no deadlock). Odd seeds put WAITs anywhere and drop some: deadlocks too."""
    rng = np.random.default_rng(seed)
    engines = list(Engine)
    streams = {e: [] for e in engines}
    for _ in range(length):
        e = engines[int(rng.integers(4))]
        if rng.random() < 0.5:
            streams[e].append(_work(e, rng))
        else:
            peer = engines[int(rng.integers(3))]
            peer = engines[-1] if peer == e else peer
            tok = int(rng.integers(tokens))
            streams[e].append(signal(peer, tok))
            q = streams[peer]
            if seed % 2 == 0:
                q.append(wait(e, tok))
            elif rng.random() < 0.8:
                q.insert(int(rng.integers(len(q) + 1)), wait(e, tok))
    return streams


def _state(seed: int) -> MachineState:
    rng = np.random.default_rng(1000 + seed)
    st = MachineState(ARCH)
    st.sram[:REGION] = rng.integers(0, 256, REGION, dtype=np.uint8)
    st.offchip[0][:2 * REGION] = rng.integers(0, 256, 2 * REGION, dtype=np.uint8)
    return st


def _memories(st: MachineState, ends=(2 * REGION,)) -> str:
    """A digest of the SRAM, the accumulator and the off-chip bytes below ``ends`` (per
    memory; the off-chip memories are hundreds of MiB, mostly never touched)."""
    h = hashlib.sha256(st.sram.tobytes())
    h.update(st.acc_bytes.tobytes())
    h.update(st.lut_bytes.tobytes())
    for m, end in zip(st.offchip, ends, strict=False):
        h.update(m[:end].tobytes())
    return h.hexdigest()


def _both(prep, seed: int, stops_seq):
    """(memories, pcs, sem, count or error text) of the linear run and of the engine loop."""
    out = []
    for linear in (True, False):
        st = _state(seed)
        run = FunctionalRun(prep, st, linear=linear)
        got = None
        try:
            for stops in stops_seq:
                got = run.run_until(stops)
        except TesselSimError as exc:
            got = str(exc)
        out.append((_memories(st), list(run.pcs), list(run.sem), got))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_random_token_programs_run_as_the_engine_loop(seed):
    prep = prepare(program(_random_streams(seed)), ARCH)
    lin, loop = _both(prep, seed, [None])
    assert lin == loop
    assert (seed % 2 == 1) or isinstance(lin[3], int)  # balanced tokens never deadlock


def test_some_random_programs_deadlock_and_are_reported_alike():
    texts = []
    for seed in range(1, 40, 2):
        prep = prepare(program(_random_streams(seed)), ARCH)
        lin, loop = _both(prep, seed, [None])
        assert lin == loop
        if isinstance(lin[3], str):
            texts.append(lin[3])
    assert texts and all(t.startswith("deadlock") for t in texts)


@pytest.mark.parametrize("seed", range(0, 20, 2))
def test_region_stops_resume_like_the_engine_loop(seed):
    streams = _random_streams(seed)
    prep = prepare(program(streams), ARCH)
    lens = [len(q) for q in prep.queues]
    rng = np.random.default_rng(seed)
    cuts = [sorted(int(c) for c in rng.integers(0, n + 1, 2)) for n in lens]
    stops_seq = [[c[0] for c in cuts], [c[1] for c in cuts], None]
    lin, loop = _both(prep, seed, stops_seq)
    assert lin == loop


def test_signal_stall_at_255_is_replayed():
    # VECTOR signals 300 times before MATRIX drains: the loop stalls VECTOR at 255 and resumes
    prog = program({VE: [signal(MX, 0)] * 300 + [I(Opcode.COPY, dtype=DType.I8, d0=4,
                                                   src_addr=0, src_s0=1, dst_addr=8, dst_s0=1)],
                    MX: [wait(VE, 0)] * 300})
    prep = prepare(prog, ARCH)
    lin, loop = _both(prep, 0, [None])
    assert lin == loop and lin[3] == 300 * 2 + 1 + 4


def test_plan_has_no_control_instructions_and_is_cached():
    prep = prepare(program(_random_streams(0)), ARCH)
    pcs, sem = [0] * 4, [0] * (4 * 4 * 16)
    stops = [len(q) for q in prep.queues]
    plan = linear_plan(prep, pcs, sem, stops)
    assert plan is linear_plan(prep, pcs, sem, stops)
    kinds = {op.opcode for _, op in plan.steps}
    assert not kinds & {Opcode.WAIT, Opcode.SIGNAL, Opcode.END}
    n_data = sum(op.opcode not in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)
                 for q in prep.queues for op in q)
    assert len(plan.steps) == n_data and plan.deadlock is None


def test_a_trap_in_the_plan_names_the_instruction():
    bad = I(Opcode.COPY, dtype=DType.I8, d0=16, src_addr=ARCH.onchip.sram_bytes - 4, src_s0=1,
            dst_addr=0, dst_s0=1)
    prep = prepare(program({DI: [signal(VE)], VE: [wait(DI), bad]}), ARCH)
    for linear in (True, False):
        with pytest.raises(TesselSimError, match="VECTOR instruction 1"):
            FunctionalRun(prep, MachineState(ARCH), linear=linear).run_until(None)


ZOO = ["digits_cnn", "ds_cnn", "mobilenet_v2", "resnet18", "vit_small", "minilm"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_zoo_binaries_linear_equals_engine_loop(name):
    """Every region of a zoo binary (tnpu-s): every memory equal after each region."""
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config
    from tessel.runtime.compiled import CompiledModel
    from tessel.sim.api import NpuSession, batch_layout

    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(2),
                  quant_config=default_config(name), calibration_samples=2)
    cm: CompiledModel = compile_graph(qm.graph, load_preset("tnpu-s"), name=name)
    sessions = [NpuSession(cm.program, cm.arch) for _ in range(2)]
    sessions[1].run = FunctionalRun(sessions[1].prep, sessions[1].state, linear=False)
    rng = np.random.default_rng(0)
    for r in cm.regions:
        feed = {}
        for nm in r.inputs:
            feed[nm] = _random_tensor(sessions[0].descriptors[nm], rng)
        outs = [s.run_region(feed, r.ends, list(r.outputs)) for s in sessions]
        for k in outs[0]:
            assert np.array_equal(outs[0][k], outs[1][k])
        ends = batch_layout(sessions[0].prep)[0]  # the highest byte the program can touch
        assert _memories(sessions[0].state, ends) == _memories(sessions[1].state, ends)
        assert sessions[0].run.pcs == sessions[1].run.pcs


def _io(d):
    from tessel.sim.state import IO_DTYPE

    return IO_DTYPE[d.dtype]


def _random_tensor(d, rng) -> np.ndarray:
    """Random values of a descriptor's type (integers over their range, floats in [-2, 2))."""
    dt = _io(d)
    if dt.kind == "f":
        return rng.uniform(-2, 2, d.shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, int(info.max) + 1, d.shape).astype(dt)
