"""The golden model: the integer Graph IR interpreter that defines every compiled model's output.

`GOLDEN_KERNELS` is the kernel table for `tessel.ir.run_graph`, read off the op definitions
(tessel.ops): each integer op's `golden` kernel is the exact composition of the NPU
instructions' arithmetic (`tessel.ops.intops`, one function per ISA instruction, built on
`tessel.isa.fixedpoint`), so the simulator running the compiled binary must equal it bit for
bit. Quantize / dequantize (host, PyTorch rounding), data movement and host (float) ops use
their float kernels.

    outputs = run_golden(qm.graph, [x])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tessel.ir.graph import Graph
from tessel.ir.interpreter import run_graph
from tessel.ir.kernels import Kernel
from tessel.ir.ops import Op
from tessel.ops import DEFINITIONS

GOLDEN_KERNELS: Mapping[Op, Kernel] = {
    op: kernel for op, d in DEFINITIONS.items()
    if (kernel := d.golden if d.golden is not None else d.kernel) is not None}


def run_golden(graph: Graph, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
               ) -> list[np.ndarray]:
    """The golden model's outputs for `inputs` (float32 graph inputs)."""
    return run_graph(graph, inputs, kernels=GOLDEN_KERNELS)
