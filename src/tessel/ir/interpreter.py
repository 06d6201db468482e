"""Run a Graph on numpy inputs: the float reference interpreter (the oracle for later stages).

`run_graph` executes nodes in order with the float kernels of the op definitions
(`tessel.ir.kernels`); other interpreters (the integer golden model) pass their own table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tessel.errors import TesselError
from tessel.ir.graph import Graph, Node
from tessel.ir.kernels import Kernel, kernel_of
from tessel.ir.ops import Op
from tessel.ir.verifier import attrs_with_defaults


class TesselInterpreterError(TesselError):
    """A node failed to execute; names the node and its source location."""


def bind_inputs(graph: Graph, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
                ) -> dict[str, np.ndarray]:
    """Check inputs against the graph's declared input types; returns name -> array."""
    if isinstance(inputs, Mapping):
        missing = [v.name for v in graph.inputs if v.name not in inputs]
        if missing:
            raise TesselError(f"graph @{graph.name}: missing input(s) {missing}")
        arrays = [inputs[v.name] for v in graph.inputs]
    else:
        if len(inputs) != len(graph.inputs):
            raise TesselError(f"graph @{graph.name} takes {len(graph.inputs)} input(s), "
                              f"got {len(inputs)}")
        arrays = list(inputs)
    env = {}
    for value, arr in zip(graph.inputs, arrays, strict=True):
        arr = np.asarray(arr)
        if tuple(arr.shape) != value.type.shape:
            raise TesselError(f"input %{value.name}: shape {list(arr.shape)} != declared "
                              f"{list(value.type.shape)}")
        env[value.name] = arr.astype(value.type.dtype.numpy, copy=False)
    return env


def run_graph(graph: Graph, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray], *,
              kernels: Mapping[Op, Kernel] | None = None, keep_all: bool = False
              ) -> list[np.ndarray] | dict[str, np.ndarray]:
    """Outputs of `graph` for `inputs` (list, in output order); with keep_all, every value.
    `kernels`: the kernel of each op (None: the float kernels of the op definitions)."""
    env = bind_inputs(graph, inputs)
    last_use = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs:
            last_use[name] = i
    keep = set(graph.outputs)
    for i, node in enumerate(graph.nodes):
        env[node.name] = _execute(node, [env[n] for n in node.inputs], kernels)
        if not keep_all:
            for name in set(node.inputs):
                if last_use.get(name) == i and name not in keep:
                    del env[name]
    if keep_all:
        return env
    return [env[o] for o in graph.outputs]


def _execute(node: Node, args: list[np.ndarray], kernels: Mapping[Op, Kernel] | None
             ) -> np.ndarray:
    if node.is_host:
        from tessel.ir.host import run_host_node  # torch-backed; imported only when needed
        fn = lambda a, xs: run_host_node(node, xs)  # noqa: E731
    else:
        fn = kernel_of(node.op) if kernels is None else kernels.get(node.op)
    if fn is None:
        raise TesselInterpreterError(f"{node}: no kernel for op '{node.op.value}' in this "
                                     f"interpreter (at {node.loc})")
    try:
        out = np.asarray(fn(attrs_with_defaults(node), args))
    except TesselError:
        raise
    except Exception as exc:  # a kernel bug or bad data: say which node
        raise TesselInterpreterError(f"{node} at {node.loc} failed: {type(exc).__name__}: {exc}"
                                     ) from exc
    if out.shape != node.type.shape:
        raise TesselInterpreterError(f"{node}: kernel produced shape {list(out.shape)}, type says "
                                     f"{list(node.type.shape)}")
    return out.astype(node.type.dtype.numpy, copy=False)
