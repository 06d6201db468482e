"""The functional (bit-exact) simulator: runs the four queues with their dependency tokens.

Data results of a race-free program do not depend on timing, so this runs each engine as far
as it can (until a WAIT finds no token), then the next, round robin, until every queue has
executed END. If no engine can move and some have not ended, the program is deadlocked:
``TesselSimError`` names every blocked engine and instruction. A SIGNAL that would raise a
count above 255 stalls here (the other engines may drain it); it traps only if nothing can
move. (The timing model traps when its real schedule overflows a count.) Token counts never
depend on data, so the order is computed once per program region (``linear_plan``) and a run
executes the flat list of its data instructions; ``FunctionalRun(linear=False)`` runs the
engine loop itself. Each executed instruction runs its step (``tessel.sim.instr``); a
failing step becomes a ``TesselSimError`` naming the instruction (``failure``). A one-sample
state runs a plan's steps bound to it (``bound_plan``: each step's call of no arguments, made
once per state, pool and plan), which saves the steps' own frames and view look-ups: a
transformer's plan is thousands of instructions of a few microseconds each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessel.errors import TesselSimError
from tessel.isa.fields import Engine
from tessel.isa.limits import NUM_ENGINES
from tessel.isa.table import NUM_TOKENS, Opcode
from tessel.sim.hostmem import BATCH_POOL_BYTES, Pool, bound, pool_for
from tessel.sim.instr import steps as instruction_steps
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import MachineState, Trap

SEM_MAX = 255


def failure(op: Op, exc: BaseException) -> TesselSimError:
    """The error an instruction's failing step becomes, naming the instruction: its trap, the
    host running out of memory, or (anything else) a simulator fault."""
    if isinstance(exc, Trap):
        return TesselSimError(f"{op.where()}: {exc}")
    if isinstance(exc, MemoryError):
        return TesselSimError(f"{op.where()}: the host ran out of memory simulating it")
    return TesselSimError(f"{op.where()}: simulator fault ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); please report this file")


_EXEC, _WAIT, _SIGNAL, _END = 0, 1, 2, 3


def control_table(prep: PreparedProgram) -> tuple[tuple[tuple[int, int, Op], ...], ...]:
    """Per queue, per instruction: (kind, flat token-counter index, op), computed once per
    prepared program so that the dispatch loop does no field look-ups or tuple building."""
    hit = prep.cache.get("control")
    if hit is None:
        rows = []
        for q in prep.queues:
            row = []
            for op in q:
                if op.opcode is Opcode.WAIT:  # counter [producer = peer, consumer = this]
                    row.append((_WAIT, (op.f["engine"] * NUM_ENGINES + op.engine) * NUM_TOKENS
                                + op.f["token"], op))
                elif op.opcode is Opcode.SIGNAL:
                    row.append((_SIGNAL, (op.engine * NUM_ENGINES + op.f["engine"]) * NUM_TOKENS
                                + op.f["token"], op))
                else:
                    row.append((_END if op.opcode is Opcode.END else _EXEC, 0, op))
            rows.append(tuple(row))
        hit = prep.cache["control"] = tuple(rows)
    return hit


def dispatch_table(prep: PreparedProgram) -> tuple[tuple[tuple[int, int, Any], ...], ...]:
    """``control_table`` with each executed instruction's step ``fn(state)`` (``tessel.sim
    .instr``) in place of its op; once per prepared program."""
    hit = prep.cache.get("dispatch")
    if hit is None:
        control = control_table(prep)
        hit = prep.cache["dispatch"] = tuple(
            tuple((kind, key, step if kind == _EXEC else op)
                  for (kind, key, op), step in zip(row, srow, strict=True))
            for row, srow in zip(control, instruction_steps(prep), strict=True))
    return hit


def _run_engine(table: tuple[tuple[int, int, Any], ...], ops: tuple[Op, ...], pc: int,
                sem: list[int], state: MachineState, stop: int) -> int:
    """Run one queue from ``pc`` until it blocks, reaches ``stop`` or passes END; return the
    new pc. ``sem``: the token counts, flat [producer][consumer][token]. ``table``: the queue's
    row of ``dispatch_table``; ``ops``: its instructions."""
    stop = min(stop, len(table))
    try:
        while pc < stop:
            kind, key, fn = table[pc]
            if kind == _EXEC:
                fn(state)
            elif kind == _WAIT:
                if sem[key] == 0:
                    return pc
                sem[key] -= 1
            elif kind == _SIGNAL:
                if sem[key] >= SEM_MAX:
                    return pc
                sem[key] += 1
            pc += 1
    except TesselSimError:
        raise
    except Exception as exc:
        raise failure(ops[pc], exc) from None
    return pc


def run_functional(prep: PreparedProgram, state: MachineState) -> int:
    """Execute every queue to its END; returns the number of instructions executed."""
    return FunctionalRun(prep, state).run_until(None)


@dataclass(frozen=True, slots=True)
class Plan:
    """One ``run_until`` linearised: the executed instructions in the order the engine loop
    runs them (``steps``: (callable, op), WAIT / SIGNAL / END gone), the program counters and
    token counts after it, and the deadlock it ends in (None: it reaches every stop)."""

    steps: tuple[tuple[Any, Op], ...]
    pcs: tuple[int, ...]
    sem: tuple[int, ...]
    deadlock: str | None


PLANS_MAX = 64  # linearised plans kept per prepared program


def linear_plan(prep: PreparedProgram, pcs: list[int], sem: list[int], stops: list[int]) -> Plan:
    """The plan of ``run_until(stops)`` from (pcs, sem): the engine loop itself (``_advance``)
    run once on a table whose executed instructions only record themselves. Token counts
    never depend on data, so this order is exactly what the loop would run; cached per
    (pcs, sem, stops), i.e. once per program region."""
    plans = prep.cache.setdefault("plans", {})
    key = (tuple(pcs), tuple(sem), tuple(stops))
    hit = plans.get(key)
    if hit is not None:
        return hit
    order: list[tuple[int, int]] = []
    record = [tuple((kind, k, (lambda _state, ei=(e, i): order.append(ei)) if kind == _EXEC
                     else fn) for i, (kind, k, fn) in enumerate(row))
              for e, row in enumerate(control_table(prep))]
    pcs2, sem2, deadlock = list(pcs), list(sem), None
    try:
        _advance(record, prep.queues, pcs2, sem2, None, stops)  # type: ignore[arg-type]
    except TesselSimError as exc:  # a deadlock (nothing else can raise here)
        deadlock = str(exc)
    table = dispatch_table(prep)
    plan = Plan(tuple((table[e][i][2], prep.queues[e][i]) for e, i in order), tuple(pcs2),
                tuple(sem2), deadlock)
    if len(plans) >= PLANS_MAX:
        plans.clear()
    plans[key] = plan
    return plan


def run_plan(steps: tuple[tuple[Any, Op], ...], state: MachineState) -> None:
    """Run a plan's instructions in order (a failure names its instruction: ``failure``)."""
    op = None
    try:
        for fn, op in steps:  # noqa: B007 (op names a failing instruction below)
            fn(state)
    except TesselSimError:
        raise
    except Exception as exc:
        assert op is not None
        raise failure(op, exc) from None


