"""tessel.emit.compress: which constant ranges become weight streams (whole contiguous loads
that pay, nothing else touching them), and that the rewritten program computes the same bytes
(the loads of the ranges kept raw follow their bytes to their new addresses)."""

from __future__ import annotations

import numpy as np

from tessel.arch import load_preset
from tessel.binary import DType as IoDType
from tessel.binary import TensorDescriptor, TslProgram
from tessel.emit.compress import ALIGN, compress_constants
from tessel.isa import DType, Engine, Instruction, Opcode
from tessel.sim import simulate

DI, DO = Engine.DMA_IN, Engine.DMA_OUT
OFF = load_preset("tnpu-s")
ARCH = OFF.with_param("wdecoder.enabled", True)
RNG = np.random.default_rng(5)
GAUSS = np.clip(np.round(RNG.normal(0, 5, 3000)), -127, 127).astype(np.int8).tobytes()
NOISE = RNG.integers(0, 256, 1000, dtype=np.uint8).tobytes()
OUT = 0x40000


def _load(ext: int, n: int, sram: int, ext_s0: int = 1) -> Instruction:
    return Instruction.make(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=n, ext_addr=ext,
                            ext_s0=ext_s0, sram_addr=sram, sram_s0=1)


def _program(blob: bytes, loads: list[Instruction], arch) -> TslProgram:
    """DMA_IN runs `loads`; DMA_OUT stores the SRAM's first 16 KiB to OUT."""
    sig = Instruction.make(Opcode.SIGNAL, engine=DO, token=0)
    wait = Instruction.make(Opcode.WAIT, engine=DI, token=0)
    store = Instruction.make(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=16384, ext_addr=OUT,
                             ext_s0=1, sram_addr=0, sram_s0=1)
    end = Instruction.make(Opcode.END)
    queues = {e: (end,) for e in Engine}
    queues[DI] = (*loads, sig, end)
    queues[DO] = (wait, store, end)
    out = TensorDescriptor("sram", IoDType.UINT8, (16384,), 0, OUT)
    return TslProgram(arch.arch_hash_bytes, queues, blob, 0, 0, (), (out,))


def _sram(blob: bytes, loads: list[Instruction], arch) -> np.ndarray:
    packed = compress_constants({e: q for e, q in _program(blob, loads, arch).streams.items()},
                                blob, 0, arch)
    prog = _program(packed.blob, list(packed.queues[DI][:-2]), arch)
    return simulate(prog, arch, {}, timing=False).outputs["sram"], packed


def test_whole_loads_compress_others_follow_their_bytes() -> None:
    a, b, c = 0, len(GAUSS), len(GAUSS) + 64
    blob = GAUSS + bytes(range(64)) + GAUSS
    loads = [_load(a, len(GAUSS), 0),
             _load(b + 63, 64, 4096, ext_s0=-1),  # reversed: its bytes stay raw
             _load(c, len(GAUSS), 8192)]
    want = simulate(_program(blob, loads, OFF), OFF, {}, timing=False).outputs["sram"]
    got, packed = _sram(blob, loads, ARCH)
    np.testing.assert_array_equal(got, want)
    assert [(r.lo, r.hi) for r in packed.ranges] == [(a, b), (c, c + len(GAUSS))]
    assert len(packed.blob) < len(blob) and (len(blob) - len(packed.blob)) % ALIGN == 0
    kinds = [i.opcode for i in packed.queues[DI][:3]]
    assert kinds == [Opcode.DMA_LOAD_W, Opcode.DMA_LOAD, Opcode.DMA_LOAD_W]


def test_a_range_also_read_otherwise_or_noise_stays_raw() -> None:
    blob = GAUSS + NOISE
    loads = [_load(0, len(GAUSS), 0), _load(100, 16, 4096),  # a part of the first range
             _load(len(GAUSS), len(NOISE), 8192)]
    got, packed = _sram(blob, loads, ARCH)
    assert packed.ranges == () and packed.blob == blob
    assert got[:len(GAUSS)].tobytes() == GAUSS


def test_nothing_changes_without_the_decoder_or_when_the_decoder_is_slower() -> None:
    blob, loads = GAUSS, [_load(0, len(GAUSS), 0)]
    assert compress_constants({DI: tuple(loads)}, blob, 0, OFF).ranges == ()
    slow = ARCH.with_param("wdecoder.bytes_per_cycle", 1)  # 3000 cycles to decode
    assert compress_constants({DI: tuple(loads)}, blob, 0, slow).ranges == ()
    assert len(compress_constants({DI: tuple(loads)}, blob, 0, ARCH).ranges) == 1
