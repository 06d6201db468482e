"""Check that a program's I/O tensors and constants lie inside the memories of a target NpuArch.

A memory index in a .tsl file is the index of an off-chip memory in `NpuArch.offchip` (the
numbering DMA instructions use): I/O tensors and constants live off-chip; the program's DMA
streams move them to and from the on-chip SRAM."""

from __future__ import annotations

from typing import Any

from tessel.binary.program import TslProgram
from tessel.errors import TesselFormatError


def memory_sizes(arch: Any) -> tuple[int, ...]:
    """Size in bytes of each memory a .tsl address can name: the NpuArch's off-chip memories
    (`arch.offchip`), indexed by their position, as DMA instructions number them."""
    return tuple(int(m.size_bytes) for m in arch.offchip)


def check_placements(program: TslProgram, arch: Any) -> None:
    """Every I/O tensor and the constant block must fit inside its memory of `arch`."""
    sizes = memory_sizes(arch)
    regions = [("constants", program.constants_memory, program.constants_address,
                len(program.constants))]
    for group, descs in (("input", program.inputs), ("output", program.outputs)):
        regions += [(f"{group} {d.name!r}", d.memory, d.address, d.nbytes) for d in descs]
    for what, memory, address, nbytes in regions:
        if memory >= len(sizes):
            raise TesselFormatError(f"{what}: memory index {memory} does not exist; the target "
                                    f"has {len(sizes)} memories")
        if address + nbytes > sizes[memory]:
            raise TesselFormatError(
                f"{what}: bytes [{address}, {address + nbytes}) lie outside memory {memory} of "
                f"{sizes[memory]} bytes"
            )


def check_dma_memories(program: TslProgram, count: int) -> None:
    """Every instruction's `mem` field (the DMA's off-chip memory) names one of the target's
    `count` off-chip memories (the cost model and the simulator index them)."""
    for engine, stream in program.streams.items():
        if isinstance(stream, bytes | bytearray):
            continue
        for index, ins in enumerate(stream):
            mem = ins.as_dict().get("mem") if hasattr(ins, "as_dict") else None
            if mem is not None and mem >= count:
                name = getattr(engine, "name", engine)
                raise TesselFormatError(
                    f"{name}[{index}] {ins.opcode.name}: field 'mem' = {mem}, but the target "
                    f"has {count} off-chip memor{'y' if count == 1 else 'ies'}")
