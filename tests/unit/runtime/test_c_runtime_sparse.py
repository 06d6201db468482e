"""The C runtime and 2:4 sparse weights (CONV w_type I8_2_4 / I4_2_4): a binary with such a
CONV loads; the C NPU model runs it to the simulator's accumulator and MAC count, traps like the
simulator on a target without sparsity, on malformed indices and on a block whose indices run
past the SRAM (the accumulator untouched), and on a sparse MATMUL / DWCONV (which the loader
accepts, as the Python reader does)."""

from __future__ import annotations

import numpy as np
import pytest

from tessel.arch import load_preset
from tessel.binary import TslProgram, read_tsl, write_tsl
from tessel.errors import TesselSimError
from tessel.isa import Engine, Instruction, Opcode, encode_stream
from tessel.isa.instrs.matrix import WeightType
from tessel.isa.sparse24 import encode, pack_nibbles
from tessel.runtime import cengine
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

pytestmark = pytest.mark.skipif(cengine.available() is not None,
                                reason=str(cengine.available()))
PLAIN = load_preset("tnpu-s")
SPARSE = PLAIN.with_param("sparse.enabled", True)
KH = KW = 3
CIN, COUT, H, W = 8, 12, 5, 4
W_ADDR = 4096


def _conv(w_type: WeightType, **kw) -> Instruction:
    return Instruction.make(
        Opcode.CONV, in_addr=0, in_h=H, in_w=W, in_stride_h=W * CIN, in_stride_w=CIN, cin=CIN,
        in_zp=-3, kh=KH, kw=KW, pad_top=1, pad_left=1, out_h=H, out_w=W, cout=COUT,
        w_addr=W_ADDR, w_stride_k=CIN // 2 * COUT, w_stride_ci=COUT, w_stride_co=1, acc_addr=0,
        acc_stride=COUT, w_type=w_type, **kw)


