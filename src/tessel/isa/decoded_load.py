"""When a load of constant bytes pays as DMA_LOAD_W: the rule code generation applies
(tessel.emit.compress) and the schedule's estimate follows (tessel.schedule.decoded), so the
two agree on which loads decode.

A DMA_LOAD qualifies when it reads its bytes in order into contiguous SRAM and nothing else
reads its range (`eligible`: no other access overlaps it); its range pays as
a weight stream when the stream stores in fewer bytes (``stored``: a range shrinks
by a multiple of ``ALIGN`` bytes, so the bytes after it keep their alignment) and no load of
the range takes more cycles as the DMA_LOAD_W (the link's bytes against the decoder's output
rate, `tessel.isa.costs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tessel.arch.types import NpuArch
from tessel.isa.access import Space
from tessel.isa.costs import instruction_cost
from tessel.isa.footprint import accesses
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


def constant_reads(i: Instruction, memory: int, size: int
                   ) -> Iterable[tuple[tuple[int, int], bool]]:
    """The ranges of the constants (bytes [0, size) of off-chip `memory`) `i` touches, each with
    whether it is a whole-range load (`contiguous_load`) of exactly that range."""
    for a in accesses(i):
        if a.space != Space.OFFCHIP or a.mem != memory or a.hi <= 0 or a.lo >= size:
            continue
        r = contiguous_load(i)
        whole = r is not None and r == (a.lo, a.hi) and a.hi <= size
        yield (a.lo, a.hi), whole


def eligible(loads: Iterable[tuple[int, int]], pinned: Iterable[tuple[int, int]]
             ) -> list[tuple[int, int]]:
    """The load ranges overlapping no pinned range (read otherwise) and no other load range,
    in order: the ranges whose bytes only their whole-range loads read."""
    spans = sorted([(lo, hi, True) for lo, hi in set(loads)]
                   + [(lo, hi, False) for lo, hi in pinned])
    out, reach = [], -1
    for k, (lo, hi, is_load) in enumerate(spans):
        clear_before = lo >= reach
        clear_after = k + 1 == len(spans) or spans[k + 1][0] >= hi
        if is_load and clear_before and clear_after:
            out.append((lo, hi))
        reach = max(reach, hi)
    return out


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
