"""END, WAIT and SIGNAL: the queue's end and the dependency tokens between engines."""

from __future__ import annotations

from tessel.isa.cost_rules import Control
from tessel.isa.groups import TOKEN
from tessel.isa.opcode import Opcode
from tessel.isa.spec import InstrSpec

_SECTION = "END, WAIT, SIGNAL"

SPECS = (
    InstrSpec(opcode=Opcode.END, engine=None, summary="end of this engine's queue", fields=(),
              cost=Control(), section=_SECTION),
    InstrSpec(opcode=Opcode.WAIT, engine=None,
              summary="take one token from a producer engine (blocks)", fields=TOKEN,
              cost=Control(), section=_SECTION),
    InstrSpec(opcode=Opcode.SIGNAL, engine=None, summary="give one token to a consumer engine",
              fields=TOKEN, cost=Control(), section=_SECTION),
)
