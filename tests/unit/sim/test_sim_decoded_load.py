"""DMA_LOAD_W in the simulator: the weight stream in the constants decoded into the SRAM (one
sample and a batch), its cost (the link or the decoder, the slower), its energy, and its traps
(a malformed stream, a wrong out_bytes, a target without the decoder)."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import ARCH, I, program, signal, wait

from tessel.binary import DType as IoDType
from tessel.binary import TensorDescriptor
from tessel.errors import TesselSimError
from tessel.isa import DType, Engine, Opcode
from tessel.isa.costs import instruction_cost
from tessel.isa.events import energy_breakdown_pj
from tessel.isa.weight_codec import StreamMode, encode, info
from tessel.sim import simulate

DI, DO = Engine.DMA_IN, Engine.DMA_OUT
DEC = ARCH.with_param("wdecoder.enabled", True)
WEIGHTS = np.clip(np.round(np.random.default_rng(3).normal(0, 6, 3000)), -127, 127).astype(np.int8)
C0 = 0x100  # where the constants start in memory 0


def _program(stream: bytes, out_bytes: int, arch=DEC):
    load = I(Opcode.DMA_LOAD_W, mem=0, ext_addr=C0, ext_bytes=len(stream), sram_addr=64,
             out_bytes=out_bytes)
    store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=out_bytes, ext_addr=0x10000,
              ext_s0=1, sram_addr=64, sram_s0=1)
    return program({DI: [load, signal(DO)], DO: [wait(DI), store]}, arch, constants=stream,
                   constants_address=C0,
                   outputs=[TensorDescriptor("w", IoDType.INT8, (out_bytes,), 0, 0x10000)])


def test_the_stream_decodes_into_the_sram() -> None:
    stream = encode(WEIGHTS.tobytes())
    assert info(stream).mode is StreamMode.BYTES and len(stream) < WEIGHTS.size
    res = simulate(_program(stream, WEIGHTS.size), DEC, {})
    assert np.array_equal(res.outputs["w"], WEIGHTS)


def test_a_batch_decodes_each_sample() -> None:
    from tessel.sim.api import NpuSession

    stream = encode(WEIGHTS.tobytes())
    session = NpuSession(_program(stream, WEIGHTS.size), DEC, batch=3)
    out = session.run_region({}, [len(q) for q in session.prep.queues], ["w"])
    assert np.array_equal(np.asarray(out["w"]), np.tile(WEIGHTS, (3, 1)))


def test_cost_is_the_slower_of_link_and_decoder() -> None:
    stream = encode(WEIGHTS.tobytes())
    ins = I(Opcode.DMA_LOAD_W, mem=0, ext_addr=0, ext_bytes=len(stream), sram_addr=0,
            out_bytes=WEIGHTS.size)
    mem = DEC.offchip[0]
    link = -(-len(stream) // min(mem.bytes_per_cycle, DEC.derived.sram_bytes_per_cycle))
    for bpc in (1, 4, 64, 4096):
        arch = DEC.with_param("wdecoder.bytes_per_cycle", bpc)
        cost = instruction_cost(ins, arch)
        assert cost.cycles == mem.latency_cycles + max(link, -(-WEIGHTS.size // bpc))
        assert cost.events.offchip_read_bytes[0] == len(stream)
        assert cost.events.sram_write_bytes == WEIGHTS.size == cost.events.weight_decoded_bytes
        pj = energy_breakdown_pj(cost.events, arch)["weight_decode"]
        assert pj == WEIGHTS.size * arch.wdecoder.decode_byte_pj


@pytest.mark.parametrize("how", ["flip", "length"])
def test_a_bad_stream_traps(how: str) -> None:
    stream = bytearray(encode(WEIGHTS.tobytes()))
    out = WEIGHTS.size
    if how == "flip":
        stream[-1] ^= 0x80  # a remainder bit of the padding or a symbol: never the same bytes
        stream += b"\x00"  # and a trailing byte: malformed whatever the flip did
    else:
        out -= 1
    with pytest.raises(TesselSimError, match="weight stream"):
        simulate(_program(bytes(stream), out), DEC, {})


def test_a_target_without_the_decoder_traps() -> None:
    stream = encode(WEIGHTS.tobytes())
    assert not ARCH.wdecoder.enabled
    with pytest.raises(TesselSimError, match="wdecoder.enabled"):
        simulate(_program(stream, WEIGHTS.size, ARCH), ARCH, {})


def test_a_batch_with_its_own_constants_per_sample() -> None:
    from tessel.sim.api import batch_layout
    from tessel.sim.functional import run_functional
    from tessel.sim.prepare import prepare
    from tessel.sim.state import BatchState

    stream = encode(WEIGHTS.tobytes())
    prep = prepare(_program(stream, WEIGHTS.size), DEC)
    extents, _ = batch_layout(prep)
    state = BatchState(DEC, 2, extents, None)  # no shared block: each sample's stream is read
    state.offchip[0][:, C0:C0 + len(stream)] = np.frombuffer(stream, np.uint8)
    run_functional(prep, state)
    assert np.array_equal(state.sram[:, 64:64 + WEIGHTS.size].view(np.int8),
                          np.tile(WEIGHTS, (2, 1)))
