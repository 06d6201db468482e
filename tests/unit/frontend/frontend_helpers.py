"""Shared helpers of the frontend tests: a module wrapping a function, and the torch comparison."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from tessel.frontend import import_model
from tessel.ir import Graph, Op, run_graph

TOLERANCE = 1e-4  # of the output's range (max - min)


class Fn(nn.Module):
    """nn.Module whose forward is `fn(self, *inputs)`; keyword modules become submodules."""

    def __init__(self, fn: Callable, **modules: nn.Module):
        super().__init__()
        self.fn = fn
        for key, module in modules.items():
            setattr(self, key, module)

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def flat_outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in out for t in flat_outputs(o)]


def compare(graph: Graph, model: nn.Module, inputs: tuple, label: str = "") -> float:
    """Run graph and model on inputs; assert every output matches; returns the worst ratio."""
    got = run_graph(graph, [i.numpy() for i in inputs])
    with torch.no_grad():
        want = [t.numpy() for t in flat_outputs(model(*inputs))]
    assert len(got) == len(want), f"{label}: {len(got)} outputs, torch gives {len(want)}"
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, f"{label} output {k}: shape {g.shape} != torch {w.shape}"
        assert g.dtype == w.dtype, f"{label} output {k}: dtype {g.dtype} != torch {w.dtype}"
        if w.dtype.kind != "f":
            assert np.array_equal(g, w), f"{label} output {k}: integer results differ"
            continue
        err = float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0
        span = float(np.ptp(w)) if w.size else 0.0
        span = span if span > 0 else max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        print(f"{label} output {k}: max abs error {err:.3e}, range {span:.3e}, "
              f"ratio {err / span:.2e}")
        assert err <= TOLERANCE * span, f"{label} output {k}: error {err} > {TOLERANCE} x {span}"
        worst = max(worst, err / span)
    return worst


def check(model: nn.Module, inputs: tuple, expect: tuple[Op, ...] = (), label: str = "",
          **kwargs) -> Graph:
    """Import `model`, compare with torch eager, check that the `expect`ed IR ops appear."""
    graph = import_model(model.eval(), inputs, **kwargs)
    compare(graph, model, inputs, label)
    ops = {n.op for n in graph.nodes}
    missing = set(expect) - ops
    assert not missing, f"{label}: IR lacks {sorted(o.value for o in missing)}; has " \
                        f"{sorted(o.value for o in ops)}"
    return graph


def count(graph: Graph, op: Op) -> int:
    return sum(1 for n in graph.nodes if n.op is op)
