"""tessel.sim: the bit-exact functional simulator of the Tessel NPU, its timing and energy model.

``simulate(program, arch, inputs, timing=True, trace=False) -> SimResult``; semantics and
costs of every instruction: docs/isa.md; the timing model's rules: docs/architecture.md
("Simulator") and ``tessel.sim.timing``.
"""

from tessel.sim.api import simulate, timing_stats
from tessel.sim.prepare import PreparedProgram, prepare, prepared
from tessel.sim.stats import EngineStats, MemoryTraffic, SimResult, SimStats, TraceEntry

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
