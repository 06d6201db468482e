"""Weight compression in code generation: on a target with the weight decoder
(``wdecoder.enabled``), the constant bytes that DMA_LOADs read whole and alone are stored as
weight streams (tessel.isa.weight_codec) and loaded with DMA_LOAD_W, one range at a time, when
it pays (`tessel.isa.decoded_load.pays`: the stream is smaller and no load of the range takes
more cycles; the schedule's estimate applies the same rule). Every other off-chip access of the constants
moves with the bytes it reads.

A range qualifies when every instruction touching any of its bytes is a DMA_LOAD reading
exactly those bytes in order into contiguous SRAM; then nothing else needs its raw bytes and
they leave the blob. Streams keep the blob's layout modulo ``ALIGN``: a range shrinks by a
multiple of ALIGN bytes (the stream padded with zeros), so the bytes after it keep their
alignment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessel.arch.types import NpuArch
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.access import Space
from tessel.isa.decoded_load import ALIGN, constant_reads, eligible, pays, stored
from tessel.isa.footprint import accesses
from tessel.isa.weight_codec import encode

__all__ = ["ALIGN", "CompressResult", "Compressed", "compress_constants"]
Queues = Mapping[Engine, tuple[Instruction, ...]]


@dataclass(frozen=True)
class Compressed:
    """One range of the blob stored as a stream: [lo, hi) raw, the stream at ``at`` (new)."""

    lo: int
    hi: int
    stream: bytes
    at: int


@dataclass(frozen=True)
class CompressResult:
    queues: dict[Engine, tuple[Instruction, ...]]
    blob: bytes
    ranges: tuple[Compressed, ...]


def _constant_reads(queues: Queues, memory: int, size: int
                    ) -> tuple[dict[tuple[int, int], list[tuple[Engine, int]]], list[tuple[int, int]]]:
    """The whole-range loads of the blob by range, and the ranges other accesses touch."""
    loads: dict[tuple[int, int], list[tuple[Engine, int]]] = {}
    pinned: list[tuple[int, int]] = []
    for e, q in queues.items():
        for k, i in enumerate(q):
            for r, whole in constant_reads(i, memory, size):
                if whole:
                    loads.setdefault(r, []).append((e, k))
                else:
                    pinned.append(r)
    return loads, pinned


def compress_constants(queues: Queues, blob: bytes, memory: int, arch: NpuArch
                       ) -> CompressResult:
    """The queues and constant blob with the ranges that pay stored as weight streams."""
    plain = dict(queues)
    if not arch.wdecoder.enabled or not blob:
        return CompressResult(plain, blob, ())
    loads, pinned = _constant_reads(queues, memory, len(blob))
    chosen = []
    for lo, hi in eligible(loads, pinned):
        stream = encode(blob[lo:hi], nibbles=True, sparse=arch.sparse.enabled)
        users = [queues[e][k] for e, k in loads[(lo, hi)]]
        if pays(len(stream), hi - lo, users, arch):
            chosen.append((lo, hi, stream))
    if not chosen:
        return CompressResult(plain, blob, ())
    return _rewrite(plain, blob, memory, chosen, loads)


def _rewrite(queues: dict[Engine, tuple[Instruction, ...]], blob: bytes, memory: int,
             chosen: list[tuple[int, int, bytes]], loads: dict) -> CompressResult:
    parts, ranges, cuts, shift, at = [], [], [], 0, 0  # cuts: (old lo, shift after it)
    for lo, hi, stream in chosen:
        parts.append(blob[at:lo])
        new_lo = lo - shift
        size = stored(len(stream), hi - lo)
        parts.append(stream + bytes(size - len(stream)))
        ranges.append(Compressed(lo, hi, stream, new_lo))
        shift += hi - lo - size
        cuts.append((hi, shift))
        at = hi
    parts.append(blob[at:])
    replaced = {ek: r for r in ranges for ek in loads[(r.lo, r.hi)]}

    def moved(addr: int) -> int:
        s = 0
        for end, after in cuts:
            if addr >= end:
                s = after
        return addr - s

    out = {}
    for e, q in queues.items():
        row = []
        for k, i in enumerate(q):
            r = replaced.get((e, k))
            if r is not None:
                i = Instruction.make(Opcode.DMA_LOAD_W, mem=memory, ext_addr=r.at,
                                     ext_bytes=len(r.stream), sram_addr=i.sram_addr,
                                     out_bytes=r.hi - r.lo)
            elif i.opcode in (Opcode.DMA_LOAD, Opcode.DMA_STORE) and i.mem == memory:
                lo = min(a.lo for a in accesses(i) if a.space == Space.OFFCHIP)
                if lo < len(blob):
                    i = i.replace(ext_addr=i.ext_addr - (lo - moved(lo)))
            row.append(i)
        out[e] = tuple(row)
    return CompressResult(out, b"".join(parts), tuple(ranges))
