"""Writer/reader round trips, determinism, layout facts, atomic save, arch checks."""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from tsl_samples import ARCH_HASH, codec_and_programs, section_of

from tessel.arch import load_preset
from tessel.binary import (
    MAGIC,
    DType,
    QuantParams,
    SectionKind,
    TensorDescriptor,
    TslProgram,
    load_tsl,
    read_tsl,
    save_tsl,
    write_tsl,
)
from tessel.errors import TesselFormatError
from tessel.isa import Engine, Instruction, Opcode

CODEC, PROGRAMS = codec_and_programs()


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
def test_round_trip_is_equal_and_byte_identical(index: int) -> None:
    program = PROGRAMS[index]
    data = write_tsl(program, codec=CODEC)
    back = read_tsl(data, codec=CODEC)
    assert back == program
    assert write_tsl(back, codec=CODEC) == data


@pytest.mark.parametrize("index", range(3))
def test_the_format_round_trips_another_isa(index: int) -> None:
    codec, programs = codec_and_programs(fake=True)
    data = write_tsl(programs[index], codec=codec)
    assert read_tsl(data, codec=codec) == programs[index]
    assert write_tsl(read_tsl(data, codec=codec), codec=codec) == data


def test_output_is_deterministic_and_independent_of_dict_order() -> None:
    program = PROGRAMS[1]
    shuffled = dataclasses.replace(
        program,
        streams=dict(reversed(list(program.streams.items()))),
        metadata=dict(reversed(list(program.metadata.items()))),
    )
    assert write_tsl(program, codec=CODEC) == write_tsl(shuffled, codec=CODEC)


def test_header_fields_and_alignment() -> None:
    data = write_tsl(PROGRAMS[1], codec=CODEC)
    assert data[:4] == MAGIC
    major, minor, flags, header_size, file_size = struct.unpack_from("<HHIIQ", data, 4)
    assert (major, minor, flags, header_size, file_size) == (1, 0, 0, 80, len(data))
    assert data[32:64] == ARCH_HASH
    count = struct.unpack_from("<I", data, 28)[0]
    assert count == 4 + 3  # four engines + constants, IO, metadata
    _, offset, size = section_of(data, SectionKind.CONSTANTS)
    assert offset % 64 == 0 and size == 16 + len(PROGRAMS[1].constants)
    _, offset, _ = section_of(data, SectionKind.METADATA)
    assert data[offset:].startswith(b'{"blocks":')  # sorted keys, no spaces


def test_raw_byte_streams_are_accepted_and_read_back_decoded() -> None:
    program = PROGRAMS[1]
    raw = {e: CODEC.encode(list(s)) for e, s in program.streams.items()}
    data = write_tsl(dataclasses.replace(program, streams=raw), codec=CODEC)
    assert data == write_tsl(program, codec=CODEC)
    assert read_tsl(data, codec=CODEC).streams == program.streams


def test_arch_hash_accepts_hex_and_checks_mismatch() -> None:
    data = write_tsl(PROGRAMS[1], codec=CODEC)
    assert read_tsl(data, codec=CODEC, expected_arch_hash=ARCH_HASH.hex()).arch_hash == ARCH_HASH
    with pytest.raises(TesselFormatError, match="arch_hash.*recompile"):
        read_tsl(data, codec=CODEC, expected_arch_hash=bytes(32))


def _arch(sizes: tuple[int, ...]) -> SimpleNamespace:
    memories = tuple(SimpleNamespace(size_bytes=s) for s in sizes)
    return SimpleNamespace(arch_hash=ARCH_HASH.hex(), offchip=memories)


def test_addresses_checked_against_arch_memories() -> None:
    data = write_tsl(PROGRAMS[1], codec=CODEC)  # constants at 0:4096+768, I/O in memory 1 < 259
    assert read_tsl(data, codec=CODEC, arch=_arch((1 << 20, 512))) == PROGRAMS[1]
    with pytest.raises(TesselFormatError, match="output 'logits'.*outside memory 1 of 258 bytes"):
        read_tsl(data, codec=CODEC, arch=_arch((1 << 20, 258)))
    with pytest.raises(TesselFormatError, match="memory index 1 does not exist"):
        read_tsl(data, codec=CODEC, arch=_arch((1 << 20,)))
    with pytest.raises(TesselFormatError, match="constants: bytes \\[4096, 4864\\)"):
        read_tsl(data, codec=CODEC, arch=_arch((4000, 512)))


def test_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "model.tsl"
    save_tsl(path, PROGRAMS[1], codec=CODEC)
    assert load_tsl(path, codec=CODEC) == PROGRAMS[1]
    assert os.listdir(tmp_path) == ["model.tsl"]  # no temporary file left


def test_failed_save_leaves_old_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "model.tsl"
    save_tsl(path, PROGRAMS[0], codec=CODEC)
    before = path.read_bytes()
    bad = dataclasses.replace(PROGRAMS[0], metadata={"x": 1})
    object.__setattr__(bad, "metadata", {"x": float("nan")})  # bypass normalisation
    with pytest.raises(TesselFormatError, match="metadata"):
        save_tsl(path, bad, codec=CODEC)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.tsl"]


