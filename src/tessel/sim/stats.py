"""What a simulation reports: ``SimResult`` (outputs + ``SimStats``) and how stats are built.

Energy = sum over instructions of their events (``tessel.isa.costs``) x the preset's per-event
energies (``costs.energy_breakdown_pj``), plus static power x total time. Bytes per memory
come from the same events, so traffic and energy cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tessel.arch.types import NpuArch
from tessel.isa.costs import Events, energy_breakdown_pj, static_energy_pj
from tessel.isa.fields import Engine
from tessel.isa.table import Opcode

SCALAR_EVENTS = ("macs", "sram_read_bytes", "sram_write_bytes", "acc_reads", "acc_writes",
                 "vector_lane_ops", "lut_accesses", "operand_bytes")


def event_row(ev: Events | None, n_mem: int) -> list[int]:
    """Events as a flat row: the scalar counts, then off-chip reads and writes per memory."""
    if ev is None:
        return [0] * (len(SCALAR_EVENTS) + 2 * n_mem)
    rd = list(ev.offchip_read_bytes) + [0] * (n_mem - len(ev.offchip_read_bytes))
    wr = list(ev.offchip_write_bytes) + [0] * (n_mem - len(ev.offchip_write_bytes))
    return [getattr(ev, name) for name in SCALAR_EVENTS] + rd[:n_mem] + wr[:n_mem]


def events_from_row(row: np.ndarray, n_mem: int) -> Events:
    k = len(SCALAR_EVENTS)
    vals = {name: int(row[i]) for i, name in enumerate(SCALAR_EVENTS)}
    return Events(**vals, offchip_read_bytes=tuple(int(x) for x in row[k:k + n_mem]),
                  offchip_write_bytes=tuple(int(x) for x in row[k + n_mem:k + 2 * n_mem]))


@dataclass(frozen=True)
class EngineStats:
    """One engine over the whole run: cycles running an instruction vs waiting or done."""

    instructions: int
    busy_cycles: int
    idle_cycles: int


@dataclass(frozen=True)
class MemoryTraffic:
    read_bytes: int
    write_bytes: int


@dataclass(frozen=True)
class TraceEntry:
    engine: Engine
    index: int
    opcode: Opcode
    start: int
    end: int


@dataclass(frozen=True)
class SimStats:
    """Statistics of one run. Timing fields are None / empty when run with ``timing=False``.

    ``memory_traffic``: bytes read / written per off-chip memory (by name), ``"sram"`` and
    ``"acc"`` (accumulator entries x 4). ``energy_pj``: ``mac`` (matrix engine and DWCONV),
    ``sram_read``, ``sram_write``, ``acc``, ``vector``, ``lut``, one key per off-chip memory
    and ``static``. ``macs``: int8 MACs executed (CONV, MATMUL, DWCONV).
    """

    instructions: int
    timing: bool
    total_cycles: int | None = None
    seconds: float | None = None
    engines: dict[Engine, EngineStats] = field(default_factory=dict)
    memory_traffic: dict[str, MemoryTraffic] = field(default_factory=dict)
    energy_pj: dict[str, float] = field(default_factory=dict)
    macs: int | None = None
    events: Events | None = None
    trace: tuple[TraceEntry, ...] = ()

    @property
    def total_energy_pj(self) -> float:
        return math.fsum(self.energy_pj.values())


@dataclass(frozen=True)
class SimResult:
    outputs: dict[str, np.ndarray]
    stats: SimStats


def memory_traffic(ev: Events, arch: NpuArch) -> dict[str, MemoryTraffic]:
    out = {m.name: MemoryTraffic(ev.offchip_read_bytes[i], ev.offchip_write_bytes[i])
           for i, m in enumerate(arch.offchip)}
    out["sram"] = MemoryTraffic(ev.sram_read_bytes, ev.sram_write_bytes)
    out["acc"] = MemoryTraffic(4 * ev.acc_reads, 4 * ev.acc_writes)
    return out


def energy(ev: Events, total_cycles: int, arch: NpuArch) -> dict[str, float]:
    """Dynamic energy by component plus ``static`` (leakage over ``total_cycles``), in pJ."""
    out = energy_breakdown_pj(ev, arch)
    out["static"] = static_energy_pj(total_cycles, arch)
    return out
