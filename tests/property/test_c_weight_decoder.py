"""DMA_LOAD_W on the C NPU model against the Python simulator: weight streams the encoder writes
(byte and nibble symbols, raw, 2:4 blocks; weights from narrow to uniform) and hostile variants
of them (bits flipped, truncated, extended, header fields changed; in 2:4 streams block fields,
rank bytes, rank padding and the values' mode changed) decoded from the same memories; the
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
from tessel.isa import Engine, Instruction, Opcode, encode_stream, sparse24
from tessel.isa.weight_codec import SPARSE_HEADER, StreamMode, encode, info
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


def _load(stream: bytes, ext_addr: int, sram_addr: int, out_bytes: int) -> Instruction:
    """A DMA_LOAD_W of all of ``stream`` (at ``ext_addr`` in memory 0) to ``sram_addr``."""
    return Instruction.make(Opcode.DMA_LOAD_W, mem=0, ext_addr=ext_addr,
                            ext_bytes=len(stream), sram_addr=sram_addr, out_bytes=out_bytes)


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
    load = _load(stream, ext_addr, sram_addr, out)
    ran = compare(DEC, [load], [("EXT", ext_addr, stream)])
    if how == "none":
        assert ran


def test_every_stream_mode_decodes_in_c() -> None:
    rng = np.random.default_rng(5)
    cases = {StreamMode.BYTES: (np.round(rng.normal(0, 3, 2000)).astype(np.int8).tobytes(), False),
             StreamMode.NIBBLES: (bytes(rng.integers(0, 3, 2000, dtype=np.uint8) * 0x11), True),
             StreamMode.RAW: (rng.integers(0, 256, 2000, dtype=np.uint8).tobytes(), False),
             StreamMode.SPARSE24: (_sparse_blocks(5, 8, 75, False, 33), False)}
    for mode, (data, nibbles) in cases.items():
        stream = encode(data, nibbles=nibbles, sparse=mode is StreamMode.SPARSE24)
        assert info(stream).mode is mode
        load = _load(stream, 64, 128, len(data))
        mem = {k: np.array(v, np.uint8) for k, v in
               _contents(Case(Engine.DMA_IN, [load], patches=[[[("EXT", 64, stream)]]]), 0)[0]
               .items()}
        code, _, trap = cengine.run_queue(DEC, int(Engine.DMA_IN), encode_stream([load]), 1,
                                          mem["sram"], mem["acc"], mem["lut"], mem["ext"])
        assert code == 0, trap
        assert mem["sram"][128:128 + len(data)].tobytes() == data


def test_without_the_decoder_both_trap() -> None:
    stream = encode(bytes(300))
    load = _load(stream, 0, 0, 300)
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
    load = _load(stream, 32, 0, n)
    assert compare(DEC, [load], [("EXT", 32, stream)]) is valid


def _sparse_blocks(seed: int, count: int, groups: int, int4: bool, tail: int) -> bytes:
    """`count` 2:4 blocks of `groups` groups (narrow values, then legal index nibbles, the
    padding nibble of an odd count zero) and `tail` bytes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        if int4:
            nib = np.clip(np.round(rng.normal(0, 2.0, 2 * groups)), -8, 7).astype(np.int8) & 0xF
            values = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()
        else:
            values = np.clip(np.round(rng.normal(0, 4.0, 2 * groups)), -128, 127) \
                .astype(np.int8).tobytes()
        index = sparse24.PATTERNS[rng.integers(0, len(sparse24.PATTERNS), groups)]
        out.append(values + sparse24.pack_nibbles(index))
    return b"".join(out) + rng.integers(0, 256, tail, dtype=np.uint8).tobytes()


SPARSE_MUTATIONS = ("none", "flip", "truncate", "extend", "length", "out_bytes", "field", "rank",
                    "padding", "values_mode")


def mutate_sparse(stream: bytes, how: str, at: int, bit: int) -> tuple[bytes, int]:
    """(the 2:4 stream changed `how`, the out_bytes to ask for): a block field (value bytes,
    groups, blocks, values length) moved by -1..1, a rank byte set to 216 or more, a non-zero
    padding rank, the values stream's mode changed (to 3: nested), or a change of `mutate`."""
    _, groups, count, vlen = (int.from_bytes(stream[o:o + 4], "little") for o in (5, 9, 13, 17))
    s = bytearray(stream)
    ranks = SPARSE_HEADER + vlen
    if how == "field":
        o = 5 + 4 * (at % 4)
        s[o:o + 4] = max(0, int.from_bytes(s[o:o + 4], "little") + bit % 3 - 1).to_bytes(4,
                                                                                           "little")
    elif how == "rank":
        s[ranks + at % (len(s) - ranks)] = 216 + bit * 5
    elif how == "padding" and (count * groups) % 3:
        s[-1] += 6 ** ((count * groups) % 3)
    elif how == "values_mode":
        s[SPARSE_HEADER] = bit % 4
    else:
        return mutate(stream, how, at, bit)
    return bytes(s), info(stream).decoded


