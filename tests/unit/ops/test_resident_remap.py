"""The strided re-base of schedule/resident_rewrite.py: an instruction reading (or writing) a slot that
a DMA fills with a window of a tensor whose strides differ (a channel chunk of a wider
tensor) is moved onto the resident tensor element by element, or refused."""

from __future__ import annotations

import numpy as np

from tessel.isa import Instruction, Opcode
from tessel.isa.fields import DType
from tessel.isa.footprint import pattern_addresses
from tessel.schedule.resident_rewrite import _Map, _remap

SLOT, TENSOR, DRAM = 0x400, 0x8000, 0x10000
C, W, H, CHUNK = 192, 28, 6, 64  # tensor H x W x C, the slot holds a 64-channel chunk


def _load(c0: int) -> Instruction:
    return Instruction.make(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=CHUNK, d1=W, d2=H,
                            ext_addr=DRAM + c0, ext_s0=1, ext_s1=C, ext_s2=W * C,
                            sram_addr=SLOT, sram_s0=1, sram_s1=CHUNK, sram_s2=W * CHUNK)


def _dw(in_addr: int, in_h: int, in_w: int, ch: int, sw: int = CHUNK) -> Instruction:
    return Instruction.make(Opcode.DWCONV, in_addr=in_addr, in_h=in_h, in_w=in_w,
                            in_stride_h=W * sw, in_stride_w=sw, ch=ch, kh=3, kw=3,
                            out_h=in_h - 2, out_w=in_w - 2, w_addr=0x100, w_stride_k=ch,
                            acc_addr=0, acc_stride=ch)


def _elements(ins: Instruction) -> np.ndarray:
    return pattern_addresses(ins.in_addr, (ins.in_h, ins.in_w, ins.ch),
                             (ins.in_stride_h, ins.in_stride_w, 1)).ravel()


def _slot_to_tensor(ld: Instruction, dst: int, addrs: np.ndarray) -> np.ndarray:
    off = addrs - ld.sram_addr
    i2, off = np.divmod(off, ld.sram_s2)
    i1, i0 = np.divmod(off, ld.sram_s1)
    return dst + i0 * ld.ext_s0 + i1 * ld.ext_s1 + i2 * ld.ext_s2


def test_channel_chunk_read_moves_onto_the_tensor_element_by_element():
    ld = _load(64)
    dst = TENSOR + 64  # where the chunk's element (0, 0, 0) lives on chip
    # a depthwise tile reading rows 1..5, columns 2..27, channels 8..39 of the slot
    dw = _dw(SLOT + 1 * W * CHUNK + 2 * CHUNK + 8, 5, 26, 32)
    (moved,) = _remap([dw], _Map.of(ld, dst))
    assert (moved.in_stride_w, moved.in_stride_h) == (C, W * C)
    np.testing.assert_array_equal(_elements(moved), _slot_to_tensor(ld, dst, _elements(dw)))


def test_reads_past_the_chunk_or_across_its_layout_are_refused():
    ld, m = _load(0), _Map.of(_load(0), TENSOR)
    assert _remap([_dw(SLOT + 40, 4, 10, 32)], m) is None  # channels 40..71 leave the chunk
    # a pixel stride that is not the slot's: the instruction does not walk the slot's layout
    assert _remap([_dw(SLOT, 4, 10, 32, sw=32)], m) is None
    assert ld.sram_addr == SLOT


def test_untouched_instructions_are_kept_and_writes_need_permission():
    m = _Map.of(_load(0), TENSOR)
    other = _dw(0x6000, 3, 3, 8)  # past the slot
    assert _remap([other], m) == [other]
    rq = Instruction.make(Opcode.REQUANT, src=0, src_addr=0, src_stride=CHUNK, rows=W, ch=CHUNK,
                          out_dtype=DType.I8, dst_addr=SLOT, dst_stride=CHUNK, param_addr=0x100,
                          act_min=-128, act_max=127)
    assert _remap([rq], m) is None  # writes the slot: only for stores
    (w,) = _remap([rq], m, writes=True)
    assert (w.dst_addr, w.dst_stride) == (TENSOR, C)
