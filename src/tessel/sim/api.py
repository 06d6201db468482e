"""``simulate``: run a Tessel program on a simulated NPU; outputs plus cycles, traffic, energy.

The functional simulator (``tessel.sim.functional``) computes the outputs; with
``timing=True`` the timing model (``tessel.sim.timing``) then schedules the same queues and the
energy model sums the instructions' events. The two are separate so that each can be
measured (and the functional part run alone).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tessel.arch.types import NpuArch
from tessel.binary.program import TslProgram
from tessel.errors import TesselConfigError
from tessel.isa.fields import Engine
from tessel.sim.functional import FunctionalRun, run_functional
from tessel.sim.prepare import PreparedProgram, prepared
from tessel.sim.state import MachineState, place_constants, read_output, write_inputs, write_tensor
from tessel.sim.stats import (
    EngineStats,
    SimResult,
    SimStats,
    TraceEntry,
    energy,
    events_from_row,
    memory_traffic,
)
from tessel.sim.timing import Schedule, busy_cycles, events_matrix, schedule
from tessel.threads import single_threaded


def simulate(program: TslProgram | PreparedProgram, arch: NpuArch,
             inputs: Mapping[str, np.ndarray], *, timing: bool = True,
             trace: bool = False) -> SimResult:
    """Run ``program`` on ``arch`` with ``inputs`` (name -> array of the descriptor's dtype).

    Raises TesselConfigError for inputs that do not match the program's descriptors or a
    program built for another architecture, TesselFormatError for an illegal queue, and
    TesselSimError when the program traps (out-of-range access, deadlock, ...).
    """
    if trace and not timing:
        raise TesselConfigError("simulate: trace=True needs timing=True")
    prep = prepared(program, arch)
    prog = prep.program
    state = MachineState(arch)
    place_constants(state, prog)
    write_inputs(state, prog, inputs)
    with single_threaded():  # small tiles: one BLAS thread is fastest, and results never vary
        count = run_functional(prep, state)
    outputs = {d.name: read_output(state, d) for d in prog.outputs}
    if not timing:
        return SimResult(outputs, SimStats(instructions=count, timing=False))
    return SimResult(outputs, timing_stats(prep, count, trace))


class NpuSession:
    """One simulated NPU kept across the regions of a program: constants placed once, each
    `run_region` writes that region's inputs, runs every queue to the region's end (where the
    NPU would stop and hand over to the host) and reads its outputs; DRAM, token counts and
    program counters persist to the next region."""

    def __init__(self, program: TslProgram | PreparedProgram, arch: NpuArch) -> None:
        self.prep = prepared(program, arch)
        self.state = MachineState(arch)
        place_constants(self.state, self.prep.program)
        self.run = FunctionalRun(self.prep, self.state)
        prog = self.prep.program
        self.descriptors = {d.name: d for d in (*prog.inputs, *prog.outputs)}

    def run_region(self, inputs: Mapping[str, np.ndarray], ends: list[int],
                   outputs: list[str]) -> dict[str, np.ndarray]:
        """Write `inputs`, run each engine up to index ends[engine], read `outputs`."""
        for name, value in inputs.items():
            write_tensor(self.state, self._descriptor(name), value)
        self.run.run_until(ends)
        return {name: read_output(self.state, self._descriptor(name)) for name in outputs}

    def _descriptor(self, name: str):
        desc = self.descriptors.get(name)
        if desc is None:
            raise TesselConfigError(f"simulate: the program has no tensor {name!r}")
        return desc


def timing_stats(prep: PreparedProgram, count: int, trace: bool) -> SimStats:
    """Schedule the program and build cycles, per-engine, traffic and energy statistics."""
    arch = prep.arch
    sched = schedule(prep)
    total = sched.total_cycles
    n_mem = len(arch.offchip)
    ev = events_from_row(events_matrix(prep).sum(axis=0), n_mem)
    engines = {}
    for e in Engine:
        q = prep.queues[e]
        busy = busy_cycles(sched.starts[e], sched.ends[e], q, total)
        engines[e] = EngineStats(len(q), busy, total - busy)
    return SimStats(
        instructions=count, timing=True, total_cycles=total, seconds=total / arch.clock_hz,
        engines=engines, memory_traffic=memory_traffic(ev, arch),
        energy_pj=energy(ev, total, arch), macs=ev.macs, events=ev,
        trace=_trace(prep, sched) if trace else (),
    )


def _trace(prep: PreparedProgram, sched: Schedule) -> tuple[TraceEntry, ...]:
    out = [TraceEntry(op.engine, op.index, op.opcode, s, t)
           for e, q in enumerate(prep.queues)
           for op, s, t in zip(q, sched.starts[e], sched.ends[e], strict=True)]
    return tuple(sorted(out, key=lambda x: (x.start, x.engine, x.index)))
