"""Where each instruction's semantics live: docs/isa.md section 4 states them (the heading is
``InstrSpec.section``); the simulator's implementation of each opcode registers here.

The ISA sits below the simulator and does not import it: the simulator calls ``implement``
for every opcode it runs (its step builders), and ``InstrSpec.implementation`` reads the
registration back. ``unimplemented()`` lists the opcodes without one, for the test that
keeps the simulator complete. WAIT, SIGNAL and END are the simulator's scheduling itself
(docs/isa.md section 1), not a step: they need no registration.
"""

from __future__ import annotations

from collections.abc import Callable

from tessel.isa.opcode import Opcode

CONTROL = (Opcode.END, Opcode.WAIT, Opcode.SIGNAL)
_IMPLEMENTATIONS: dict[Opcode, Callable] = {}


def implement(opcode: Opcode, fn: Callable) -> None:
    """Register ``fn`` as the implementation of ``opcode``. Registering the same function
    again (a reloaded module's) replaces it; another function for an opcode that has one is
    refused."""
    have = _IMPLEMENTATIONS.get(opcode)
    if have is not None and _name(have) != _name(fn):
        raise ValueError(f"{opcode.name} is implemented by {_name(have)} already")
    _IMPLEMENTATIONS[opcode] = fn


def _name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def implementation(opcode: Opcode) -> Callable | None:
    """The registered implementation of ``opcode``, or None."""
    return _IMPLEMENTATIONS.get(opcode)


def unimplemented() -> list[Opcode]:
    """The opcodes other than WAIT / SIGNAL / END that have no implementation registered."""
    return [op for op in Opcode if op not in CONTROL and op not in _IMPLEMENTATIONS]
