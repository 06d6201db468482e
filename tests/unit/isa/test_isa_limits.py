"""tessel.isa.limits: every limit is what the instruction table's fields say, the fields that
share a limit agree on it, and the NPU parameters' bounds (tessel.arch.checks, below the ISA)
equal the ISA's."""

from __future__ import annotations

import pytest

from tessel.arch import checks
from tessel.isa import SPECS, DType, Engine, LutMode, Opcode
from tessel.isa import limits as L
from tessel.isa.fixedpoint import MAX_SHIFT, MIN_SHIFT

WINDOWED = (Opcode.CONV, Opcode.DWCONV, Opcode.POOL)
EXTENTS = {"d0", "d1", "d2", "d3", "m", "n", "k", "cin", "cout", "ch", "rows", "acc_stride"}


def _fields(names: set[str]):
    return [(op, f) for op, s in SPECS.items() for f in s.fields if f.name in names]


def test_every_extent_field_shares_max_extent() -> None:
    found = _fields(EXTENTS)
    assert len(found) > 30
    for op, f in found:
        assert (f.bits, f.max) == (16, L.MAX_EXTENT), (op.name, f.name)


def test_tile_sides_share_max_tile_hw() -> None:
    for op in WINDOWED:
        for name in ("in_h", "in_w", "out_h", "out_w"):
            assert SPECS[op].field(name).max == L.MAX_TILE_HW, (op.name, name)


@pytest.mark.parametrize("name,limit", [("kh", "MAX_KERNEL"), ("kw", "MAX_KERNEL"),
                                        ("stride_h", "MAX_STRIDE"), ("stride_w", "MAX_STRIDE"),
                                        ("dil_h", "MAX_DILATION"), ("dil_w", "MAX_DILATION"),
                                        ("pad_top", "MAX_PAD"), ("pad_left", "MAX_PAD")])
def test_conv_and_dwconv_share_the_window_limits(name: str, limit: str) -> None:
    for op in (Opcode.CONV, Opcode.DWCONV):
        assert SPECS[op].field(name).max == getattr(L, limit), (op.name, name)
    assert SPECS[Opcode.POOL].field(name).max >= getattr(L, limit)  # POOL's are wider


def test_the_matrix_zero_points_and_the_reduction() -> None:
    for op, f in _fields({"in_zp", "w_zp", "a_zp", "b_zp"}):
        if op in (Opcode.CONV, Opcode.DWCONV, Opcode.MATMUL):
            assert (f.min, f.max) == (L.MIN_MATRIX_ZP, L.MAX_MATRIX_ZP), (op.name, f.name)
    assert L.MAX_CENTRED_INT8 == max(abs(x - zp) for x in (DType.I8.lo, DType.I8.hi)
                                     for zp in (L.MIN_MATRIX_ZP, L.MAX_MATRIX_ZP))
    conv = SPECS[Opcode.CONV]
    assert L.MAX_REDUCTION >= conv.field("kh").max * conv.field("kw").max * conv.field("cin").max
    assert L.MAX_REDUCTION >= SPECS[Opcode.MATMUL].field("k").max


def test_every_multiplier_shift_has_the_fixed_point_range() -> None:
    shifts = [(op, f) for op, s in SPECS.items() for f in s.fields if f.name.endswith("_shift")
              and f.name != "left_shift"]
    assert len(shifts) == 3
    for op, f in shifts:
        assert (f.min, f.max) == (MIN_SHIFT, MAX_SHIFT), (op.name, f.name)
    assert L.MAX_LEFT_SHIFT == SPECS[Opcode.ELTWISE].field("left_shift").max
    assert L.MAX_FRAC_BITS == SPECS[Opcode.UNARY].field("frac_bits").max


def test_tokens_and_engines() -> None:
    for op in (Opcode.WAIT, Opcode.SIGNAL):
        token = SPECS[op].field("token")
        assert L.NUM_TOKENS == token.max + 1 == 1 << token.bits
    assert L.NUM_ENGINES == len(Engine) == 1 + max(Engine)
    assert L.ALL_ENGINES_MASK == sum(1 << e for e in Engine)
    assert set(L.DMA_ENGINES) == {SPECS[Opcode.DMA_LOAD].engine, SPECS[Opcode.DMA_STORE].engine}


def test_lut_modes_carry_their_table_sizes() -> None:
    for mode in LutMode:
        assert mode.name == f"{mode.dtype.name}_{mode.entries}"
        # input 0 sits at the centre; the lowest input at entry 0, the highest in the table
        assert mode.centre + (mode.dtype.lo // mode.step) == 0
        assert mode.centre + (mode.dtype.hi // mode.step) + mode.interpolated < mode.entries
    assert (LutMode.I8_256.entries, LutMode.I16_513.entries) == (256, 513)
    assert (LutMode.I8_256.centre, LutMode.I16_513.centre) == (128, 256)
    assert L.MIN_LUT_ENTRIES == max(m.entries for m in LutMode) <= L.MAX_LUT_ENTRIES
    assert SPECS[Opcode.LUT_LOAD].field("count").max == L.MAX_LUT_ENTRIES


@pytest.mark.parametrize("name", ["MAX_OFFCHIP_MEMORIES", "MAX_ACC_ENTRIES", "MIN_LUT_ENTRIES",
                                  "MAX_LUT_ENTRIES", "MAX_OFFCHIP_BYTES"])
def test_the_arch_bounds_equal_the_isa_limits(name: str) -> None:
    assert getattr(checks, name) == getattr(L, name)


def test_the_memories_the_fields_address() -> None:
    assert L.MAX_OFFCHIP_MEMORIES == 1 << SPECS[Opcode.DMA_STORE].field("mem").bits
    for op in (Opcode.CONV, Opcode.MATMUL, Opcode.DWCONV):
        assert L.MAX_ACC_ENTRIES == 1 << SPECS[op].field("acc_addr").bits
    for op in (Opcode.LUT, Opcode.LUT_LOAD):
        assert L.MAX_LUT_ENTRIES == 1 << SPECS[op].field("lut_base").bits
    assert L.MAX_OFFCHIP_BYTES == SPECS[Opcode.DMA_LOAD].field("ext_addr").max + 1


def test_requant_reads_its_parameters_per_channel() -> None:
    from isa_samples import SAMPLES

    from tessel.isa.footprint import accesses

    ins = SAMPLES[Opcode.REQUANT]
    (params,) = [a for a in accesses(ins) if a.what == "params"]
    assert params.hi - params.lo == L.REQUANT_PARAM_BYTES * ins.ch