BOUND_MAX = 64  # bound plans kept per state


def bound_plan(plan: Plan, state: MachineState) -> tuple[tuple[Any, Op], ...]:
    """``plan.steps`` bound to a one-sample ``state`` (``hostmem.bound``): (call of no
    arguments, op) per instruction, kept on the state while its SRAM and pool are the same
    objects (as ``hostmem.Views`` keeps the views the calls hold)."""
    memo = state.bound
    if memo is None:
        memo = state.bound = {}
    hit = memo.get(id(plan))
    if hit is not None and hit[0] is plan and hit[1] is state.sram and hit[2] is state.pool:
        return hit[3]
    calls = tuple((bound(fn, state), op) for fn, op in plan.steps)
    if len(memo) >= BOUND_MAX:
        memo.clear()
    memo[id(plan)] = (plan, state.sram, state.pool, calls)
    return calls


def run_bound(calls: tuple[tuple[Any, Op], ...]) -> None:
    """Run a bound plan's calls in order (a failure names its instruction: ``failure``)."""
    op = None
    try:
        for call, op in calls:  # noqa: B007 (op names a failing instruction below)
            call()
    except TesselSimError:
        raise
    except Exception as exc:
        assert op is not None
        raise failure(op, exc) from None


def _advance(table: Any, queues: tuple[tuple[Op, ...], ...], pcs: list[int], sem: list[int],
             state: MachineState, stops: list[int]) -> int:
    """The engine loop: run each queue as far as it can, round robin, until every queue has
    reached its stop; ``pcs`` / ``sem`` updated in place. Raises the deadlock."""
    while True:
        moved = False
        for e in range(len(queues)):
            if pcs[e] < stops[e]:
                new = _run_engine(table[e], queues[e], pcs[e], sem, state, stops[e])
                moved |= new != pcs[e]
                pcs[e] = new
        if all(pc >= stop for pc, stop in zip(pcs, stops, strict=True)):
            return sum(pcs)
        if not moved:
            raise TesselSimError(deadlock_message(queues, pcs, sem, stops))


