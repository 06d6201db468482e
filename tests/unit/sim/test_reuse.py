"""``NpuSession(reuse=True)``: a released session's memories, reset, behave as new ones."""

from __future__ import annotations

import numpy as np
from simkit import ARCH, I, program, signal, wait

from tessel.binary.layout import DType as IoDType
from tessel.binary.program import TensorDescriptor
from tessel.isa import DType, Engine, Opcode
from tessel.sim.api import NpuSession

DI, VE, DO = Engine.DMA_IN, Engine.VECTOR, Engine.DMA_OUT


def _io(name, addr, n=16):
    return TensorDescriptor(name, IoDType.INT8, (n,), 0, addr)


def _prog(constants: bytes = b"", store_into_constants: bool = False):
    """Copies x (input at 0), never-written DRAM bytes below and above the constants (at 512
    and 3000) and never-written SRAM bytes (at 4096) to the outputs y, z, v, w, the constants
    to c, then overwrites all of them (the constants only if asked) with x: a second run on
    reused memories that were not reset would read x there."""
    ld = lambda ext, sram: I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=16, ext_addr=ext,  # noqa: E731
                             ext_s0=1, sram_addr=sram, sram_s0=1)
    st = lambda ext, sram: I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=16, ext_addr=ext,  # noqa: E731
                             ext_s0=1, sram_addr=sram, sram_s0=1)
    cp = I(Opcode.COPY, dtype=DType.I8, d0=16, src_addr=4096, src_s0=1, dst_addr=64, dst_s0=1)
    fill = I(Opcode.COPY, dtype=DType.I8, d0=16, src_addr=0, src_s0=1, dst_addr=4096, dst_s0=1)
    c_addr = 2048
    stores = [st(1024, 0), st(1040, 32), st(1056, 64), st(512, 0)]
    stores += [st(c_addr, 0)] if store_into_constants else []
    stores += [st(1072, 96), st(1088, 128), st(3000, 0)]
    return program({
        DI: [ld(0, 0), ld(512, 32), ld(c_addr, 96), ld(3000, 128), signal(VE)],
        VE: [wait(DI), cp, fill, signal(DO)],
        DO: [wait(VE), *stores]},
        constants=constants, constants_address=c_addr,
        inputs=[_io("x", 0)],
        outputs=[_io("y", 1024), _io("z", 1040), _io("w", 1056), _io("c", 1072),
                 _io("v", 1088)])


def _run(prog, reuse: bool, x):
    s = NpuSession(prog, ARCH, reuse=reuse)
    lens = [len(q) for q in s.prep.queues]
    out = s.run_region({"x": x}, lens, ["y", "z", "w", "c", "v"])
    s.release()
    return out, s.reused


def test_reused_memories_read_as_new_ones():
    consts = bytes(range(100, 116))
    for store_into_constants in (False, True):
        prog = _prog(consts, store_into_constants)
        x = np.arange(1, 17, dtype=np.int8)
        fresh, _ = _run(prog, False, x)
        assert not fresh["z"].any() and not fresh["w"].any() and not fresh["v"].any()
        assert fresh["c"].tobytes() == consts
        reused = []
        for k in range(3):
            out, was = _run(prog, True, x * (k + 2))
            reused.append(was)
            want, _ = _run(prog, False, x * (k + 2))
            for name in want:
                assert np.array_equal(out[name], want[name]), (name, k)
        assert reused[1] and reused[2]  # the memories of the run before


def test_a_session_without_reuse_keeps_nothing():
    prog = _prog()
    s = NpuSession(prog, ARCH)
    s.release()
    assert not s.prep.cache.get("free_states")
