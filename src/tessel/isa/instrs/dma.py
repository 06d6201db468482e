"""DMA_LOAD and DMA_STORE: 4-D strided transfers between an off-chip memory and the SRAM;
DMA_LOAD_W: a weight stream read off chip and decoded into the SRAM."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessel.isa.access import Access, Space, new_access, span4
from tessel.isa.cost_rules import DecodedTransfer, Transfer, product
from tessel.isa.fields import DType, Engine
from tessel.isa.groups import DMA, DMA_W
from tessel.isa.opcode import Opcode
from tessel.isa.spec import InstrSpec

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch
    from tessel.isa.instruction import Instruction

_SECTION = "DMA_LOAD, DMA_STORE"
_NBYTES = tuple(t.nbytes for t in DType)  # by value: `args` hold the IntEnum member
# the two opcodes share their fields, in this order (`_accesses` unpacks them)
assert tuple(f.name for f in DMA) == (
    "mem", "dtype", "d0", "d1", "d2", "d3", "ext_addr", "ext_s0", "ext_s1", "ext_s2", "ext_s3",
    "sram_addr", "sram_s0", "sram_s1", "sram_s2", "sram_s3")
_ELEMENTS = product("d0", "d1", "d2", "d3")
_COST_FIELDS = ("mem", "dtype", "d0", "d1", "d2", "d3")
_OFFCHIP, _SRAM = Space.OFFCHIP, Space.SRAM


def _accesses(i: Instruction) -> tuple[Access, ...]:
    mem, dtype, d0, d1, d2, d3, ea, e0, e1, e2, e3, sa, s0, s1, s2, s3 = i.args
    w = _NBYTES[dtype]
    load = i.opcode == Opcode.DMA_LOAD
    elo, ehi = span4(ea, d0, e0, d1, e1, d2, e2, d3, e3, w)
    slo, shi = span4(sa, d0, s0, d1, s1, d2, s2, d3, s3, w)
    return (new_access(Access, ("ext", _OFFCHIP, elo, ehi, not load, mem)),
            new_access(Access, ("sram", _SRAM, slo, shi, load, 0)))


def _spec(opcode: Opcode, engine: Engine, summary: str, load: bool) -> InstrSpec:
    return InstrSpec(opcode=opcode, engine=engine, summary=summary, fields=DMA,
                     cost=Transfer(load, _ELEMENTS), cost_fields=_COST_FIELDS,
                     accesses=_accesses, sram_elements=(("sram", _ELEMENTS),), section=_SECTION)


def _needs_decoder(arch: NpuArch, i: Instruction) -> str | None:
    if arch.wdecoder.enabled:
        return None
    return f"DMA_LOAD_W needs the weight decoder; {arch.name} has none (wdecoder.enabled)"


def _decoded_accesses(i: Instruction) -> tuple[Access, ...]:
    mem, ea, ext_bytes, sa, out_bytes = i.args
    return (new_access(Access, ("ext", _OFFCHIP, ea, ea + ext_bytes, False, mem)),
            new_access(Access, ("sram", _SRAM, sa, sa + out_bytes, True, 0)))


SPECS = (
    _spec(Opcode.DMA_LOAD, Engine.DMA_IN, "off-chip -> SRAM, 4-D strided", load=True),
    _spec(Opcode.DMA_STORE, Engine.DMA_OUT, "SRAM -> off-chip, 4-D strided", load=False),
    InstrSpec(opcode=Opcode.DMA_LOAD_W, engine=Engine.DMA_IN,
              summary="off-chip weight stream -> SRAM, decoded", fields=DMA_W,
              cost=DecodedTransfer(), cost_fields=("mem", "ext_bytes", "out_bytes"),
              accesses=_decoded_accesses, sram_elements=(("sram", product("out_bytes")),),
              section="DMA_LOAD_W", requires=_needs_decoder),
)
