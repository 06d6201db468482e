"""The instructions' one implementation: each instruction of a prepared program becomes a step.

``steps(prep)`` builds, once per prepared program, a closure ``step(state)`` for every
non-control instruction, its fields bound; the functional simulator runs them in its plan's
order (``tessel.sim.functional``). One module per instruction family holds the builder and
its compiled kernels (``tessel.sim.jit``: numba, or the kernels' Python source when kernels
are off), written from docs/isa.md's pseudocode; only data movement (``move``) is plain
numpy. Every step works on one sample (``MachineState``) and on a batch (``BatchState``)
alike. A step signals a data-dependent trap by raising ``state.Trap`` with its reason; an
instruction with a static trap (``Op.error``) gets a step that raises it.
"""

from __future__ import annotations

from collections.abc import Callable

from tessel.isa.semantics import implement
from tessel.isa.table import Opcode
from tessel.sim.hostmem import Step
from tessel.sim.instr import conv, dwconv, eltwise, lut, matmul, move, pool, reduce, requant
from tessel.sim.prepare import CONTROL, Op, PreparedProgram
from tessel.sim.state import MachineState, Trap

BUILDERS: dict[Opcode, Callable[[Op, PreparedProgram], Step]] = {
    Opcode.DMA_LOAD: move.build_dma,
    Opcode.DMA_STORE: move.build_dma,
    Opcode.DMA_LOAD_W: move.build_decoded_load,
    Opcode.COPY: move.build_copy,
    Opcode.LUT_LOAD: move.build_lut_load,
    Opcode.CONV: conv.build,
    Opcode.MATMUL: matmul.build,
    Opcode.DWCONV: dwconv.build,
    Opcode.POOL: pool.build,
    Opcode.REQUANT: requant.build,
    Opcode.ELTWISE: eltwise.build,
    Opcode.LUT: lut.build,
    Opcode.REDUCE: reduce.build_reduce,
    Opcode.UNARY: reduce.build_unary,
}
for _opcode, _build in BUILDERS.items():
    implement(_opcode, _build)


def build_step(op: Op, prep: PreparedProgram) -> Step:
    """The step of one non-control instruction."""
    if op.error is not None:
        why = op.error

        def trap(state: MachineState) -> None:
            raise Trap(why)
        return trap
    return BUILDERS[op.opcode](op, prep)


def steps(prep: PreparedProgram) -> tuple[tuple[Step | None, ...], ...]:
    """Per queue, per instruction: its step (None for WAIT / SIGNAL / END); built once per
    prepared program (cached in its ``cache``)."""
    hit = prep.cache.get("steps")
    if hit is None:
        hit = prep.cache["steps"] = tuple(
            tuple(None if op.opcode in CONTROL else build_step(op, prep) for op in q)
            for q in prep.queues)
    return hit
