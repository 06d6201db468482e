"""Encoding / decoding of single instructions and engine queues."""

from __future__ import annotations

import pytest

from tessel.errors import TesselFormatError
from tessel.isa import (
    SPECS,
    AccMode,
    AccSrc,
    DType,
    Engine,
    Instruction,
    Opcode,
    check_stream,
    decode,
    decode_stream,
    encode,
    encode_stream,
    opcodes_of,
)

LOAD = Instruction.make(Opcode.DMA_LOAD, mem=1, dtype=DType.I16, d0=3, d1=2, ext_addr=0x1234,
                        ext_s0=2, ext_s1=-6, sram_addr=0x40, sram_s0=2, sram_s1=6)
END = Instruction.make(Opcode.END)


def test_sizes_are_whole_words_and_fit_the_fields() -> None:
    for op, spec in SPECS.items():
        assert spec.size % 8 == 0 and spec.size * 8 >= spec.bits > spec.size * 8 - 64, op
        assert len({f.name for f in spec.fields}) == len(spec.fields), op


def test_packing_is_lsb_first_from_bit_8() -> None:
    word = int.from_bytes(encode(LOAD), "little")
    assert word & 0xFF == Opcode.DMA_LOAD
    assert (word >> 8) & 0b111 == 1  # mem
    assert (word >> 11) & 0b11 == DType.I16
    assert (word >> 13) & 0xFFFF == 3  # d0
    assert (word >> 29) & 0xFFFF == 2  # d1
    ext_at = 8 + 3 + 2 + 4 * 16
    assert (word >> ext_at) & 0xFFFFFFFF == 0x1234
    s1 = (word >> (ext_at + 32 + 32)) & 0xFFFFFFFF
    assert s1 == (-6) & 0xFFFFFFFF  # two's complement


def test_roundtrip_and_offset() -> None:
    data = b"\xaa" * 8 + encode(LOAD) + encode(END)
    ins, nxt = decode(data, 8)
    assert ins == LOAD and nxt == 8 + SPECS[Opcode.DMA_LOAD].size
    assert decode(data, nxt) == (END, len(data))


@pytest.mark.parametrize("data,offset,message", [
    (b"\x00" * 8, 0, "offset 0: unknown opcode 0x00"),
    (b"\x01" * 8 + b"\xff" * 8, 8, "offset 8: unknown opcode 0xff"),
    (encode(LOAD)[:20], 0, "DMA_LOAD needs 48 bytes, only 20 left"),
    (b"", 0, "no instruction"),
    (encode(END), 8, "offset 8: no instruction"),
])
def test_decode_errors(data: bytes, offset: int, message: str) -> None:
    with pytest.raises(TesselFormatError, match=message):
        decode(data, offset)


def _patch(instr: Instruction, field: str, raw: int) -> bytes:
    spec = instr.spec
    at = dict(zip([f.name for f in spec.fields], spec.offsets(), strict=True))[field]
    bits = spec.field(field).bits
    word = int.from_bytes(encode(instr), "little")
    word = (word & ~(((1 << bits) - 1) << at)) | (raw << at)
    return word.to_bytes(spec.size, "little")


def test_decode_rejects_bad_field_values_and_padding() -> None:
    with pytest.raises(TesselFormatError, match=r"DMA_LOAD.d0 must be in \[1, 65535\], got 0"):
        decode(_patch(LOAD, "d0", 0))
    bad_dtype = "DMA_LOAD.dtype must be one of I8, I16, I32, got 3"
    with pytest.raises(TesselFormatError, match=bad_dtype):
        decode(_patch(LOAD, "dtype", 3))
    req = Instruction.make(Opcode.REQUANT, src=AccSrc.ACC, src_addr=0, ch=4, out_dtype=DType.I8,
                           dst_addr=0, param_addr=0, act_min=-128, act_max=127)
    with pytest.raises(TesselFormatError, match=r"REQUANT has non-zero padding bits"):
        data = bytearray(encode(req))
        data[-1] |= 0x80
        decode(bytes(data))


