"""Where a scenario's data lives on one NPU, and whether it fits: every model's constants one
after another in the weights memory (those kept on chip across frames in the SRAM reserve
instead, tessel.scenario.constants), then one activation arena shared by the models (sized by
the timeline: the arenas of the jobs in progress at once, at their largest) in the activation
memory. Each memory's total is checked against its size: a scenario whose models fit one by
one may not fit together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessel.arch import NpuArch
from tessel.errors import TesselCompileError
from tessel.scenario.constants import ConstantsPlan
from tessel.scenario.profile import ModelProfile

ALIGN = 64  # every region starts on a 64-byte boundary (a DMA burst)
SRAM = "sram"  # the on-chip scratchpad (the reserve for resident constants)


@dataclass(frozen=True)
class Region:
    what: str  # "constants of MODEL" or "shared activation arena"
    memory: str  # an off-chip memory's name, or SRAM
    address: int
    nbytes: int


@dataclass(frozen=True)
class MemoryMap:
    regions: tuple[Region, ...]
    used: dict[str, int]  # memory -> bytes up to the end of its last region
    size: dict[str, int]  # memory -> its capacity

    def text(self) -> str:
        return "; ".join(f"{m} {self.used[m]:,} of {self.size[m]:,} bytes" for m in self.used)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def memory_map(profiles: Mapping[str, ModelProfile], plan: ConstantsPlan, arena_bytes: int,
               arch: NpuArch) -> MemoryMap:
    """The regions in order; TesselCompileError when a memory overflows, naming it."""
    size = {m.name: m.size_bytes for m in arch.offchip}
    size[SRAM] = arch.onchip.sram_bytes
    top = {m.name: 0 for m in arch.offchip}
    top[SRAM] = arch.onchip.sram_bytes - plan.reserve
    regions = []
    for name, p in profiles.items():
        mem = SRAM if name in plan.resident else p.weights_memory
        regions.append(Region(f"constants of {name}", mem, top[mem], p.constant_bytes))
        top[mem] = _align(top[mem] + p.constant_bytes)
    act = arch.activations_memory
    regions.append(Region("shared activation arena", act, top[act], arena_bytes))
    top[act] += arena_bytes
    # the SRAM's figures are the reserve's (the scratchpad below it holds the working sets)
    top[SRAM] -= arch.onchip.sram_bytes - plan.reserve
    size[SRAM] = plan.reserve
    for mem, used in top.items():
        if used > size[mem]:
            parts = ", ".join(f"{r.what} {r.nbytes:,}" for r in regions if r.memory == mem)
            raise TesselCompileError(f"the scenario needs {used:,} bytes of {mem} but it has "
                                     f"{size[mem]:,} ({parts})")
    used = {m: top[m] for m in top if any(r.memory == m for r in regions)}
    return MemoryMap(tuple(regions), used, {m: size[m] for m in used})