def _sram(w_type: WeightType, seed: int = 0) -> np.ndarray:
    """Random input and random 2:4 weights stored as ``w_type`` at W_ADDR."""
    from tessel.ops.conv_weights import pack_int4

    rng = np.random.default_rng(seed)
    lo, hi = (-8, 7) if w_type.values is WeightType.I4 else (-128, 127)
    w = rng.integers(lo, hi + 1, (KH * KW, CIN, COUT)).astype(np.int8)
    for t in range(KH * KW):
        for g in range(CIN // 4):
            for co in range(COUT):
                w[t, 4 * g + rng.choice(4, rng.integers(2, 5), replace=False), co] = 0
    values, nibbles = encode(w)
    v = pack_int4(values.reshape(-1)) if w_type.values is WeightType.I4 else values.tobytes()
    sram = np.zeros(PLAIN.onchip.sram_bytes, np.uint8)
    sram[:H * W * CIN] = rng.integers(0, 256, H * W * CIN, dtype=np.uint8)
    stored = np.frombuffer(v + pack_nibbles(nibbles), np.uint8)
    sram[W_ADDR:W_ADDR + stored.size] = stored
    return sram


def _run_c(arch, ins: Instruction, sram: np.ndarray) -> tuple[int, np.ndarray, str]:
    acc = np.full(4 * arch.derived.acc_entries, 0xA5, np.uint8)
    lut = np.zeros(2 * arch.onchip.lut_entries, np.uint8)
    ext = np.zeros(1 << 12, np.uint8)
    code, _, why = cengine.run_queue(arch, int(Engine.MATRIX), encode_stream([ins]), 1,
                                     sram.copy(), acc, lut, ext)
    return code, acc, why


def _run_python(arch, ins: Instruction, sram: np.ndarray) -> np.ndarray:
    end = Instruction.make(Opcode.END)
    queues = {e: ((ins, end) if e is Engine.MATRIX else (end,)) for e in Engine}
    state = MachineState(arch)
    state.sram[:] = sram
    state.acc_bytes[:] = 0xA5
    run_functional(prepare(TslProgram(arch.arch_hash_bytes, queues, b"", 0, 0, (), ()), arch),
                   state)
    return state.acc_bytes.copy()


def _binary(ins: Instruction, arch=SPARSE) -> bytes:
    end = Instruction.make(Opcode.END)
    queues = {e: ((ins, end) if e is Engine.MATRIX else (end,)) for e in Engine}
    return write_tsl(TslProgram(arch.arch_hash_bytes, queues, bytes(16), 0, 0x100, (), ()))


@pytest.mark.parametrize("w_type", [WeightType.I8_2_4, WeightType.I4_2_4])
def test_a_sparse_conv_loads_and_runs_like_the_simulator(w_type: WeightType) -> None:
    data = _binary(_conv(w_type))
    assert cengine.check(data)[0] == 0
    assert read_tsl(data).streams[Engine.MATRIX][0].w_type == w_type
    sram = _sram(w_type, int(w_type))
    code, acc, why = _run_c(SPARSE, _conv(w_type), sram)
    assert code == 0, why
    want = _run_python(SPARSE, _conv(w_type), sram)
    assert acc.tobytes() == want.tobytes()
    assert acc[:4 * H * W * COUT].view("<i4").any()  # the products reached the accumulator


def test_malformed_indices_trap_with_the_accumulator_untouched() -> None:
    sram = _sram(WeightType.I8_2_4, 3)
    end = W_ADDR + KH * KW * CIN // 2 * COUT + KH * KW * CIN // 4 * COUT // 2
    sram[end - 1] = 0x45  # the last group's indices: 1, 1 (the first not below the second)
    code, acc, why = _run_c(SPARSE, _conv(WeightType.I8_2_4), sram)
    assert code == cengine.NPU_TRAP and "2:4" in why and "index" in why
    assert (acc == 0xA5).all()
    with pytest.raises(TesselSimError, match="2:4 indices"):
        _run_python(SPARSE, _conv(WeightType.I8_2_4), sram)
    sram[end - 1] = 0x46  # 2, 1: also malformed
    assert _run_c(SPARSE, _conv(WeightType.I8_2_4), sram)[0] == cengine.NPU_TRAP
    sram[end - 1] = 0x94  # 0, 1 and 1, 2: legal again
    assert _run_c(SPARSE, _conv(WeightType.I8_2_4), sram)[0] == 0


@pytest.mark.parametrize(("arch", "ins", "words"), [
    (PLAIN, _conv(WeightType.I8_2_4), "sparse.enabled"),
    (SPARSE, _conv(WeightType.I8_2_4, w_zp=1), "w_zp 0"),
    (SPARSE, _conv(WeightType.I4_2_4).replace(cin=6, in_stride_h=6 * W, in_stride_w=6),
     "multiple of 4"),
    (SPARSE, Instruction.make(Opcode.MATMUL, m=1, n=4, k=8, a_addr=0, a_stride_m=8, b_addr=64,
                              b_stride_k=4, acc_addr=0, acc_stride=4,
                              b_type=WeightType.I8_2_4), "dense weights only"),
    (SPARSE, Instruction.make(Opcode.DWCONV, in_addr=0, in_h=2, in_w=2, in_stride_h=8,
                              in_stride_w=4, ch=4, kh=1, kw=1, out_h=2, out_w=2, w_addr=64,
                              w_stride_k=4, acc_addr=0, acc_stride=4,
                              w_type=WeightType.I4_2_4), "dense weights only"),
])
def test_static_rules_trap_in_both(arch, ins: Instruction, words: str) -> None:
    assert cengine.check(_binary(ins, arch))[0] == 0  # the encoding is legal: it loads
    sram = _sram(WeightType.I8_2_4)
    code, acc, why = _run_c(arch, ins, sram)
    assert code == cengine.NPU_TRAP and words in why, why
    assert (acc == 0xA5).all()
    with pytest.raises(TesselSimError, match=words):
        _run_python(arch, ins, sram)


@pytest.mark.parametrize("short", [0, 1])
def test_indices_past_the_sram_trap_in_both(short: int) -> None:
    """A block whose index nibbles would run ``short`` bytes past the SRAM: the weight box
    (values and indices) is outside its memory, a static trap; at the very end it runs."""
    values, indices = KH * KW * CIN // 2 * COUT, KH * KW * CIN // 4 * COUT // 2
    sram = _sram(WeightType.I8_2_4, 4)
    block = sram[W_ADDR:W_ADDR + values + indices].copy()
    at = PLAIN.onchip.sram_bytes - values - indices + short
    ins = _conv(WeightType.I8_2_4).replace(w_addr=at)
    sram[at:at + block.size - short] = block[:block.size - short]
    code, acc, why = _run_c(SPARSE, ins, sram)
    if not short:
        assert code == 0, why
        assert acc.tobytes() == _run_python(SPARSE, ins, sram).tobytes()
        return
    assert code == cengine.NPU_TRAP and "outside its memory" in why, why
    assert (acc == 0xA5).all()
    with pytest.raises(TesselSimError, match="outside the SRAM"):
        _run_python(SPARSE, ins, sram)
