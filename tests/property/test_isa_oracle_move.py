"""DMA_LOAD, DMA_STORE and LUT_LOAD on the simulator against docs/isa.md in plain integers
(``isa_ref``): 4-D patterns with negative, zero (broadcast), unaligned and overlapping
strides, every element size, one sample and batches, destinations written twice (a trap) and
operand boxes outside their memory (a trap)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_kit import EXT_REGION, Case, case_of, check, pattern

from tessel.isa import DType, Engine, Instruction, Opcode


@st.composite
def dma_case(draw: Any) -> Case:
    load = draw(st.booleans())
    dtype = draw(st.sampled_from(list(DType)))
    w = dtype.nbytes
    ns = [draw(st.integers(1, 9)), draw(st.integers(1, 4)), draw(st.integers(1, 3)),
          draw(st.integers(1, 2))]
    ext = draw(pattern(ns, w, EXT_REGION if draw(st.booleans()) else 1024, dst=not load))
    sram = draw(pattern(ns, w, draw(st.sampled_from([1024, 1 << 16])), dst=load))
    if draw(st.integers(0, 15)) == 0:  # a box past the end of the SRAM: a trap
        sram = (draw(st.integers(524_288 - 64, 524_287)), sram[1])
    ins = Instruction.make(
        Opcode.DMA_LOAD if load else Opcode.DMA_STORE, mem=draw(st.sampled_from([0] * 15 + [1])),
        dtype=dtype, d0=ns[0], d1=ns[1], d2=ns[2], d3=ns[3], ext_addr=ext[0],
        ext_s0=ext[1][0], ext_s1=ext[1][1], ext_s2=ext[1][2], ext_s3=ext[1][3],
        sram_addr=sram[0], sram_s0=sram[1][0], sram_s1=sram[1][1], sram_s2=sram[1][2],
        sram_s3=sram[1][3])
    return case_of(draw, Engine.DMA_IN if load else Engine.DMA_OUT, [ins])


@settings(max_examples=200, deadline=None)
@given(dma_case())
def test_dma(case: Case) -> None:
    check(case)


@st.composite
def lut_load_case(draw: Any) -> Case:
    count = draw(st.one_of(st.sampled_from([1, 256, 513, 1024]), st.integers(1, 4096)))
    base = draw(st.one_of(st.integers(0, max(0, 1024 - count)), st.integers(0, 4095)))
    ins = Instruction.make(Opcode.LUT_LOAD, lut_base=base, count=count,
                           src_addr=draw(st.integers(0, 1 << 16)))
    return case_of(draw, Engine.VECTOR, [ins])


@settings(max_examples=60, deadline=None)
@given(lut_load_case())
def test_lut_load(case: Case) -> None:
    check(case)
