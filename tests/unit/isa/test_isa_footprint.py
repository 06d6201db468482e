"""Operand boxes and the static trap rules of docs/isa.md section 3."""

from __future__ import annotations

import pytest
from isa_samples import SAMPLES

from tessel.arch import list_presets, load_preset
from tessel.isa import DType, Opcode
from tessel.isa.footprint import (
    Space,
    accesses,
    box,
    pattern_addresses,
    self_overlapping,
    static_error,
)

S = load_preset("tnpu-s")


def test_box_is_tight_for_negative_strides() -> None:
    assert box(100, [3, 2], [4, -50], 4) == (50, 112)
    assert box(0, [1, 1], [-7, 9], 2) == (0, 2)


@pytest.mark.parametrize("name", list_presets())
def test_samples_are_legal_everywhere(name: str) -> None:
    arch = load_preset(name)
    for op, ins in SAMPLES.items():
        assert static_error(ins, arch) is None, op


def test_accesses_of_conv_and_reduce() -> None:
    conv = {a.what: a for a in accesses(SAMPLES[Opcode.CONV])}
    assert (conv["in"].lo, conv["in"].hi) == (0, 5 * 24 + 5 * 4 + 4)
    assert conv["acc"].space == Space.ACC and (conv["acc"].lo, conv["acc"].hi) == (0, 128)
    assert not conv["in"].write and conv["acc"].write
    red = {a.what: a for a in accesses(SAMPLES[Opcode.REDUCE])}
    assert (red["dst"].lo, red["dst"].hi) == (64, 64 + 16)  # 4 int32 sums
    dma = accesses(SAMPLES[Opcode.DMA_LOAD])
    assert dma[0].space == Space.OFFCHIP and not dma[0].write and dma[1].write


@pytest.mark.parametrize("op,changes,message", [
    (Opcode.DMA_LOAD, {"sram_addr": 524_288 - 10}, r"sram touches \[524278, 525278\) outside"),
    (Opcode.DMA_LOAD, {"mem": 1}, "mem 1 does not exist"),
    (Opcode.DMA_LOAD, {"ext_s0": -1}, r"ext touches \[-935, 65\) outside the off-chip memory 0"),
    (Opcode.CONV, {"acc_stride": 7}, "acc_stride 7 < cout 8: output rows overlap"),
    (Opcode.CONV, {"acc_addr": 16384 - 100}, "acc touches .* outside the accumulator"),
    (Opcode.REQUANT, {"act_min": -200}, r"clamp \[-200, 127\] is empty or outside I8"),
    (Opcode.REQUANT, {"act_min": 5, "act_max": 4}, "clamp"),
    (Opcode.POOL, {"dtype": DType.I32, "act_min": 0, "act_max": 1}, "POOL works on I8 or I16"),
    (Opcode.LUT, {"lut_base": 600}, r"lut touches \[600, 1113\) outside the LUT memory"),
    (Opcode.MATMUL, {"acc_stride": 31}, "acc_stride 31 < n 32"),
])
def test_static_errors(op: Opcode, changes: dict, message: str) -> None:
    assert static_error(SAMPLES[op].replace(**changes), S) is not None
    with pytest.raises(AssertionError, match=message):
        err = static_error(SAMPLES[op].replace(**changes), S)
        raise AssertionError(err)


def test_pattern_addresses_follow_loop_order() -> None:
    addr = pattern_addresses(10, [3, 2], [1, 100])  # i0 innermost
    assert addr.shape == (2, 3) and addr.ravel().tolist() == [10, 11, 12, 110, 111, 112]
    assert (addr.min(), addr.max() + 1) == box(10, [3, 2], [1, 100], 1)


def test_self_overlapping() -> None:
    assert not self_overlapping(0, [4, 8], [8, 1], 1)  # a transpose writes each byte once
    assert self_overlapping(0, [4], [0], 1)  # stride 0 on a destination
    assert self_overlapping(0, [4], [2], 4)  # int32 elements 2 bytes apart
    assert not self_overlapping(0, [1], [0], 4)
