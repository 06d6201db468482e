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
from tessel.isa.table import Opcode
from tessel.sim.budget import check_budget
from tessel.sim.functional import FunctionalRun, run_functional
from tessel.sim.instr import steps as instruction_steps
from tessel.sim.prepare import PreparedProgram, prepared
from tessel.sim.state import (
    NP_DTYPE,
    BatchState,
    MachineState,
    extent,
    place_constants,
    read_output,
    write_inputs,
    write_tensor,
)
from tessel.sim.stats import (
    EngineStats,
    SimResult,
    SimStats,
    TraceEntry,
    energy,
    events_from_row,
    memory_traffic,
)
from tessel.sim.timing import InstrTimes, busy_cycles, events_matrix, instr_times
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
    check_budget(prep)
    state = MachineState(arch)
    place_constants(state, prog)
    write_inputs(state, prog, inputs)
    instruction_steps(prep)  # built (torch imported, if used) before the threads are pinned
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

    def __init__(self, program: TslProgram | PreparedProgram, arch: NpuArch,
                 batch: int | None = None, reuse: bool = False) -> None:
        """``batch=n``: simulate n samples at once (every input and output gets a leading axis
        of n; each instruction is applied to all samples, see ``BatchState``). ``reuse``
        (one sample): take the memories of a released session of this program, reset to
        their power-up state (``reset_state``), instead of new ones; ``release`` gives them
        back. (Stable memories also let the steps keep their operand views.)"""
        self.prep = prepared(program, arch)
        self.reused = False
        if batch is not None and batch < 1:
            raise TesselConfigError(f"simulate: batch must be >= 1, got {batch}")
        check_budget(self.prep, batch or 1)
        if batch is None and reuse:
            free = self.prep.cache.setdefault("free_states", [])
            try:
                self.state = free.pop()
            except IndexError:
                self.state = MachineState(arch)
            else:
                self.reused = True
                reset_state(self.prep, self.state)
        elif batch is None:
            self.state = MachineState(arch)
        else:
            extents, shared = batch_layout(self.prep)
            self.state = BatchState(arch, batch, extents, shared)
        if not (self.reused and _constants_kept(self.prep)):
            place_constants(self.state, self.prep.program)
        self.run = FunctionalRun(self.prep, self.state)
        self.reuse = reuse and batch is None
        prog = self.prep.program
        self.descriptors = {d.name: d for d in (*prog.inputs, *prog.outputs)}

    def run_region(self, inputs: Mapping[str, np.ndarray], ends: list[int],
                   outputs: list[str]) -> dict[str, np.ndarray]:
        """Write `inputs`, run each engine up to index ends[engine], read `outputs`."""
        for name, value in inputs.items():
            write_tensor(self.state, self._descriptor(name), value)
        self.run.run_until(ends)
        return {name: read_output(self.state, self._descriptor(name)) for name in outputs}

    def release(self) -> None:
        """Give a ``reuse`` session's memories back to its program (the session must not run
        again); a no-op otherwise."""
        if self.reuse:
            free = self.prep.cache.setdefault("free_states", [])
            if len(free) < FREE_STATES_MAX:
                free.append(self.state)
            self.reuse = False

    def _descriptor(self, name: str):
        desc = self.descriptors.get(name)
        if desc is None:
            raise TesselConfigError(f"simulate: the program has no tensor {name!r}")
        return desc


FREE_STATES_MAX = 4  # released memories kept per prepared program (one per thread in use)
_TRANSFERS = (Opcode.DMA_LOAD, Opcode.DMA_STORE, Opcode.DMA_LOAD_W)  # off-chip operands


def _constants_kept(prep: PreparedProgram) -> bool:
    """True if nothing the program does can change its constant block (``batch_layout``'s
    shared block: no DMA store or I/O tensor writes into it), so a reused state keeps it."""
    return batch_layout(prep)[1] is not None


def reset_state(prep: PreparedProgram, state: MachineState) -> None:
    """Back to the memories of a new ``MachineState`` with the constants placed (or about to
    be): the SRAM, accumulator and LUT memory zeroed, and every off-chip byte the program can
    touch (``batch_layout``: the highest byte of any DMA, I/O tensor or the constants; no
    byte above is ever written) zeroed, except the constant block when it is kept."""
    state.sram.fill(0)
    state.acc_bytes.fill(0)
    state.lut_bytes.fill(0)
    sizes, shared = batch_layout(prep)
    for mem, (buf, end) in enumerate(zip(state.offchip, sizes, strict=True)):
        if shared is not None and shared[0] == mem:
            c0, c1 = shared[1], shared[2]
            buf[:min(c0, end)].fill(0)
            buf[c1:end].fill(0)
        else:
            buf[:end].fill(0)


def batch_layout(prep: PreparedProgram
                 ) -> tuple[list[int], tuple[int, int, int, np.ndarray] | None]:
    """Off-chip memory sizes a batch needs (the highest byte any DMA, input, output or the
    constants can touch, per memory) and the shared read-only constant block, or None when some
    DMA store or I/O tensor may write into it, or a DMA load straddles its bounds. Cached."""
    hit = prep.cache.get("batch_layout")
    if hit is not None:
        return hit
    prog = prep.program
    ends = [0] * len(prep.arch.offchip)
    data = prog.constants
    cmem, c0, c1 = prog.constants_memory, prog.constants_address, \
        prog.constants_address + len(data)
    shareable = bool(data)
    if data:
        ends[cmem] = c1
    for d in (*prog.inputs, *prog.outputs):
        ends[d.memory] = max(ends[d.memory], d.address + d.nbytes)
        shareable &= d.memory != cmem or d.address + d.nbytes <= c0 or d.address >= c1
    for q in prep.queues:
        for op in q:
            if op.opcode not in _TRANSFERS or op.error is not None:
                continue
            f = op.f
            if op.opcode is Opcode.DMA_LOAD_W:
                lo, hi = f["ext_addr"], f["ext_addr"] + f["ext_bytes"]
            else:
                lo, hi = extent(f["ext_addr"], [f[f"d{k}"] for k in range(4)],
                                [f[f"ext_s{k}"] for k in range(4)],
                                NP_DTYPE[f["dtype"]].itemsize)
            mem = f["mem"]
            if mem >= len(ends) or lo < 0:
                continue  # traps when it runs
            ends[mem] = max(ends[mem], hi)
            if mem != cmem or hi <= c0 or lo >= c1 or hi == lo:
                continue
            inside = c0 <= lo and hi <= c1
            shareable &= op.opcode is not Opcode.DMA_STORE and inside
    sizes = [min(max(e, 1), m.size_bytes) for e, m in zip(ends, prep.arch.offchip, strict=True)]
    shared = None
    if shareable:
        buf = np.zeros(c1, np.uint8)
        buf[c0:] = np.frombuffer(data, np.uint8)
        buf.flags.writeable = False
        shared = (cmem, c0, c1, buf)
    prep.cache["batch_layout"] = sizes, shared
    return sizes, shared


def timing_stats(prep: PreparedProgram, count: int, trace: bool) -> SimStats:
    """Schedule the program and build cycles, per-engine, traffic and energy statistics."""
    arch = prep.arch
    sched = instr_times(prep)
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


def _trace(prep: PreparedProgram, sched: InstrTimes) -> tuple[TraceEntry, ...]:
    out = [TraceEntry(op.engine, op.index, op.opcode, s, t)
           for e, q in enumerate(prep.queues)
           for op, s, t in zip(q, sched.starts[e], sched.ends[e], strict=True)]
    return tuple(sorted(out, key=lambda x: (x.start, x.engine, x.index)))
