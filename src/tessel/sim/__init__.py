"""tessel.sim: the bit-exact functional simulator of the Tessel NPU, its timing and energy model.

``simulate(program, arch, inputs, timing=True, trace=False) -> SimResult``; semantics and
costs of every instruction: docs/isa.md; the timing model's rules: docs/architecture.md
("Simulator") and ``tessel.sim.timing``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# (imported now: the submodule tessel.sim.prepare would otherwise shadow the function)
from tessel.sim.prepare import PreparedProgram, prepare, prepared

if TYPE_CHECKING:
    from tessel.sim.api import simulate, timing_stats
    from tessel.sim.stats import EngineStats, MemoryTraffic, SimResult, SimStats, TraceEntry

# the names below, each imported from its module on first use (PEP 562): a user of one
# submodule alone (tessel.sim.jit, as the compiler's step timing does) does not import the
# simulator
_HOME = {"simulate": "api", "timing_stats": "api", "EngineStats": "stats",
         "MemoryTraffic": "stats", "SimResult": "stats", "SimStats": "stats",
         "TraceEntry": "stats"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'tessel.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tessel.sim.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "EngineStats",
    "MemoryTraffic",
    "PreparedProgram",
    "SimResult",
    "SimStats",
    "TraceEntry",
    "prepare",
    "prepared",
    "simulate",
    "timing_stats",
]
