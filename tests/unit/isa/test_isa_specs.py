"""The instruction definitions (tessel.isa.spec.InstrSpec): one per opcode, each complete (a
cost rule on every engine that runs it, its docs section), the energy events' declared
parameters, and the registry where the simulator's implementations are found."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.arch import Energy, Sparsity, WeightDecoder, list_presets, load_preset
from tessel.isa import SPECS, Engine, Opcode, semantics
from tessel.isa.cost_rules import Control, CostRule, DecodedTransfer, Gemm, Transfer, Vector
from tessel.isa.events import COMPONENT, ENERGY, OFFCHIP, Events, energy_breakdown_pj
from tessel.isa.footprint import Space, accesses
from tessel.isa.instrs import control, data, dma, matrix, vector

DOC = Path(__file__).resolve().parents[3] / "docs" / "isa.md"
ARCH = load_preset(list_presets()[0])


def test_one_spec_per_opcode_in_opcode_order() -> None:
    families = [s.opcode for m in (control, dma, matrix, vector, data) for s in m.SPECS]
    assert sorted(families) == sorted(Opcode) and len(families) == len(set(families))
    assert list(SPECS) == list(Opcode)
    assert all(op is spec.opcode for op, spec in SPECS.items())


def test_each_spec_names_its_section_of_the_docs() -> None:
    headings = {line[4:].strip() for line in DOC.read_text(encoding="utf-8").splitlines()
                if line.startswith("### ")}
    for op, spec in SPECS.items():
        assert spec.section in headings, op.name
        assert op.name in spec.section.split(" (")[0].replace(",", " ").split(), op.name


@pytest.mark.parametrize("op", list(Opcode))
def test_a_cost_rule_on_every_engine_that_runs_it(op: Opcode) -> None:
    spec = SPECS[op]
    for engine in Engine:
        if spec.runs_on(engine):
            assert isinstance(spec.cost_on(engine), CostRule)
    kind = {Engine.DMA_IN: (Transfer, DecodedTransfer), Engine.DMA_OUT: Transfer,
            Engine.MATRIX: Gemm,
            Engine.VECTOR: Vector, None: Control}[spec.engine]
    assert isinstance(spec.cost, kind)
    if spec.also is not None:
        assert isinstance(spec.cost_on(spec.also), {Engine.VECTOR: Vector}[spec.also])


def test_the_operand_boxes_name_each_engines_memories() -> None:
    from isa_samples import SAMPLES

    for op, ins in SAMPLES.items():
        spaces = {a.space for a in accesses(ins)}
        if SPECS[op].engine is None:
            assert not spaces
        elif isinstance(SPECS[op].cost, (Transfer, DecodedTransfer)):
            assert spaces == {Space.SRAM, Space.OFFCHIP}
        else:
            assert Space.OFFCHIP not in spaces and Space.SRAM in spaces


def test_every_event_is_charged_a_declared_energy() -> None:
    energies = {f.name for f in dataclasses.fields(Energy)}
    energies |= {f"wdecoder.{f.name}" for f in dataclasses.fields(WeightDecoder)}
    energies |= {f"sparse.{f.name}" for f in dataclasses.fields(Sparsity)}
    for f in dataclasses.fields(Events):
        if f.metadata.get(OFFCHIP):
            continue
        assert f.metadata[ENERGY] in energies, f.name
        assert f.metadata[COMPONENT]


counts = st.integers(0, 10**9)


@settings(max_examples=100, deadline=None)
@given(st.builds(Events, counts, counts, counts, counts, counts, counts, counts, counts, counts,
                 st.tuples(counts), st.tuples(counts), counts, counts))
def test_the_breakdown_is_each_component_times_its_energy(ev: Events) -> None:
    en, mem = ARCH.energy, ARCH.offchip[0]
    want = {"mac": ev.macs * en.mac_int8_pj,
            "sram_read": ev.sram_read_bytes * en.sram_read_byte_pj,
            "sram_write": ev.sram_write_bytes * en.sram_write_byte_pj,
            "acc": (ev.acc_reads + ev.acc_writes) * en.acc_access_pj,
            "vector": ev.vector_lane_ops * en.vector_lane_op_pj,
            "lut": ev.lut_accesses * en.lut_lookup_pj,
            "operand": ev.operand_bytes * en.operand_buffer_byte_pj,
            "int4_decode": ev.int4_unpacked * en.int4_decode_pj,
            "weight_decode": ev.weight_decoded_bytes * ARCH.wdecoder.decode_byte_pj,
            "sparse_index": ev.sparse_indices * ARCH.sparse.index_decode_pj,
            mem.name: (ev.offchip_read_bytes[0] + ev.offchip_write_bytes[0])
            * en.offchip_byte_pj(mem.kind)}
    got = energy_breakdown_pj(ev, ARCH)
    assert {k: got[k] for k in want} == want  # the same floats, bit for bit
    assert all(v == 0 for k, v in got.items() if k not in want)


def test_the_semantics_registry(monkeypatch) -> None:
    monkeypatch.setattr(semantics, "_IMPLEMENTATIONS", {})
    assert set(semantics.unimplemented()) == set(Opcode) - set(semantics.CONTROL)

    def conv_step(op, prep):  # stands for the simulator's CONV builder
        return None

    def other(op, prep):
        return None

    semantics.implement(Opcode.CONV, conv_step)
    semantics.implement(Opcode.CONV, conv_step)  # the same function again: a reload
    assert SPECS[Opcode.CONV].implementation is conv_step
    assert SPECS[Opcode.MATMUL].implementation is None
    assert Opcode.CONV not in semantics.unimplemented()
    with pytest.raises(ValueError, match="CONV is implemented by"):
        semantics.implement(Opcode.CONV, other)


def test_the_simulator_implements_every_instruction() -> None:
    import tessel.sim.instr as instr

    assert semantics.unimplemented() == []
    for opcode, build in instr.BUILDERS.items():
        assert SPECS[opcode].implementation is build
