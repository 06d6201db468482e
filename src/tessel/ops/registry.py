"""What the stages ask of the op definitions (tessel.ops.base): an op's definition, its NPU
emitter, whether and why not the NPU runs a node.

An emitter module provides three pure functions (none mutates the context or its pool):

* `candidates(node, ctx) -> list[Mapping]`: mappings that fit the NPU's memories (a mapping is
  a frozen dataclass whose str() reads well in reports);
* `constants(node, mapping, ctx) -> StepConstants`: the blobs the step reads from the constant
  pool (pre-tiled weights, parameter and LUT tables, constant operands) in read order;
* `step(node, mapping, ctx, placed=None) -> StepWork` (see tessel.ops.step): the step's
  program, reading blob k at `placed.addresses[k]`; `placed=None` is estimation (every
  constant address 0, nothing packed: the search calls it per candidate).

The schedule stage (schedule/plan.py) places each chosen step's constants with
`ConstPool.place` in program order and passes the addresses to `step`
(tessel.ops.context: StepConstants, PlacedConstants).
"""

from __future__ import annotations

from types import ModuleType

from tessel.errors import TesselCompileError
from tessel.ir import DType, Graph, Node, Op
from tessel.ops.base import DEFINITIONS, OpDef, Trait

NPU_DTYPES = (DType.I8, DType.I16, DType.I32)  # the element types of the NPU's tensors


def definition(op: Op) -> OpDef:
    """The one definition of `op`."""
    return DEFINITIONS[op]


def is_view(node: Node) -> bool:
    """No data movement: the result aliases its input in DRAM."""
    return definition(node.op).has(Trait.VIEW)


def emitter_for(node: Node) -> ModuleType:
    """The module that lowers `node` to NPU instructions."""
    npu = definition(node.op).npu
    if npu is None or npu.emitter is None:
        raise TesselCompileError(f"{node.described()}: no NPU lowering for '{node.op.value}'")
    return npu.emitter


def npu_refusal(node: Node, graph: Graph | None = None) -> str | None:
    """Why the NPU cannot run this node, or None: no NPU lowering, not integer, or outside the
    emitter's shape rules (the same rules the emitter enforces; those that need operand
    shapes are checked when `graph` is given). Decided before partitioning, so what does not
    fit falls back to the host with this reason."""
    npu = definition(node.op).npu
    if npu is None:
        return f"no NPU lowering for '{node.op.value}'"
    if not node.type.dtype.is_int:
        return f"{node.type.dtype.value} result (the NPU computes on integers)"
    if node.type.dtype not in NPU_DTYPES:
        return (f"{node.type.dtype.value} result (the NPU holds "
                f"{', '.join(d.value for d in NPU_DTYPES)} tensors)")
    if graph is not None:
        for k, name in enumerate(node.inputs):
            dtype = graph.type_of(name).dtype
            if dtype not in NPU_DTYPES and not (dtype is DType.I4 and k in npu.int4) \
                    and not (dtype is DType.I64 and k in npu.int64):
                return (f"operand %{name} is {dtype.value} (the NPU holds "
                        f"{', '.join(d.value for d in NPU_DTYPES)} tensors)")
    return npu.refusal(node, graph) if npu.refusal is not None else None


def node_macs(graph: Graph, node: Node) -> int:
    """MACs of a node as docs/figures.md counts them: conv (depthwise and transposed too), linear
    and matmul only (attention's two products; PyTorch FlopCounterMode's FLOPs / 2), for float
    and integer ops alike."""
    macs = definition(node.op).macs
    return macs(graph, node) if macs is not None else 0


def npu_supported(node: Node, graph: Graph | None = None) -> bool:
    """Whether the op (on integer tensors, within its emitter's shape rules) runs on the NPU."""
    return npu_refusal(node, graph) is None
