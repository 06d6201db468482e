"""When a load of constant bytes pays as DMA_LOAD_W: the rule code generation applies
(tessel.emit.compress) and the schedule's estimate follows (tessel.schedule.decoded), so the
two agree on which loads decode.

A DMA_LOAD qualifies when it reads its bytes in order into contiguous SRAM; its range pays as
a weight stream when the stream stores in fewer bytes (``stored``: a range shrinks
by a multiple of ``ALIGN`` bytes, so the bytes after it keep their alignment) and no load of
the range takes more cycles as the DMA_LOAD_W (the link's bytes against the decoder's output
rate, `tessel.isa.costs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from tessel.arch.types import NpuArch
from tessel.isa.costs import instruction_cost
from tessel.isa.instruction import Instruction
from tessel.isa.opcode import Opcode

ALIGN = 64  # bytes: a compressed range shrinks by a multiple of this


def contiguous_load(i: Instruction) -> tuple[int, int] | None:
    """[lo, hi) of a DMA_LOAD reading its bytes in order into contiguous SRAM, or None."""
    if i.opcode is not Opcode.DMA_LOAD:
        return None
    at = i.dtype.nbytes  # the bytes one step of the next dimension must skip
    for d in range(4):
        n = getattr(i, f"d{d}")
        if n > 1 and (getattr(i, f"ext_s{d}") != at or getattr(i, f"sram_s{d}") != at):
            return None
        at *= n
    return i.ext_addr, i.ext_addr + at


def stored(stream: int, raw: int) -> int:
    """Bytes a range of ``raw`` bytes takes as a stream of ``stream`` bytes (ALIGN rule)."""
    return raw - (raw - stream) // ALIGN * ALIGN


def decoded_load(i: Instruction, ext_bytes: int, out_bytes: int,
                 ext_addr: int | None = None) -> Instruction:
    """The DMA_LOAD_W loading the `out_bytes` the DMA_LOAD `i` loads from their weight stream
    of `ext_bytes` (at `ext_addr`, default `i`'s)."""
    return Instruction.make(Opcode.DMA_LOAD_W, mem=i.mem,
                            ext_addr=i.ext_addr if ext_addr is None else ext_addr,
                            ext_bytes=ext_bytes, sram_addr=i.sram_addr, out_bytes=out_bytes)


def pays(size: int, raw: int, users: Sequence[Instruction], arch: NpuArch) -> bool:
    """Whether the range of `raw` bytes the loads `users` read pays stored as a weight stream
    of `size` bytes (`weight_codec.stream_size`; a raw stream, 5 bytes longer, never does)."""
    if stored(size, raw) >= raw:
        return False
    for i in users:
        w = decoded_load(i, size, raw, 0)
        if instruction_cost(w, arch).cycles > instruction_cost(i, arch).cycles:
            return False
    return True
