"""Constants resident in the SRAM reserve, in the cycle model.

A model whose constants the plan keeps on chip (tessel.scenario.constants) is compiled with
the reserve as its weights memory: the NPU seen by the schedule stage gains one more memory,
``RESERVE_MEMORY``, of the reserve's size, and `memory.weights` names it. The schedule stage's
own search then plans that model for it (its tiling, prefetch and weight staging follow), its
weight DMAs read the reserve instead of the off-chip memory, and the compiled program is the
same kind of program (a DMA_LOAD per weight tile, from memory index ``len(offchip)``), run
bit for bit by the simulator.

A load from the reserve is an on-chip copy: it reads the reserve and writes the working
scratchpad through the same SRAM ports, so it moves at most half the SRAM's bytes per cycle,
after ``COPY_LATENCY_CYCLES``; each byte is charged one SRAM read (the reserve, `reserve_energy`)
and one SRAM write (the scratchpad, as every DMA load).

The resident constants are loaded once, before the first frame (`preload`): a DMA of their
bytes from the weights memory, whose cycles and energy the report gives apart from the
timeline (the steady state, which a device repeats long after it booted).
"""

from __future__ import annotations

import dataclasses

from tessel.arch import MemoryKind, NpuArch, OffChipMemory
from tessel.errors import TesselConfigError
from tessel.isa.events import Events
from tessel.scenario.switch import Transfer, transfer

RESERVE_MEMORY = "sram_reserve"
COPY_LATENCY_CYCLES = 2  # assumption: an SRAM read pipeline, no off-chip round trip
MAX_MEMORIES = 8  # the DMA instruction's 3-bit memory index


def resident_arch(arch: NpuArch, reserve: int) -> NpuArch:
    """``arch`` (its SRAM already the scratchpad left by the reserve) with the ``reserve``
    bytes as its weights memory."""
    if len(arch.offchip) >= MAX_MEMORIES:
        raise TesselConfigError(f"{arch.name} has {len(arch.offchip)} memories: no index is "
                                "left for the SRAM reserve of resident constants")
    mem = OffChipMemory(RESERVE_MEMORY, MemoryKind.SYS_SRAM, reserve,
                        max(1, arch.derived.sram_bytes_per_cycle // 2), COPY_LATENCY_CYCLES)
    return dataclasses.replace(arch, name=f"{arch.name}.resident", offchip=arch.offchip + (mem,),
                               weights_memory=RESERVE_MEMORY)


def reserve_energy(energy: dict[str, float], events: Events, arch: NpuArch) -> dict[str, float]:
    """``energy`` (by component) with the reserve's bytes charged as SRAM reads."""
    names = [m.name for m in arch.offchip]
    if RESERVE_MEMORY not in names:
        return energy
    i = names.index(RESERVE_MEMORY)
    moved = sum(t[i] for t in (events.offchip_read_bytes, events.offchip_write_bytes)
                if i < len(t))
    out = {k: v for k, v in energy.items() if k != RESERVE_MEMORY}
    out["sram_read"] = out.get("sram_read", 0.0) + moved * arch.energy.sram_read_byte_pj
    return out


def preload(nbytes: int, arch: NpuArch) -> Transfer:
    """The one-time load of ``nbytes`` of resident constants from ``arch``'s weights memory."""
    return transfer(nbytes, arch, load=True, memory=arch.weights_memory)
