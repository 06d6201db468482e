"""The cost of preempting a model at a step boundary: its live on-chip state (the activations
its schedule keeps resident across that boundary) written to the activation memory and read
back when it resumes. Each is one DMA of those bytes, costed by the instruction's own rule
(`tessel.isa.costs.dma_cost`: the memory's latency plus bytes over its bandwidth, and its
energy events), so the switch cost follows the NPU's memory parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.arch import NpuArch
from tessel.isa import Instruction, Opcode
from tessel.isa.costs import dma_cost, energy_pj
from tessel.isa.fields import DType
from tessel.isa.table import SPECS


@dataclass(frozen=True)
class Transfer:
    cycles: int
    energy_pj: float


def transfer(nbytes: int, arch: NpuArch, *, load: bool) -> Transfer:
    """One DMA of ``nbytes`` int8 elements between the SRAM and the activation memory (several
    when the bytes exceed one instruction's extents), issued back to back."""
    if nbytes <= 0:
        return Transfer(0, 0.0)
    op = Opcode.DMA_LOAD if load else Opcode.DMA_STORE
    spec = SPECS[op]
    row = spec.field("d0").max
    rows = spec.field("d1").max
    mem = [m.name for m in arch.offchip].index(arch.activations_memory)
    cycles, energy, left = 0, 0.0, nbytes
    while left:
        d1 = min(rows, left // row) if left >= row else 1
        d0 = row if left >= row else left
        args = {f.name: 0 for f in spec.fields}
        args.update(mem=mem, dtype=int(DType.I8), d0=d0, d1=d1, d2=1, d3=1)
        cost = dma_cost(Instruction(op, tuple(args[f.name] for f in spec.fields)), arch)
        cycles += cost.cycles
        energy += energy_pj(cost.events, arch)
        left -= d0 * d1
    return Transfer(cycles, energy)


@dataclass(frozen=True)
class SwitchCosts:
    """Per step boundary of one model: the save (on preemption) and restore (on resume)."""

    save: tuple[Transfer, ...]
    restore: tuple[Transfer, ...]

    @classmethod
    def of(cls, live_bytes: tuple[int, ...], arch: NpuArch) -> SwitchCosts:
        return cls(tuple(transfer(n, arch, load=False) for n in live_bytes),
                   tuple(transfer(n, arch, load=True) for n in live_bytes))
