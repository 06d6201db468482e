"""Range checks of every NpuArch parameter; messages name the TOML key (``matrix.rows``).

Runs in ``NpuArch.__post_init__``, so an arch built in code or with ``dataclasses.replace``
(as design-space exploration does) is checked exactly like one read from a preset file.
The limits come from the ISA's field widths (docs/isa.md): e.g. the accumulator is addressed
by a 24-bit entry index, an off-chip address is 32 bits, a memory index 3 bits.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from tessel.errors import TesselConfigError

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch

MAX_OFFCHIP_MEMORIES = 8  # DMA "mem" field: 3 bits
MAX_SRAM_BYTES = 2**28  # 256 MiB; SRAM addresses are 32-bit, strides 24-bit signed
MAX_ACC_ENTRIES = 2**24  # accumulator entry index: 24 bits
MIN_LUT_ENTRIES = 513  # one interpolated int16 table (TFLite: 512 segments + end point)
MAX_LUT_ENTRIES = 4096  # LUT index: 12 bits
MAX_OFFCHIP_BYTES = 2**32  # external address: 32 bits
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _fail(key: str, rule: str, value: object) -> None:
    raise TesselConfigError(f"{key} {rule}, got {value!r}")


def _pow2(key: str, value: int, hi: int) -> None:
    if not (isinstance(value, int) and 0 < value <= hi and value & (value - 1) == 0):
        _fail(key, f"must be a positive power of two <= {hi}", value)


def _int_in(key: str, value: int, lo: int, hi: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi):
        _fail(key, f"must be an integer in [{lo}, {hi}]", value)


def _nonneg(key: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(key, "must be a number", value)
    if not (math.isfinite(value) and value >= 0):
        _fail(key, "must be a finite number >= 0", value)


def validate_arch(arch: NpuArch) -> None:
    """Raise TesselConfigError naming the first bad parameter of ``arch``."""
    if not (isinstance(arch.name, str) and _NAME.match(arch.name)):
        _fail("name", "must be lower-case letters, digits, '.', '_' or '-'", arch.name)
    _int_in("process_node_nm", arch.process_node_nm, 2, 180)
    _int_in("clock_hz", arch.clock_hz, 1_000, 10**10)
    _pow2("matrix.rows", arch.matrix.rows, 512)
    _pow2("matrix.cols", arch.matrix.cols, 512)
    if not isinstance(arch.matrix.fold_pipelining, bool):
        _fail("matrix.fold_pipelining", "must be true or false", arch.matrix.fold_pipelining)
    _int_in("matrix.feed_bytes_per_cycle", arch.matrix.feed_bytes_per_cycle, 1, 4096)
    _int_in("matrix.input_buffer_bytes", arch.matrix.input_buffer_bytes, 0, MAX_SRAM_BYTES)
    _int_in("matrix.weight_buffer_bytes", arch.matrix.weight_buffer_bytes, 0, MAX_SRAM_BYTES)
    _pow2("vector.lanes", arch.vector.lanes, 1024)
    _int_in("vector.pipeline_latency_cycles", arch.vector.pipeline_latency_cycles, 0, 1000)
    _validate_onchip(arch)
    _validate_offchip(arch)
    _int_in("dma.channels", arch.dma_channels, 1, 16)
    for name in arch.energy.__dataclass_fields__:
        _nonneg(f"energy.{name}", getattr(arch.energy, name))
    for name in arch.area.__dataclass_fields__:
        _nonneg(f"area.{name}", getattr(arch.area, name))


def _validate_onchip(arch: NpuArch) -> None:
    on = arch.onchip
    _int_in("onchip.sram_bytes", on.sram_bytes, 1024, MAX_SRAM_BYTES)
    if on.sram_bytes % 1024:
        _fail("onchip.sram_bytes", "must be a multiple of 1024", on.sram_bytes)
    _pow2("onchip.sram_banks", on.sram_banks, 256)
    if on.sram_bytes % on.sram_banks:
        rule = f"must divide onchip.sram_bytes ({on.sram_bytes})"
        _fail("onchip.sram_banks", rule, on.sram_banks)
    _pow2("onchip.sram_bank_width_bytes", on.sram_bank_width_bytes, 256)
    _int_in("onchip.acc_bytes", on.acc_bytes, 4, 4 * MAX_ACC_ENTRIES)
    if on.acc_bytes % 4:
        _fail("onchip.acc_bytes", "must be a multiple of 4 (int32 entries)", on.acc_bytes)
    _int_in("onchip.lut_entries", on.lut_entries, MIN_LUT_ENTRIES, MAX_LUT_ENTRIES)


def _validate_offchip(arch: NpuArch) -> None:
    mems = arch.offchip
    if not isinstance(mems, tuple) or not 1 <= len(mems) <= MAX_OFFCHIP_MEMORIES:
        _fail("offchip", f"must list 1 to {MAX_OFFCHIP_MEMORIES} memories", len(mems))
    names: list[str] = []
    for i, mem in enumerate(mems):
        key = f"offchip[{i}]"
        if not (isinstance(mem.name, str) and _NAME.match(mem.name)):
            _fail(f"{key}.name", "must be lower-case letters, digits, '.', '_' or '-'", mem.name)
        if mem.name in names:
            _fail(f"{key}.name", "must be unique", mem.name)
        names.append(mem.name)
        _int_in(f"{key}.size_bytes", mem.size_bytes, 1, MAX_OFFCHIP_BYTES)
        _int_in(f"{key}.bytes_per_cycle", mem.bytes_per_cycle, 1, 4096)
        _int_in(f"{key}.latency_cycles", mem.latency_cycles, 0, 100_000)
    for key, value in (("memory.weights", arch.weights_memory),
                       ("memory.activations", arch.activations_memory)):
        if value not in names:
            _fail(key, f"must name one of the off-chip memories {names}", value)