@settings(max_examples=200, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(4, 12), groups=st.integers(50, 90),
       int4=st.booleans(), tail=st.integers(0, 100), how=st.sampled_from(SPARSE_MUTATIONS),
       at=st.integers(0, 2**16), bit=st.integers(0, 7),
       sram_addr=st.sampled_from([0, 77, SRAM - 4000]))
def test_c_decoder_equals_the_simulator_on_2_4_streams(seed: int, count: int, groups: int,
                                                       int4: bool, tail: int, how: str, at: int,
                                                       bit: int, sram_addr: int) -> None:
    stream = encode(_sparse_blocks(seed, count, groups, int4, tail), nibbles=int4, sparse=True)
    assert info(stream).mode is StreamMode.SPARSE24
    stream, out = mutate_sparse(stream, how, at, bit)
    load = _load(stream, 40, sram_addr, out)
    ran = compare(DEC, [load], [("EXT", 40, stream)])
    if how == "none" or (how == "padding" and (count * groups) % 3 == 0):
        assert ran
    if how in ("rank", "padding") and (count * groups) % 3:
        assert not ran


def _sparse(values: bytes, vb: int, groups: int, count: int, n: int, ranks: list[int]) -> bytes:
    """A 2:4 stream from its fields: the values stream, the block shape, the rank bytes."""
    head = b"".join(x.to_bytes(4, "little") for x in (n, vb, groups, count, len(values)))
    return bytes([StreamMode.SPARSE24]) + head + values + bytes(ranks)


def _raw(data: bytes) -> bytes:
    return bytes([StreamMode.RAW]) + len(data).to_bytes(4, "little") + data


# two blocks of 2 value bytes and 3 groups (ranks 5 0 1 | 2 3 4: 5 + 0 + 36, 2 + 18 + 144),
# index bytes 0x4E 0x08 | 0x9C 0x0D, a tail of one byte
SPARSE_OK = _sparse(_raw(b"\x01\x02\x03\x04\x05"), 2, 3, 2, 9, [41, 164])
CRAFTED_2_4 = {  # name: (stream, the bytes it decodes to, or None when it traps)
    "2:4 blocks with raw values": (SPARSE_OK, b"\x01\x02\x4e\x08\x03\x04\x9c\x0d\x05"),
    "2:4 rank byte 216": (_sparse(_raw(bytes(5)), 2, 3, 2, 9, [41, 216]), None),
    "2:4 padding rank": (_sparse(_raw(bytes(7)), 2, 2, 2, 9, [41, 1 + 6]), None),
    "2:4 index section short": (SPARSE_OK[:-1], None),
    "2:4 index section long": (SPARSE_OK + b"\x00", None),
    "2:4 blocks past n": (_sparse(_raw(bytes(4)), 2, 3, 2, 7, [41, 164]), None),
    "2:4 zero value bytes": (_sparse(_raw(bytes(5)), 0, 3, 2, 9, [41, 164]), None),
    "2:4 zero groups": (_sparse(_raw(bytes(9)), 2, 0, 2, 9, []), None),
    "2:4 values one byte short": (_sparse(_raw(bytes(4)), 2, 3, 2, 9, [41, 164]), None),
    "2:4 values past the end": (SPARSE_OK[:17] + (99).to_bytes(4, "little") + SPARSE_OK[21:],
                                None),
    "2:4 values in mode 3": (_sparse(_sparse(_raw(bytes(4)), 1, 1, 1, 5, [0]), 2, 3, 2, 9,
                                     [41, 164]), None),
    "2:4 header short": (SPARSE_OK[:20], None),
}


@pytest.mark.parametrize("name", sorted(CRAFTED_2_4))
def test_crafted_2_4_streams_decode_or_trap_alike(name: str) -> None:
    stream, want = CRAFTED_2_4[name]
    n = int.from_bytes(stream[1:5], "little")
    load = _load(stream, 32, 5, n)
    assert compare(DEC, [load], [("EXT", 32, stream)]) is (want is not None)
    if want is not None:
        mem = {k: np.array(v, np.uint8) for k, v in _contents(
            Case(Engine.DMA_IN, [load], patches=[[[("EXT", 32, stream)]]]), 0)[0].items()}
        code, _, trap = cengine.run_queue(DEC, int(Engine.DMA_IN), encode_stream([load]), 1,
                                          mem["sram"], mem["acc"], mem["lut"], mem["ext"])
        assert code == 0, trap
        assert mem["sram"][5:5 + n].tobytes() == want
