"""Countable energy events of instructions, and the energy parameter each one is charged.

Each field of ``Events`` names the component of the energy breakdown it counts towards and the
preset's per-event energy (``NpuArch.energy``) it is multiplied by; ``energy_breakdown_pj``
is derived from those declarations. Off-chip bytes are per memory index and charged the
energy of the memory's kind (``Energy.offchip_byte_pj``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch

COMPONENT, ENERGY, OFFCHIP = "component", "energy", "offchip"


def _event(component: str, energy: str) -> Any:
    """An event counted towards ``component``, charged ``Energy.<energy>`` each."""
    return field(default=0, metadata={COMPONENT: component, ENERGY: energy})


def _offchip_event() -> Any:
    """Bytes per off-chip memory index, charged that memory's kind's energy."""
    return field(default=(), metadata={OFFCHIP: True})


@dataclass(frozen=True)
class Events:
    """Countable energy events; ``offchip_*`` are per off-chip memory index."""

    macs: int = _event("mac", "mac_int8_pj")
    sram_read_bytes: int = _event("sram_read", "sram_read_byte_pj")
    sram_write_bytes: int = _event("sram_write", "sram_write_byte_pj")
    acc_reads: int = _event("acc", "acc_access_pj")
    acc_writes: int = _event("acc", "acc_access_pj")
    vector_lane_ops: int = _event("vector", "vector_lane_op_pj")
    lut_accesses: int = _event("lut", "lut_lookup_pj")
    # bytes the matrix array reads from its operand buffers
    operand_bytes: int = _event("operand", "operand_buffer_byte_pj")
    int4_unpacked: int = _event("int4_decode", "int4_decode_pj")  # int4 weights unpacked
    offchip_read_bytes: tuple[int, ...] = _offchip_event()
    offchip_write_bytes: tuple[int, ...] = _offchip_event()
    # bytes the weight decoder writes (DMA_LOAD_W); its energy is a parameter of the decoder
    weight_decoded_bytes: int = _event("weight_decode", "wdecoder.decode_byte_pj")
    # 2:4 index nibbles the matrix engine's weight path decodes (CONV w_type I8_2_4 / I4_2_4)
    sparse_indices: int = _event("sparse_index", "sparse.index_decode_pj")

    def __add__(self, other: Events) -> Events:
        vals = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, tuple):
                n = max(len(a), len(b))
                a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
                vals[f.name] = tuple(x + y for x, y in zip(a, b, strict=True))
            else:
                vals[f.name] = a + b
        return Events(**vals)


def _components() -> tuple[tuple[str, tuple[str, ...], str], ...]:
    """(component, the events counted towards it, its energy parameter), in field order."""
    out: dict[str, tuple[list[str], str]] = {}
    for f in fields(Events):
        if COMPONENT in f.metadata:
            names, energy = out.setdefault(f.metadata[COMPONENT], ([], f.metadata[ENERGY]))
            assert energy == f.metadata[ENERGY], f"{f.name}: one energy per component"
            names.append(f.name)
    return tuple((c, tuple(names), energy) for c, (names, energy) in out.items())


COMPONENTS = _components()
SCALAR_EVENTS = tuple(name for _, names, _ in COMPONENTS for name in names)
OFFCHIP_EVENTS = tuple(f.name for f in fields(Events) if f.metadata.get(OFFCHIP))


def energy_breakdown_pj(ev: Events, arch: NpuArch) -> dict[str, float]:
    """Dynamic energy of ``ev`` in pJ by component (off-chip memories by name). A component's
    events are added up before the multiplication (integer counts: exact)."""
    en = arch.energy
    out = {component: sum(getattr(ev, n) for n in names) * _figure(arch, energy)
           for component, names, energy in COMPONENTS}
    for idx, mem in enumerate(arch.offchip):
        moved = sum(getattr(ev, n)[idx] if idx < len(getattr(ev, n)) else 0
                    for n in OFFCHIP_EVENTS)
        out[mem.name] = moved * en.offchip_byte_pj(mem.kind)
    return out


def _figure(arch: NpuArch, energy: str) -> float:
    """``arch.energy.<energy>``, or the parameter a dotted ``energy`` names on ``arch``."""
    group, _, name = energy.rpartition(".")
    return getattr(getattr(arch, group) if group else arch.energy, name)


def energy_pj(ev: Events, arch: NpuArch) -> float:
    """Total dynamic energy of ``ev`` in pJ."""
    return math.fsum(energy_breakdown_pj(ev, arch).values())


def static_energy_pj(cycles: int, arch: NpuArch) -> float:
    """Leakage over ``cycles`` at the preset's clock: mW * s = mJ = 1e9 pJ."""
    return arch.energy.static_power_mw * cycles / arch.clock_hz * 1e9
