"""Cost models behind one interface (`CostModel`): what the mapping search
(tessel.schedule.search) asks for a candidate step's cycles.

* `AnalyticalCostModel`: `estimate_step` (schedule/estimate.py), the per-instruction costs of
  docs/isa.md run through the step's queues and tokens by the simulator's timing rules, with
  one `CostCache` of instruction costs; what `compile`, `estimate`, `advise` and `explore` use.
* `SimulatedCostModel` (tessel.emit.simulated_cost): the step emitted alone and timed by
  the simulator's timing model; for checking the search against the simulator.

Both read the same `sample` (the first `sample` tiles of the first two groups, the time
scaled by the share of tiles run, as `estimate_step` does) and `prefetched` / `prefetch`
(as `emit_step`). The estimator claims exactness per step, so on every step both models
give the same cycles; tests/unit/schedule/test_cost_model.py checks it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tessel.arch import NpuArch
from tessel.isa import Instruction, Opcode
from tessel.ops.step import StepWork
from tessel.schedule.estimate import CostCache, Estimate, StepProgram, estimate_step, time_program

_CONTROL = (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)


class CostModelKind(enum.Enum):
    """Which cost model a search used (part of the search cache's key)."""

    ANALYTICAL = "analytical"
    SIMULATED = "simulated"


@runtime_checkable
class CostModel(Protocol):
    """Cycles of one step's work on `arch`. `kind` keys the search cache; `prunable`: the
    closed-form lower bounds of tessel.schedule.prerank hold for its estimates (the search
    prunes with them only then)."""

    kind: CostModelKind
    prunable: bool

    def estimate(self, work: StepWork, arch: NpuArch, *, sample: int | None = None,
                 prefetched: bool = False, prefetch: Sequence[Instruction] = ()
                 ) -> Estimate: ...


class AnalyticalCostModel:
    """`estimate_step` with one instruction-cost memo (renewed when the NPU changes)."""

    kind = CostModelKind.ANALYTICAL
    prunable = True  # prerank's bounds are lower bounds of estimate_step

    def __init__(self) -> None:
        self._cost: CostCache | None = None

    def cost_cache(self, arch: NpuArch) -> CostCache:
        """The memo of the estimates on `arch` (a new one when the NPU changes)."""
        if self._cost is None or self._cost.arch is not arch:
            self._cost = CostCache(arch)
        return self._cost

    def estimate(self, work: StepWork, arch: NpuArch, *, sample: int | None = None,
                 prefetched: bool = False, prefetch: Sequence[Instruction] = ()
                 ) -> Estimate:
        return estimate_step(work, arch, sample=sample, cache=self.cost_cache(arch),
                             prefetched=prefetched, prefetch=prefetch)

    def program(self, work: StepWork, arch: NpuArch, *, sample: int | None = None
                ) -> StepProgram:
        """The arch-free program `estimate` times (`time(program(work, arch), arch) ==
        estimate(work, arch)`); valid on every NPU with `arch`'s search.program_key."""
        return StepProgram(work, sample, self.cost_cache(arch).tiles)

    def time(self, prog: StepProgram, arch: NpuArch) -> Estimate:
        return time_program(prog, self.cost_cache(arch))


def default_cost_model(model: CostModel | None) -> CostModel:
    """`model`, or a new analytical one (None: what the search does by default)."""
    return model if model is not None else AnalyticalCostModel()
