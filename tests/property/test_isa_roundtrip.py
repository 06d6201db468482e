"""Hypothesis: every instruction with random legal fields survives encode/decode and text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.errors import TesselFormatError
from tessel.isa import (
    SPECS,
    Engine,
    Field,
    Instruction,
    Opcode,
    assemble,
    decode,
    decode_stream,
    disassemble,
    encode,
    encode_stream,
    opcodes_of,
)


def _value(f: Field) -> st.SearchStrategy[int]:
    if f.enum is not None:
        return st.sampled_from(list(f.enum))
    edges = st.sampled_from([f.min, f.max, max(f.min, min(f.max, 0))])
    return st.one_of(edges, st.integers(f.min, f.max))


def instruction(opcodes: list[Opcode] | None = None) -> st.SearchStrategy[Instruction]:
    ops = st.sampled_from(opcodes or list(Opcode))
    return ops.flatmap(lambda op: st.tuples(*(_value(f) for f in SPECS[op].fields)).map(
        lambda args, op=op: Instruction(op, args)))


@settings(max_examples=300, deadline=None)
@given(instruction())
def test_decode_encode_roundtrip(ins: Instruction) -> None:
    data = encode(ins)
    assert len(data) == ins.spec.size
    assert decode(data) == (ins, len(data))


@settings(max_examples=80, deadline=None)
@given(st.lists(instruction(), max_size=8))
def test_assemble_disassemble_roundtrip(prog: list[Instruction]) -> None:
    assert assemble(disassemble(prog)) == prog


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(Engine)).flatmap(
    lambda e: st.tuples(st.just(e), st.lists(instruction(
        [op for op in opcodes_of(e) if op != Opcode.END]), max_size=6))))
def test_stream_roundtrip(case: tuple[Engine, list[Instruction]]) -> None:
    engine, body = case
    body = [i for i in body
            if i.opcode not in (Opcode.WAIT, Opcode.SIGNAL) or i.engine != engine]
    prog = [*body, Instruction.make(Opcode.END)]
    assert decode_stream(engine, encode_stream(prog)) == prog


@settings(max_examples=300, deadline=None)
@given(instruction(), st.integers(0, 10**6), st.integers(0, 48), st.sampled_from(list(Engine)))
def test_mutated_bytes_raise_only_format_errors(ins: Instruction, bit: int, cut: int,
                                                engine: Engine) -> None:
    data = bytearray(encode(ins))
    data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
    for blob in (bytes(data), bytes(data[: len(data) - cut % len(data)])):
        try:
            got, end = decode(blob)
            assert end == len(encode(got)) and encode(got) == blob[:end]
        except TesselFormatError:
            pass
        try:
            decode_stream(engine, blob)
        except TesselFormatError:
            pass
