"""Cycle and energy-event cost of every instruction, in isolation (docs/isa.md, "Costs").

``instruction_cost`` applies the cost rule of the instruction's definition on the engine it
runs on (``InstrSpec.cost_on``; the rules are ``tessel.isa.cost_rules``). The simulator's
timing model and the compiler's analytical model both call it, so they cannot disagree about
a single instruction. What this module does NOT model is interaction between instructions:
waiting on tokens and DMA engines sharing an off-chip memory's bandwidth are the simulator's
job. ``cost_key`` names what a cost reads of an instruction (``InstrSpec.cost_fields``), for
the memos that share costs between tiles at other addresses.
"""

from __future__ import annotations

from typing import TypeVar

from tessel.arch.types import NpuArch
from tessel.isa.access import getter
from tessel.isa.cost_rules import (
    CONTROL_CYCLES,
    Control,
    Cost,
    Gemm,
    Transfer,
    Vector,
    fold_cycles,
    gemm_cycles,
    gemm_folds,
    scalesim_cycles,
)
from tessel.isa.events import Events, energy_breakdown_pj, energy_pj, static_energy_pj
from tessel.isa.fields import Engine
from tessel.isa.instruction import Instruction
from tessel.isa.table import SPECS, Opcode

__all__ = ["CONTROL_CYCLES", "COST_FIELDS", "Cost", "Events", "control_cost", "cost_key",
           "dma_cost", "energy_breakdown_pj", "energy_pj", "fold_cycles", "gemm_cycles",
           "gemm_dims", "gemm_folds", "instruction_cost", "matrix_cost", "scalesim_cycles",
           "static_energy_pj", "vector_cost"]

R = TypeVar("R")
# per opcode: its cost rule by engine (None: its own engine), on the hot path of every memo miss
_RULES = {op: {None: spec.cost, **{e: spec.cost_on(e) for e in Engine}}
          for op, spec in SPECS.items()}


def instruction_cost(i: Instruction, arch: NpuArch, engine: Engine | None = None) -> Cost:
    """Cost of any instruction. ``engine``: the queue it runs in; only DWCONV runs on two
    engines (MATRIX, its depthwise mode, when None)."""
    return _RULES[i.opcode][engine].cost(i, arch)


def _rule_of(i: Instruction, kind: type[R], what: str) -> R:
    """The instruction's cost rule of class ``kind`` (on either engine that runs it)."""
    spec = SPECS[i.opcode]
    for rule in (spec.cost, spec.also_cost):
        if isinstance(rule, kind):
            return rule
    raise ValueError(f"{i.opcode.name} is not {what}")


def gemm_dims(i: Instruction) -> tuple[int, int, int]:
    """(M, N, K) of a CONV or MATMUL tile: output rows (pixels), output columns, reduction;
    of a DWCONV in the array's depthwise mode: pixels, channels (columns), kernel taps (rows)."""
    return _rule_of(i, Gemm, "a matrix instruction").dims(i)


def matrix_cost(i: Instruction, arch: NpuArch) -> Cost:
    """CONV / MATMUL / DWCONV (depthwise mode) on the array (``cost_rules.Gemm``)."""
    return _rule_of(i, Gemm, "a matrix instruction").cost(i, arch)


def vector_cost(i: Instruction, arch: NpuArch) -> Cost:
    """A vector instruction, DWCONV on the vector engine included (``cost_rules.Vector``)."""
    return _rule_of(i, Vector, "a vector instruction").cost(i, arch)


def dma_cost(i: Instruction, arch: NpuArch) -> Cost:
    """DMA_LOAD / DMA_STORE alone (``cost_rules.Transfer``)."""
    return _rule_of(i, Transfer, "a DMA").cost(i, arch)


def control_cost(i: Instruction, arch: NpuArch) -> Cost:
    """WAIT / SIGNAL / END (``cost_rules.Control``)."""
    return _rule_of(i, Control, "a control instruction").cost(i, arch)


# ---- memo key ---------------------------------------------------------------------------------
COST_FIELDS: dict[Opcode, tuple[str, ...]] = {op: s.cost_fields for op, s in SPECS.items()}
_COST_GET = {op: getter(s.fields, *s.cost_fields) if s.cost_fields
             else (lambda args: ()) for op, s in SPECS.items()}


def cost_key(i: Instruction, engine: Engine | None = None) -> tuple:
    """A key equal for instructions whose `instruction_cost(i, arch, engine)` is equal on every
    arch: the opcode, whether a DWCONV runs on the vector engine, and the cost fields' values.
    (Plain ints where it can: an enum member hashes in Python, the key is on hot paths.)"""
    op = i.opcode
    return (int(op), op == _DWCONV and engine == _VECTOR_ENGINE, _COST_GET[op](i.args))


_DWCONV, _VECTOR_ENGINE = Opcode.DWCONV, Engine.VECTOR
