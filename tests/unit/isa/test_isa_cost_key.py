"""The instruction-cost memo: `costs.cost_key` names what `instruction_cost` reads of an
instruction (COST_FIELDS), and `schedule.estimate.cost_memo` shares cycles between equal arches
only; a memoised cost equals a fresh `instruction_cost`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from isa_samples import SAMPLES

from tessel.arch import NpuArch, list_presets, load_preset
from tessel.isa import SPECS, Engine, Field, Instruction, Opcode
from tessel.isa.costs import COST_FIELDS, cost_key, instruction_cost
from tessel.schedule import estimate as step_estimate
from tessel.schedule.estimate import CostCache, cost_memo

PRESETS = [load_preset(p) for p in list_presets()]
# arches differing from a preset in one field a cost reads (and one that no cost reads)
VARIANTS = [PRESETS[0].with_params(v) for v in (
    {"matrix.rows": 8}, {"matrix.cols": 32}, {"matrix.fold_pipelining": False},
    {"matrix.feed_bytes_per_cycle": 8}, {"matrix.input_buffer_bytes": 1024},
    {"matrix.weight_buffer_bytes": 1024}, {"vector.lanes": 8},
    {"vector.pipeline_latency_cycles": 9}, {"onchip.sram_banks": 2},
    {"offchip.lpddr.bytes_per_cycle": 4}, {"offchip.lpddr.latency_cycles": 7},
    {"clock_hz": 123_000_000})]
ARCHES = PRESETS + VARIANTS


def _value(f: Field, arch: NpuArch) -> st.SearchStrategy:
    if f.name == "mem":  # a DMA names one of the arch's off-chip memories
        return st.integers(0, len(arch.offchip) - 1)
    if f.enum is not None:
        return st.sampled_from(list(f.enum))
    # small sizes keep the formulas' products small; edges and the whole range too
    return st.one_of(st.integers(f.min, min(f.max, max(f.min, 64))),
                     st.sampled_from([f.min, f.max]), st.integers(f.min, f.max))


def _instruction(op: Opcode, arch: NpuArch) -> st.SearchStrategy[Instruction]:
    return st.tuples(*(_value(f, arch) for f in SPECS[op].fields)).map(
        lambda args: Instruction(op, args))


cases = st.tuples(st.sampled_from(ARCHES), st.sampled_from(list(Opcode)),
                  st.sampled_from([None, *Engine])).flatmap(
    lambda c: st.tuples(st.just(c[0]), _instruction(c[1], c[0]), st.just(c[2])))


class _Reads:
    """An instruction that records the fields read of it."""

    def __init__(self, ins: Instruction):
        self._ins, self.read = ins, set()

    def __getattr__(self, name: str):
        if name != "opcode":
            self.read.add(name)
        return getattr(self._ins, name)


def test_cost_fields_name_every_opcodes_fields() -> None:
    assert set(COST_FIELDS) == set(Opcode)
    for op, names in COST_FIELDS.items():
        assert set(names) <= {f.name for f in SPECS[op].fields}, op.name
        assert len(set(names)) == len(names), op.name


@settings(max_examples=400, deadline=None)
@given(cases)
def test_cost_reads_only_the_cost_fields(case) -> None:
    arch, ins, engine = case
    rec = _Reads(ins)
    assert instruction_cost(rec, arch, engine) == instruction_cost(ins, arch, engine)
    assert rec.read <= set(COST_FIELDS[ins.opcode]), ins.opcode.name


@settings(max_examples=300, deadline=None)
@given(cases, st.data())
def test_equal_keys_cost_the_same(case, data) -> None:
    # any field outside COST_FIELDS changed: the same key and the same cost (cycles, events)
    arch, ins, engine = case
    others = [f for f in SPECS[ins.opcode].fields if f.name not in COST_FIELDS[ins.opcode]]
    if not others:
        return
    f = data.draw(st.sampled_from(others))
    other = ins.replace(**{f.name: data.draw(_value(f, arch))})
    assert cost_key(other, engine) == cost_key(ins, engine)
    assert instruction_cost(other, arch, engine) == instruction_cost(ins, arch, engine)


def test_dwconv_key_tells_the_engine_apart() -> None:
    ins = Instruction.make(Opcode.DWCONV, in_addr=0, in_h=6, in_w=6, in_stride_h=24,
                           in_stride_w=4, ch=4, kh=3, kw=3, out_h=4, out_w=4, w_addr=0,
                           w_stride_k=4, acc_addr=0, acc_stride=4)
    assert cost_key(ins) == cost_key(ins, Engine.MATRIX) != cost_key(ins, Engine.VECTOR)
    arch = PRESETS[0]
    assert (instruction_cost(ins, arch).cycles
            != instruction_cost(ins, arch, Engine.VECTOR).cycles)


@settings(max_examples=400, deadline=None)
@given(st.lists(cases, min_size=1, max_size=6))
def test_memoised_costs_equal_a_fresh_cost(batch) -> None:
    # twice through the arch's shared memo (a miss, then a hit), in any order of arches
    for _ in range(2):
        for arch, ins, engine in batch:
            fresh = instruction_cost(ins, arch, engine)
            assert CostCache(arch).cycles(ins, engine) == fresh.cycles
            assert CostCache(arch).cost(ins, engine) == fresh  # the events too


def test_equal_arches_share_a_memo_and_others_do_not() -> None:
    a, b = load_preset("tnpu-s"), load_preset("tnpu-s")
    assert a is not b and cost_memo(a) is cost_memo(b)
    assert CostCache(a)._costs is CostCache(b)._costs
    memos = [cost_memo(x) for x in VARIANTS]
    assert len({id(m) for m in memos + [cost_memo(a)]}) == len(VARIANTS) + 1


@pytest.mark.parametrize("param,value,op", [
    ("vector.lanes", 8, Opcode.ELTWISE), ("matrix.rows", 8, Opcode.MATMUL),
    ("offchip.lpddr.latency_cycles", 7, Opcode.DMA_LOAD)])
def test_an_arch_differing_in_a_cost_field_gets_its_own_cycles(param, value, op) -> None:
    a = load_preset("tnpu-s")
    b = a.with_param(param, value)
    ins = SAMPLES[op]
    first = CostCache(a).cycles(ins)  # in a's memo before b asks
    assert CostCache(b).cycles(ins) == instruction_cost(ins, b).cycles != first
    assert CostCache(a).cycles(ins) == first


def test_the_memo_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(step_estimate, "_COST_MEMOS", {})
    monkeypatch.setattr(step_estimate, "_COST_MEMO_ARCHS", 2)
    monkeypatch.setattr(step_estimate, "_COST_MEMO_ENTRIES", 3)
    for lanes in (8, 16, 32):
        cost_memo(PRESETS[0].with_param("vector.lanes", lanes))
    assert len(step_estimate._COST_MEMOS) == 1  # emptied when full, then the new arch's
    cache = CostCache(PRESETS[0])
    ins = [Instruction.make(Opcode.LUT_LOAD, lut_base=0, count=c, src_addr=0) for c in (1, 2, 3)]
    for i in ins:
        cache.cycles(i)
    assert len(cache._costs) == 3
    again = CostCache(PRESETS[0])  # a full memo is emptied when a cache takes it
    assert len(again._costs) == 0
    assert again.cycles(ins[0]) == instruction_cost(ins[0], PRESETS[0]).cycles
