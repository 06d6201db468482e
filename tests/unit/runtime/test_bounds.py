"""Bounded memory and the smaller refusals: the simulator's memory budget (a run past it is
refused before allocating, a batch is split into chunks that fit), I/O descriptors checked
against the shapes the host graphs declare, a DMA memory the target lacks refused by the
profile, float64 inputs beyond float32, `run --check` against a model whose outputs differ,
rank-0 descriptors through disasm / asm."""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path

import numpy as np
import pytest

from tessel.binary import read_tsl, write_tsl
from tessel.binary.program import TensorDescriptor
from tessel.binary.text import program_from_text, program_to_text
from tessel.errors import TesselConfigError, TesselFormatError
from tessel.isa.instruction import Instruction
from tessel.runtime.check import compare
from tessel.runtime.compiled import CompiledModel, load
from tessel.sim.budget import DEFAULT_BUDGET, ENV, run_bytes, samples_within_budget
from tessel.sim.prepare import prepared

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_default_budget_is_a_gibibyte() -> None:
    assert DEFAULT_BUDGET == 1 << 30


def test_budget_counts_the_memories_a_run_touches(monkeypatch) -> None:
    cm = load(CORPUS / "tiny_mlp.tsl")
    prep = prepared(cm.program, cm.arch)
    one = run_bytes(prep, 1)
    sram = cm.arch.onchip.sram_bytes
    assert sram < one < sram + (1 << 20)  # the SRAM and a little: not the 512 MiB of DRAM
    assert run_bytes(prep, 4) - run_bytes(prep, 3) == run_bytes(prep, 2) - one > sram
    monkeypatch.setenv(ENV, "not a number")
    with pytest.raises(TesselConfigError, match=ENV):
        cm.run(np.zeros((2, 16), np.float32))


def test_batch_is_split_into_chunks_that_fit(monkeypatch) -> None:
    cm = load(CORPUS / "tiny_cnn.tsl")
    prep = prepared(cm.program, cm.arch)
    one = run_bytes(prep, 1)
    monkeypatch.setenv(ENV, str((3 * one >> 20) + 1))  # room for a few samples, not 12
    fit = samples_within_budget(prep)
    assert 1 <= fit < 12 and run_bytes(prep, fit) <= (3 * one >> 20) + 1 << 20
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((12, 1, 3, 8, 8)).astype(np.float32)
    batched = cm.run_batch(xs)[0]
    single = np.stack([cm.run(x)[0] for x in xs])
    np.testing.assert_array_equal(batched, single)


def test_resized_output_descriptor_is_refused() -> None:
    """An output descriptor grown to 400 MB inside a valid file (the memory holds it): the
    reader compares it with the epilogue's declared input; nothing large is allocated."""
    program = read_tsl((CORPUS / "tiny_regions.tsl").read_bytes())
    last = program.outputs[-1]
    big = dataclasses.replace(last, shape=(1, 4, 10_000, 10_000))
    data = write_tsl(dataclasses.replace(program, outputs=(*program.outputs[:-1], big)))
    before = _peak_mib()
    with pytest.raises(TesselFormatError, match="host graph 'epilogue' declares \\[1, 4, 6, 6\\]"):
        CompiledModel.from_bytes(data)
    assert _peak_mib() - before < 64


def test_resized_descriptor_past_the_budget_is_refused(monkeypatch) -> None:
    """The simulator itself (no host graph to compare with): a run that would copy a 40 MB
    output is refused under a 16 MiB budget before any memory is allocated."""
    from tessel.sim.api import simulate
    from tessel.sim.state import IO_DTYPE

    cm = load(CORPUS / "tiny_mlp.tsl")
    out = cm.program.outputs[0]
    big = dataclasses.replace(out, shape=(1, 40_000_000))
    program = dataclasses.replace(cm.program, outputs=(big,))
    inputs = {d.name: np.zeros(d.shape, IO_DTYPE[d.dtype]) for d in program.inputs}
    monkeypatch.setenv(ENV, "16")
    before = _peak_mib()
    with pytest.raises(TesselConfigError, match="budget of 16 MiB"):
        simulate(program, cm.arch, inputs)
    assert _peak_mib() - before < 32


def test_profile_refuses_a_dma_memory_the_target_lacks() -> None:
    program = read_tsl((CORPUS / "tiny_mlp.tsl").read_bytes())
    streams = {e: list(s) for e, s in program.streams.items()}
    engine, k = next((e, k) for e, s in streams.items() for k, i in enumerate(s)
                     if i.opcode.name == "DMA_LOAD")
    fields = streams[engine][k].as_dict() | {"mem": 3}
    streams[engine][k] = Instruction.make(streams[engine][k].opcode, **fields)
    cm = CompiledModel.from_bytes(write_tsl(dataclasses.replace(program, streams=streams)))
    with pytest.raises(TesselFormatError, match="field 'mem' = 3, but the target has 1"):
        _ = cm.profile


def test_float64_beyond_float32_is_refused() -> None:
    cm = load(CORPUS / "tiny_mlp.tsl")
    x = np.zeros((2, 16))
    x[1, 3] = 1e300
    with pytest.raises(TesselConfigError, match="beyond the float32 range.*index \\[1, 3\\]"):
        cm.run(x)
    assert cm.run(x, allow_nonfinite=True)[0].shape == (2, 4)
    x[1, 3] = 1e30  # within float32: runs
    assert cm.run(x)[0].shape == (2, 4)


def test_check_of_outputs_that_are_not_the_models() -> None:
    """`run --check` with metadata naming an input as an output compared arrays of different
    shapes (ValueError from numpy); now it says what does not match."""
    with pytest.raises(TesselConfigError, match="output 'x': the binary gives shape \\[1, 2\\]"):
        compare(["x"], [np.zeros((1, 2))], [np.zeros((1, 2))], [np.zeros((1, 4))])


def test_rank0_descriptor_round_trips_through_text() -> None:
    program = read_tsl((CORPUS / "tiny_mlp.tsl").read_bytes())
    scalar = TensorDescriptor("s", program.outputs[0].dtype, (), program.outputs[0].memory,
                              program.outputs[0].address)
    with_scalar = dataclasses.replace(program, outputs=(*program.outputs, scalar))
    text = program_to_text(with_scalar)
    assert "shape=scalar" in text
    assert program_from_text(text).outputs[-1].shape == ()
