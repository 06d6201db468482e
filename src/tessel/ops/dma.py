"""DMA instruction helpers shared by the op emitters."""

from __future__ import annotations

from tessel.ir import DType
from tessel.isa import Instruction, Opcode
from tessel.isa.limits import MAX_EXTENT
from tessel.ops.context import ISA_DTYPE, DramTensor

MAX_DIM = MAX_EXTENT  # the DMA's d0-d3
_CHUNK = 32768
_DIM_FIELDS = tuple((f"d{k}", f"ext_s{k}", f"sram_s{k}") for k in range(4))


def contiguous(op: Opcode, mem: int, ext: int, sram: int, nbytes: int) -> list[Instruction]:
    """Move `nbytes` contiguous bytes (one instruction, two when a remainder is left)."""
    i8 = ISA_DTYPE[DType.I8]
    if nbytes <= MAX_DIM:
        return [Instruction.make(op, mem=mem, dtype=i8, d0=nbytes, ext_addr=ext, ext_s0=1,
                                 sram_addr=sram, sram_s0=1)]
    rows, rem = divmod(nbytes, _CHUNK)
    out = [Instruction.make(op, mem=mem, dtype=i8, d0=_CHUNK, d1=rows, ext_addr=ext, ext_s0=1,
                            ext_s1=_CHUNK, sram_addr=sram, sram_s0=1, sram_s1=_CHUNK)]
    if rem:
        done = rows * _CHUNK
        out += contiguous(op, mem, ext + done, sram + done, rem)
    return out


def pattern(op: Opcode, t: DramTensor, ext_offset: int, sram: int,
            dims: tuple[tuple[int, int, int], ...]) -> Instruction:
    """A strided transfer of elements of `t`: dims innermost first as (count, ext_stride,
    sram_stride) in elements; up to four dims."""
    assert 1 <= len(dims) <= 4
    isz = t.itemsize
    fields: dict[str, int] = {}
    for (d, e, r), (count, es, ss) in zip(_DIM_FIELDS, dims):  # noqa: B905 - at most four
        fields[d] = count
        fields[e] = es * isz
        fields[r] = ss * isz
    return Instruction.make(op, mem=t.memory, dtype=ISA_DTYPE[t.dtype],
                            ext_addr=t.address + ext_offset * isz, sram_addr=sram, **fields)