def test_load_reports_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsl"
    path.write_bytes(b"nope")
    with pytest.raises(TesselFormatError, match="bad.tsl: file is 4 bytes"):
        load_tsl(path, codec=CODEC)
    with pytest.raises(TesselFormatError, match="cannot read"):
        load_tsl(tmp_path / "missing.tsl", codec=CODEC)


def test_float32_scales_are_rounded_so_round_trip_is_exact() -> None:
    q = QuantParams((0.1,), (0,))
    assert q.scales[0] != 0.1 and abs(q.scales[0] - 0.1) < 1e-8
    assert QuantParams((0.1,), (0,), scale_type=q.scale_type.FLOAT64).scales == (0.1,)


def _desc(**changes: object) -> TensorDescriptor:
    return dataclasses.replace(TensorDescriptor("x", DType.INT8, (2, 3), 0, 0), **changes)


@pytest.mark.parametrize(
    ("desc", "message"),
    [
        (_desc(name=""), "name must be"),
        (_desc(shape=(1,) * 9), "rank 9 exceeds"),
        (_desc(shape=(2, 0)), "shape\\[1\\] = 0"),
        (_desc(shape=(1 << 31, 1 << 31)), "more than the maximum"),
        (_desc(quant=QuantParams((1.0, 1.0), (0, 0))), "per-tensor quantisation has 2"),
        (_desc(quant=QuantParams((1.0, 1.0), (0, 0), axis=1)), "2 scales for axis 1 of size 3"),
        (_desc(quant=QuantParams((0.0,), (0,))), "scale\\[0\\] = 0.0"),
        (_desc(quant=QuantParams((1.0,), (128,))), "zero_point\\[0\\] = 128 outside"),
        (_desc(dtype=DType.FLOAT32, quant=QuantParams((1.0,), (0,))), "cannot carry"),
        (_desc(address=2**64 - 3), "64-bit space"),
    ],
)
def test_writer_rejects_bad_descriptor(desc: TensorDescriptor, message: str) -> None:
    program = dataclasses.replace(PROGRAMS[0], inputs=(desc,))
    with pytest.raises(TesselFormatError, match=message):
        write_tsl(program, codec=CODEC)


def test_writer_rejects_duplicate_names_and_missing_end() -> None:
    dup = dataclasses.replace(PROGRAMS[0], inputs=(_desc(),), outputs=(_desc(),))
    with pytest.raises(TesselFormatError, match="already used by input 0"):
        write_tsl(dup, codec=CODEC)
    engine, stream = next(iter(PROGRAMS[1].streams.items()))
    no_end = dataclasses.replace(PROGRAMS[0], streams={engine: stream[:-1]})
    with pytest.raises(TesselFormatError, match="does not end with END"):
        write_tsl(no_end, codec=CODEC)


def test_program_normalises_and_validates_fields() -> None:
    with pytest.raises(TesselFormatError, match="32 bytes"):
        TslProgram(b"short", {})
    with pytest.raises(TesselFormatError, match="not JSON-serialisable"):
        TslProgram(ARCH_HASH, {}, metadata={"x": object()})
    p = TslProgram(ARCH_HASH.hex(), {}, metadata={"t": (1, 2)})
    assert p.arch_hash == ARCH_HASH and p.metadata == {"t": [1, 2]}


def test_real_preset_hash_and_memories() -> None:
    arch = load_preset("u55-256")
    sizes = [m.size_bytes for m in arch.offchip]
    last = len(sizes) - 1
    inside = TensorDescriptor("x", DType.INT8, (16,), last, sizes[last] - 16)
    program = dataclasses.replace(PROGRAMS[0], arch_hash=arch.arch_hash, inputs=(inside,))
    data = write_tsl(program, codec=CODEC)
    assert read_tsl(data, codec=CODEC, arch=arch) == program
    beyond = dataclasses.replace(inside, address=sizes[last] - 15)
    data = write_tsl(dataclasses.replace(program, inputs=(beyond,)), codec=CODEC)
    with pytest.raises(TesselFormatError, match=f"outside memory {last} of {sizes[last]} bytes"):
        read_tsl(data, codec=CODEC, arch=arch)
    other = load_preset("tnpu-s")
    with pytest.raises(TesselFormatError, match="compiled for architecture"):
        read_tsl(data, codec=CODEC, arch=other)


def test_worked_example_of_the_spec_is_byte_exact() -> None:
    """docs/binary-format.md section 13 shows this file byte by byte."""
    program = TslProgram(bytes(range(32)), {Engine.MATRIX: [Instruction.make(Opcode.END)]},
                         metadata={"model": "empty"})
    data = write_tsl(program)
    doc = (Path(__file__).resolve().parents[3] / "docs" / "binary-format.md").read_text()
    dump = doc.split("## 13. Worked example")[1].split("```")[1]
    expected = bytes.fromhex("".join(line[6:53] for line in dump.strip().splitlines()))
    assert data == expected
    assert read_tsl(data) == program