class FunctionalRun:
    """The queues' program counters and token counts, kept between calls so that a program of
    several NPU regions can stop at a region boundary (the host runs) and resume there.
    Instructions run as their steps (``tessel.sim.instr``: one sample or a batch alike).
    ``linear``: run the region's linearised plan (``linear_plan``: the same order, no token
    bookkeeping at run time); False: the engine loop itself (tests compare the two)."""

    def __init__(self, prep: PreparedProgram, state: MachineState, linear: bool = True) -> None:
        self.prep, self.state, self.linear = prep, state, linear
        self.pcs = [0] * len(prep.queues)
        self.sem = [0] * (NUM_ENGINES * NUM_ENGINES * NUM_TOKENS)  # flat [producer][consumer][token]
        self.table = dispatch_table(prep)
        # a batch's buffers are n times larger: kept for this run only, bounded
        state.pool = pool_for(prep) if state.batch is None else Pool(BATCH_POOL_BYTES)

    def run_until(self, stops: list[int] | None) -> int:
        """Run every queue up to index stops[engine] (exclusive; None: to its end); returns
        the number of instructions executed so far."""
        queues, pcs, sem = self.prep.queues, self.pcs, self.sem
        stops = [len(q) for q in queues] if stops is None else stops
        if not self.linear:
            return _advance(self.table, queues, pcs, sem, self.state, stops)
        plan = linear_plan(self.prep, pcs, sem, stops)
        if self.state.batch is None:
            run_bound(bound_plan(plan, self.state))
        else:
            run_plan(plan.steps, self.state)
        pcs[:], sem[:] = plan.pcs, plan.sem
        if plan.deadlock is not None:
            raise TesselSimError(plan.deadlock)
        return sum(pcs)


def deadlock_message(queues: tuple[tuple[Op, ...], ...], pcs: list[int], sem: Any,
                     stops: list[int] | None = None) -> str:
    """Name every blocked engine, its instruction and what it waits for (engines that reached
    their stop, the end of a region, are not blocked)."""
    parts = []
    for e, queue in enumerate(queues):
        if pcs[e] >= (len(queue) if stops is None else stops[e]):
            continue
        op = queue[pcs[e]]
        if op.opcode not in (Opcode.WAIT, Opcode.SIGNAL):
            parts.append(f"{Engine(e).name} instruction {op.index} ({op.opcode.name}) cannot "
                         "issue")
            continue
        peer, tok = Engine(op.f["engine"]), op.f["token"]
        if op.opcode == Opcode.WAIT:
            why = f"waits for token {tok} from {peer.name}, which is never signalled"
        else:
            why = f"cannot SIGNAL token {tok} to {peer.name}: its count is at {SEM_MAX}"
        parts.append(f"{Engine(e).name} instruction {op.index} ({op.opcode.name}) {why}")
    return "deadlock: " + "; ".join(parts)