def test_instruction_validation() -> None:
    with pytest.raises(TesselFormatError, match="DMA_LOAD.mem is required"):
        Instruction.make(Opcode.DMA_LOAD, dtype=DType.I8, ext_addr=0, sram_addr=0)
    with pytest.raises(TesselFormatError, match="has no field 'bogus'"):
        Instruction.make(Opcode.END, bogus=1)
    with pytest.raises(TesselFormatError, match=r"DMA_LOAD.mem must be in \[0, 7\], got 8"):
        LOAD.replace(mem=8)
    with pytest.raises(TesselFormatError, match="takes 0 field values, got 1"):
        Instruction(Opcode.END, (1,))
    with pytest.raises(TesselFormatError, match="must be an integer"):
        LOAD.replace(d0=True)
    with pytest.raises(TesselFormatError, match="unknown opcode"):
        Instruction(0x7F, ())


def test_instruction_access_and_normalisation() -> None:
    assert LOAD.ext_s1 == -6 and LOAD.dtype is DType.I16 and LOAD.as_dict()["d2"] == 1
    conv = Instruction(Opcode.CONV, tuple(1 if f.default is None else f.default
                                          for f in SPECS[Opcode.CONV].fields))
    assert conv.mode is AccMode.OVERWRITE and conv.opcode is Opcode.CONV
    assert Instruction(int(Opcode.END)) == END and hash(Instruction(Opcode.END)) == hash(END)
    with pytest.raises(AttributeError, match="no field 'm'"):
        _ = LOAD.m
    assert str(END) == "END" and "ext_addr=0x1234" in str(LOAD)


def _queue(engine: Engine) -> list[Instruction]:
    other = Engine.VECTOR if engine != Engine.VECTOR else Engine.MATRIX
    return [Instruction.make(Opcode.WAIT, engine=other, token=3),
            Instruction.make(Opcode.SIGNAL, engine=other, token=15), END]


def test_stream_roundtrip_and_rules() -> None:
    q = [LOAD, *_queue(Engine.DMA_IN)]
    assert decode_stream(Engine.DMA_IN, encode_stream(q)) == q
    with pytest.raises(TesselFormatError, match="DMA_OUT queue, instruction 0 at offset 0: "
                                                "DMA_LOAD belongs to the DMA_IN engine"):
        decode_stream(Engine.DMA_OUT, encode_stream(q))
    with pytest.raises(TesselFormatError, match="does not end with END"):
        decode_stream(Engine.DMA_IN, encode_stream(q[:-1]))
    with pytest.raises(TesselFormatError, match="does not end with END"):
        decode_stream(Engine.DMA_IN, b"")
    with pytest.raises(TesselFormatError, match="instruction 0 is END but is not the last"):
        check_stream(Engine.MATRIX, [END, END])
    with pytest.raises(TesselFormatError, match=r"instruction 0 \(WAIT\) names its own engine"):
        check_stream(Engine.VECTOR, [Instruction.make(Opcode.WAIT, engine=Engine.VECTOR,
                                                      token=0), END])
    bad = encode_stream(q)[:-8] + b"\x00" * 8
    with pytest.raises(TesselFormatError, match="DMA_IN queue, instruction 3: offset 64: unknown"):
        decode_stream(Engine.DMA_IN, bad)


def test_opcodes_of_engines_partition_the_table() -> None:
    control = {Opcode.END, Opcode.WAIT, Opcode.SIGNAL}
    seen: set[Opcode] = set()
    for engine in Engine:
        own = set(opcodes_of(engine)) - control
        # DWCONV is the one opcode two engines run (the array's depthwise mode, the vector unit)
        assert own & seen <= {Opcode.DWCONV} and control <= set(opcodes_of(engine))
        seen |= own
    assert seen | control == set(Opcode)
    assert Opcode.DWCONV in opcodes_of(Engine.MATRIX) and Opcode.DWCONV in opcodes_of(Engine.VECTOR)
    assert set(opcodes_of(Engine.DMA_OUT)) - control == {Opcode.DMA_STORE}


def test_make_equals_the_checked_constructor() -> None:
    """make() (defaults checked once, only the given values checked) builds what the checked
    constructor builds from the full field list, for every opcode with only its required
    fields and with every field given; a missing required field or a bad value is refused."""
    from tessel.isa.table import SPECS

    for op, spec in SPECS.items():
        values = {f.name: (f.enum(next(iter(f.enum))) if f.enum is not None else f.min)
                  for f in spec.fields}
        required = {f.name: values[f.name] for f in spec.fields if f.default is None}
        full = Instruction(op, tuple(values.values()))
        assert Instruction.make(op, **values) == full
        defaults = tuple(values[f.name] if f.default is None else f.default
                         for f in spec.fields)
        assert Instruction.make(op, **required) == Instruction(op, defaults)
        for name in required:
            with pytest.raises(TesselFormatError, match=f"{op.name}.{name} is required"):
                Instruction.make(op, **{k: v for k, v in required.items() if k != name})
        ints = [f for f in spec.fields if f.enum is None and f.max < 2**40]
        if ints:
            with pytest.raises(TesselFormatError, match=f"{op.name}.{ints[0].name} must be"):
                Instruction.make(op, **{**required, ints[0].name: ints[0].max + 1})


