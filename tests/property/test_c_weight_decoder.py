"""DMA_LOAD_W on the C NPU model against the Python simulator: weight streams the encoder writes
(byte and nibble symbols, raw; weights from narrow to uniform) and hostile variants of them
(bits flipped, truncated, extended, header fields changed) decoded from the same memories; the
memories must be equal afterwards, or both must trap at the same instruction. A target without
the weight decoder traps in both."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_kit import ARCH, EXT_REGION, Case, _contents

from tessel.binary import TslProgram
from tessel.errors import TesselSimError
from tessel.isa import Engine, Instruction, Opcode, encode_stream
from tessel.isa.weight_codec import StreamMode, encode, info
from tessel.runtime import cengine
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

pytestmark = pytest.mark.skipif(cengine.available() is not None,
                                reason=str(cengine.available()))

DEC = ARCH.with_param("wdecoder.enabled", True)
SRAM = ARCH.onchip.sram_bytes


def _run_python(arch, instrs: list[Instruction], c: dict[str, np.ndarray]):
    state = MachineState(arch)
    state.sram[:] = c["sram"]
    state.acc_bytes[:] = c["acc"]
    state.lut_bytes[:] = c["lut"]
    state.offchip[0][:EXT_REGION] = c["ext"]
    end = Instruction.make(Opcode.END)
    queues = {e: ((*instrs, end) if e is Engine.DMA_IN else (end,)) for e in Engine}
    prog = TslProgram(arch.arch_hash_bytes, queues, b"", 0, 0, (), ())
    try:
        run_functional(prepare(prog, arch), state)
    except TesselSimError as exc:
        return None, int(str(exc).split(" instruction ", 1)[1].split(" ", 1)[0])
    return {"sram": state.sram.tobytes(), "ext": state.offchip[0][:EXT_REGION].tobytes()}, None


def _run_c(arch, instrs: list[Instruction], c: dict[str, np.ndarray]):
    mem = {k: np.array(v, np.uint8) for k, v in c.items()}
    code, index, _ = cengine.run_queue(arch, int(Engine.DMA_IN), encode_stream(instrs),
                                       len(instrs), mem["sram"], mem["acc"], mem["lut"],
                                       mem["ext"])
    if code:
        assert code == cengine.NPU_TRAP, code
        return None, index
    return {"sram": mem["sram"].tobytes(), "ext": mem["ext"].tobytes()}, None


def compare(arch, instrs: list[Instruction], patches: list[tuple[str, int, bytes]]) -> bool:
    """Run both engines on the same memories; True when neither trapped."""
    case = Case(Engine.DMA_IN, instrs, patches=[[patches]], seed=len(patches))
    (sample,) = _contents(case, 0)
    want, want_trap = _run_python(arch, instrs, sample)
    got, got_trap = _run_c(arch, instrs, sample)
    assert got_trap == want_trap, (got_trap, want_trap, instrs)
    if want is not None:
        assert got == want, instrs
    return want is not None


@st.composite
def weights(draw) -> bytes:
    n = draw(st.integers(1, 3000))
    kind = draw(st.sampled_from(["normal", "uniform", "zeros", "extremes", "int4"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "normal":
        sigma = draw(st.sampled_from([0.3, 2.0, 6.0, 20.0]))
        return np.clip(np.round(rng.normal(0, sigma, n)), -128, 127).astype(np.int8).tobytes()
    if kind == "uniform":
        return rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    if kind == "zeros":
        return bytes(n)
    if kind == "extremes":
        return rng.choice(np.array([0, 1, 0x7F, 0x80, 0xFF], np.uint8), n).tobytes()
    nib = np.clip(np.round(rng.normal(0, 2.0, 2 * n)), -8, 7).astype(np.int8) & 0xF
    return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()


MUTATIONS = ("none", "flip", "truncate", "extend", "mode", "length", "unary", "out_bytes")


def mutate(stream: bytes, how: str, at: int, bit: int) -> tuple[bytes, int]:
    """(the stream changed `how`, the out_bytes to ask for)."""
    out = info(stream).decoded
    s = bytearray(stream)
    if how == "flip":
        s[at % len(s)] ^= 1 << bit
    elif how == "truncate":
        s = s[:max(1, at % len(s))]
    elif how == "extend":
        s += bytes([bit])
    elif how == "mode":
        s[0] = bit % 4
    elif how == "length":
        s[1:5] = (out + (bit % 3) - 1).to_bytes(4, "little", signed=True)
    elif how == "unary" and len(s) >= 9:
        u = int.from_bytes(s[5:9], "little")
        s[5:9] = max(0, u + (bit % 5) - 2).to_bytes(4, "little")
    elif how == "out_bytes":
        out += 1 if bit % 2 else -1
    return bytes(s), max(out, 1)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=weights(), nibbles=st.booleans(), how=st.sampled_from(MUTATIONS),
       at=st.integers(0, 2**16), bit=st.integers(0, 7), ext_addr=st.integers(0, 4096),
       sram_addr=st.sampled_from([0, 1, 77, SRAM - 4000]))
def test_c_decoder_equals_the_simulator(data: bytes, nibbles: bool, how: str, at: int, bit: int,
                                        ext_addr: int, sram_addr: int) -> None:
    stream, out = mutate(encode(data, nibbles=nibbles), how, at, bit)
    load = Instruction.make(Opcode.DMA_LOAD_W, mem=0, ext_addr=ext_addr, ext_bytes=len(stream),
                            sram_addr=sram_addr, out_bytes=out)
    ran = compare(DEC, [load], [("EXT", ext_addr, stream)])
    if how == "none":
        assert ran


def test_every_stream_mode_decodes_in_c() -> None:
    rng = np.random.default_rng(5)
    cases = {StreamMode.BYTES: (np.round(rng.normal(0, 3, 2000)).astype(np.int8).tobytes(), False),
             StreamMode.NIBBLES: (bytes(rng.integers(0, 3, 2000, dtype=np.uint8) * 0x11), True),
             StreamMode.RAW: (rng.integers(0, 256, 2000, dtype=np.uint8).tobytes(), False)}
    for mode, (data, nibbles) in cases.items():
        stream = encode(data, nibbles=nibbles)
        assert info(stream).mode is mode
        load = Instruction.make(Opcode.DMA_LOAD_W, mem=0, ext_addr=64, ext_bytes=len(stream),
                                sram_addr=128, out_bytes=len(data))
        mem = {k: np.array(v, np.uint8) for k, v in
               _contents(Case(Engine.DMA_IN, [load], patches=[[[("EXT", 64, stream)]]]), 0)[0]
               .items()}
        code, _, trap = cengine.run_queue(DEC, int(Engine.DMA_IN), encode_stream([load]), 1,
                                          mem["sram"], mem["acc"], mem["lut"], mem["ext"])
        assert code == 0, trap
        assert mem["sram"][128:128 + len(data)].tobytes() == data


def test_without_the_decoder_both_trap() -> None:
    stream = encode(bytes(300))
    load = Instruction.make(Opcode.DMA_LOAD_W, mem=0, ext_addr=0, ext_bytes=len(stream),
                            sram_addr=0, out_bytes=300)
    assert not compare(ARCH, [load], [("EXT", 0, stream)])
    mem = {k: np.array(v, np.uint8) for k, v in
           _contents(Case(Engine.DMA_IN, [load], patches=[[[("EXT", 0, stream)]]]), 0)[0].items()}
    code, index, trap = cengine.run_queue(ARCH, int(Engine.DMA_IN), encode_stream([load]), 1,
                                          mem["sram"], mem["acc"], mem["lut"], mem["ext"])
    assert code == cengine.NPU_TRAP and index == 0 and "weight decoder" in trap


def _crafted(mode: StreamMode, n: int, ks: list[int], us: list[int], rems: list[tuple[int, int]]
             ) -> bytes:
    """A coded stream from its fields: block parameters, unary codes, (remainder, width)s."""
    bits = [(k >> j) & 1 for k in ks for j in range(3)]
    unary = [b for u in us for b in [1] * u + [0]]
    bits += unary + [(r >> j) & 1 for r, w in rems for j in range(w)]
    packed = np.packbits(np.array(bits + [0] * (-len(bits) % 8), np.uint8), bitorder="little")
    return (bytes([mode]) + n.to_bytes(4, "little") + len(unary).to_bytes(4, "little")
            + packed.tobytes())


CRAFTED = {  # name: (stream, whether it decodes)
    "valid nibbles": (_crafted(StreamMode.NIBBLES, 1, [3], [1, 0], [(5, 3), (2, 3)]), True),
    "symbol above 2^S - 1": (_crafted(StreamMode.NIBBLES, 1, [3], [7, 0], [(0, 3), (0, 3)]), False),
    "k >= S": (_crafted(StreamMode.NIBBLES, 1, [4], [0, 0], [(0, 4), (0, 4)]), False),
    "unary above ESCAPE": (_crafted(StreamMode.BYTES, 1, [0], [9], []), False),
    "escape": (_crafted(StreamMode.BYTES, 1, [0], [8], [(200, 8)]), True),
    "one symbol short": (_crafted(StreamMode.BYTES, 2, [1], [0], [(1, 1)]), False),
    "a spare byte": (_crafted(StreamMode.BYTES, 1, [1], [0], [(1, 1)]) + b"\x00", False),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_streams_decode_or_trap_alike(name: str) -> None:
    stream, valid = CRAFTED[name]
    n = int.from_bytes(stream[1:5], "little")
    load = Instruction.make(Opcode.DMA_LOAD_W, mem=0, ext_addr=32, ext_bytes=len(stream),
                            sram_addr=0, out_bytes=n)
    assert compare(DEC, [load], [("EXT", 32, stream)]) is valid
