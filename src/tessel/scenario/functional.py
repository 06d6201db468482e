"""`tessel scenario run --functional`: every model of a scenario compiled for the NPU, its
first frame (its inputs file, else its example inputs) run on the simulator and compared bit
for bit with the integer golden model; the simulated cycles are reported next to the
estimate the schedule used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessel.arch import CompileOptions, NpuArch
from tessel.scenario.profile import quantised_graph
from tessel.scenario.spec import Scenario


@dataclass(frozen=True)
class FrameCheck:
    name: str
    bit_exact: bool
    mismatched: int  # output elements that differ from the golden model
    simulated_cycles: int
    estimated_cycles: int

    def line(self) -> str:
        verdict = "bit-exact" if self.bit_exact else f"{self.mismatched} elements differ"
        return (f"functional {self.name}: first frame {verdict} vs the golden model; "
                f"{self.simulated_cycles:,} cycles simulated, {self.estimated_cycles:,} "
                "estimated")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_first_frames(scenario: Scenario, arch: NpuArch,
                       options: CompileOptions | None = None,
                       progress: Callable[[str], None] | None = None) -> list[FrameCheck]:
    from tessel.driver import compile_graph
    from tessel.models import resolve
    from tessel.models.data_files import read_inputs
    from tessel.quant.golden import run_golden

    out = []
    for m in scenario.models:
        if progress is not None:
            progress(f"functional: {m.name} ({m.model}) on the simulator")
        graph = quantised_graph(m)
        inputs = resolve(m.model).example_inputs()
        if m.inputs is not None:
            inputs = read_inputs(m.inputs, inputs)
        arrays = [np.asarray(x.detach().numpy()) for x in inputs]
        cm = compile_graph(graph, arch, options=options, name=m.name)
        got = cm.run(*arrays)
        want = run_golden(graph, arrays)
        bad = sum(int(np.count_nonzero(np.asarray(g) != np.asarray(w)))
                  for g, w in zip(got, want, strict=True))
        prof = cm.profile
        out.append(FrameCheck(m.name, bad == 0, bad, prof.cycles,
                              sum(layer.estimated_cycles for layer in prof.layers)))
    return out
