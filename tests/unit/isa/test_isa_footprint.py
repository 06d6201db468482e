"""Operand boxes and the static trap rules of docs/isa.md section 3."""

from __future__ import annotations

import numpy as np
import pytest
from isa_samples import SAMPLES

from tessel.arch import list_presets, load_preset
from tessel.isa import AccMode, AccSrc, DType, Opcode, ParamMode
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
    arch = load_preset(name).with_param("wdecoder.enabled", True)
    for op, ins in SAMPLES.items():
        assert static_error(ins, arch) is None, op


@pytest.mark.parametrize("name", list_presets())
def test_a_decoded_load_needs_the_weight_decoder(name: str) -> None:
    arch = load_preset(name)
    why = static_error(SAMPLES[Opcode.DMA_LOAD_W], arch)
    assert (why is None) == arch.wdecoder.enabled
    assert why is None or "wdecoder.enabled" in why


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


def _enumerated(base: int, dims: list[int], strides: list[int], elem: int) -> tuple[int, int]:
    addr = pattern_addresses(base, dims, strides)
    return int(addr.min()), int(addr.max()) + elem


def _reference_accesses(i) -> list[tuple]:
    """The operand boxes of docs/isa.md by field name, each from its enumerated addresses."""
    g = i.__getattribute__
    op = i.opcode

    def view(p: str, n: int, elem: int) -> tuple[int, int]:
        return _enumerated(g(f"{p}_addr"), [g(f"d{k}") for k in range(n)],
                           [g(f"{p}_s{k}") for k in range(n)], elem)

    wide = 2 if op in (Opcode.CONV, Opcode.MATMUL) and i.in_type else 1  # int16 input

    def acc(pixels: int, ch: int) -> list[tuple]:
        lo, hi = _enumerated(i.acc_addr, [pixels, ch], [i.acc_stride, wide], wide)
        out = [("acc", Space.ACC, lo, hi, True, 0)]
        return out + ([("acc", Space.ACC, lo, hi, False, 0)] if i.mode == AccMode.ACCUMULATE
                      else [])

    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        w, load = i.dtype.nbytes, op == Opcode.DMA_LOAD
        return [("ext", Space.OFFCHIP, *view("ext", 4, w), not load, i.mem),
                ("sram", Space.SRAM, *view("sram", 4, w), load, 0)]
    if op in (Opcode.CONV, Opcode.DWCONV):
        ch = i.cin if op == Opcode.CONV else i.ch
        inp = _enumerated(i.in_addr, [i.in_h, i.in_w, ch], [i.in_stride_h, i.in_stride_w, wide],
                          wide)
        if op == Opcode.CONV and i.w_type in (2, 3):  # 2:4: the values, then their indices
            per = 2 if i.w_type == 3 else 1
            el = pattern_addresses(per * i.w_addr, [i.kh * i.kw, -(-ch // 2), i.cout],
                                   [i.w_stride_k, i.w_stride_ci, i.w_stride_co]) // per
            groups = i.kh * i.kw * (ch // 4) * i.cout
            w = int(el.min()), int(el.max()) + 1 + -(-groups // 2)
        elif op == Opcode.CONV and i.w_type == 1:  # int4: the bytes holding the nibbles
            nib = pattern_addresses(2 * i.w_addr, [i.kh * i.kw, ch, i.cout],
                                    [i.w_stride_k, i.w_stride_ci, i.w_stride_co]) >> 1
            w = int(nib.min()), int(nib.max()) + 1
        elif op == Opcode.CONV:
            w = _enumerated(i.w_addr, [i.kh * i.kw, ch, i.cout],
                            [i.w_stride_k, i.w_stride_ci, i.w_stride_co], 1)
        elif i.w_type in (1, 3):  # int4 (I4_2_4 breaks a rule of DWCONV; its box is I4's)
            nib = pattern_addresses(2 * i.w_addr, [i.kh * i.kw, ch], [i.w_stride_k, 1]) >> 1
            w = int(nib.min()), int(nib.max()) + 1
        else:
            w = _enumerated(i.w_addr, [i.kh * i.kw, ch], [i.w_stride_k, 1], 1)
        return [("in", Space.SRAM, *inp, False, 0), ("w", Space.SRAM, *w, False, 0),
                *acc(i.out_h * i.out_w, i.cout if op == Opcode.CONV else ch)]
    if op == Opcode.MATMUL:
        a = _enumerated(i.a_addr, [i.m, i.k], [i.a_stride_m, i.a_stride_k], wide)
        if i.b_type in (1, 3):  # int4 B: the bytes holding the nibbles (I4_2_4: a rule broken)
            nib = pattern_addresses(2 * i.b_addr, [i.k, i.n], [i.b_stride_k, i.b_stride_n]) >> 1
            b = int(nib.min()), int(nib.max()) + 1
        else:
            b = _enumerated(i.b_addr, [i.k, i.n], [i.b_stride_k, i.b_stride_n], 1)
        return [("a", Space.SRAM, *a, False, 0), ("b", Space.SRAM, *b, False, 0), *acc(i.m, i.n)]
    if op == Opcode.REQUANT:
        e = (2 if i.acc_width else 1) if i.src == AccSrc.ACC else 4
        src = _enumerated(i.src_addr, [i.rows, i.ch], [i.src_stride, e], e)
        p = (16 if i.acc_width else 12) * (i.ch if i.param_mode == ParamMode.PER_CHANNEL else 1)
        w = i.out_dtype.nbytes
        dst = _enumerated(i.dst_addr, [i.rows, i.ch], [i.dst_stride, w], w)
        return [("src", Space.ACC if i.src == AccSrc.ACC else Space.SRAM, *src, False, 0),
                ("params", Space.SRAM, i.param_addr, i.param_addr + p, False, 0),
                ("dst", Space.SRAM, *dst, True, 0)]
    if op == Opcode.ELTWISE:
        return [(p, Space.SRAM, *view(p, 3, g(f"{p}_dtype").nbytes), p == "out", 0)
                for p in ("a", "b", "out")]
    if op == Opcode.COPY:
        return [(p, Space.SRAM, *view(p, 4, i.dtype.nbytes), p == "dst", 0)
                for p in ("src", "dst")]
    return [tuple(a) for a in accesses(i)]  # the by-name ops (LUT, POOL, REDUCE, ...)


def test_accesses_by_position_match_the_operand_patterns() -> None:
    """`accesses` reads fields by position for the frequent opcodes: every box equals the
    enumerated addresses of its operand pattern, on random strides (negative too), sizes and
    modes."""
    rng = np.random.default_rng(7)
    checked = 0
    for sample in SAMPLES.values():
        for _ in range(200):
            changes = {}
            for f in sample.spec.fields:
                if f.enum is not None:
                    if rng.random() < 0.3:
                        changes[f.name] = list(f.enum)[rng.integers(len(f.enum))]
                elif "_s" in f.name or "stride" in f.name:
                    changes[f.name] = int(rng.integers(max(f.min, -40), min(f.max, 40) + 1))
                elif f.name[0] == "d" and f.name[1:].isdigit() or f.name in (
                        "m", "n", "k", "rows", "ch", "cin", "cout", "in_h", "in_w", "out_h",
                        "out_w", "kh", "kw"):
                    changes[f.name] = int(rng.integers(max(f.min, 1), 5))
            ins = sample.replace(**changes)  # values inside every field's range
            got = [tuple(a) for a in accesses(ins)]
            assert got == _reference_accesses(ins), ins
            checked += 1
    assert checked > 1000