def _decode_one_by_one(engine: Engine, data: bytes) -> list[Instruction]:
    """The oracle for decode_stream: ``decode`` at each offset, then the queue's rules."""
    out, offset = [], 0
    while offset < len(data):
        try:
            ins, offset_next = decode(data, offset)
        except TesselFormatError as exc:
            raise TesselFormatError(f"{engine.name} queue, instruction {len(out)}: {exc}") from None
        if not ins.spec.runs_on(engine):
            raise TesselFormatError(f"{engine.name} queue, instruction {len(out)} at offset "
                                    f"{offset}: {ins.opcode.name} belongs to the "
                                    f"{ins.spec.engine.name} engine")
        out.append(ins)
        offset = offset_next
    check_stream(engine, out)
    return out


def test_stream_decoding_equals_decoding_each_instruction_on_corrupted_queues() -> None:
    """decode_stream decodes each distinct encoding once with inline checks: on queues with
    repeated instructions and random byte corruptions (bad opcodes, fields out of range, enum
    values, padding, truncation) it gives the instructions or the error the one-by-one decoder
    gives."""
    import random

    from isa_samples import SAMPLES  # tests/unit/isa is on sys.path (pytest prepends it)

    rng = random.Random(7)
    outcomes = set()
    for engine in Engine:
        body = [i for i in SAMPLES.values() if i.spec.runs_on(engine) and i.opcode is not
                Opcode.END and not (i.opcode in (Opcode.WAIT, Opcode.SIGNAL)
                                    and i.engine == engine)]
        queue = [rng.choice(body) for _ in range(40)] + [END]
        clean = encode_stream(queue)
        assert decode_stream(engine, clean) == queue
        for _ in range(400):
            data = bytearray(clean)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.1:
                data = data[:rng.randrange(len(data))]
            data = bytes(data)
            try:
                want: object = _decode_one_by_one(engine, data)
            except TesselFormatError as exc:
                want = str(exc)
            try:
                got: object = decode_stream(engine, data)
            except TesselFormatError as exc:
                got = str(exc)
            assert got == want
            outcomes.add(type(want).__name__ if not isinstance(want, str) else want.split(":")[-2])
    assert len(outcomes) > 5  # the corruptions reach several kinds of error, and valid queues


def test_stream_decoding_checks_every_field_at_the_edges_of_its_range() -> None:
    """Every field of every opcode set (in the encoded word) to min - 1, min, max and max + 1
    where its bits can hold them, and every enum value the bits can hold: decode_stream agrees
    with the one-by-one decoder."""
    from isa_samples import SAMPLES  # tests/unit/isa is on sys.path (pytest prepends it)

    checked = 0
    for op, sample in SAMPLES.items():
        if op is Opcode.END:
            continue
        engine = next(e for e in Engine if sample.spec.runs_on(e) and not (
            op in (Opcode.WAIT, Opcode.SIGNAL) and sample.engine == e))
        word = int.from_bytes(encode(sample), "little")
        at = 8
        for f in SPECS[op].fields:
            mask = (1 << f.bits) - 1
            values = range(1 << f.bits) if f.enum is not None and f.bits <= 8 else \
                (f.min - 1, f.min, f.max, f.max + 1)
            for v in values:
                raw = v & mask
                if f.enum is None and (raw - (1 << f.bits) if f.signed and raw >> (f.bits - 1)
                                       else raw) != v:
                    continue  # the bits cannot hold v
                w = (word & ~(mask << at)) | (raw << at)
                data = w.to_bytes(SPECS[op].size, "little") + encode(END)
                try:
                    want: object = _decode_one_by_one(engine, data)
                except TesselFormatError as exc:
                    want = str(exc)
                try:
                    got: object = decode_stream(engine, data)
                except TesselFormatError as exc:
                    got = str(exc)
                assert got == want, (op, f.name, v)
                checked += 1
            at += f.bits
    assert checked > 500
