"""Which emitter lowers which integer op to NPU instructions.

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

import importlib
from types import ModuleType

from tessel.errors import TesselCompileError
from tessel.ir import Graph, Node, Op

EMITTERS: dict[Op, str] = {
    Op.QCONV2D: "conv_emit",
    Op.QLINEAR: "matmul_emit",
    Op.QMATMUL: "matmul_emit",
    Op.QADD: "eltwise_emit",
    Op.QSUB: "eltwise_emit",
    Op.QMUL: "eltwise_emit",
    Op.REQUANTIZE: "eltwise_emit",
    Op.LUT: "eltwise_emit",
    Op.MAX_POOL2D: "pool_emit",
    Op.QAVG_POOL2D: "pool_emit",
    Op.QMEAN: "pool_emit",
    Op.TRANSPOSE: "movement_emit",
    Op.CONCAT: "movement_emit",
    Op.SLICE: "movement_emit",
    Op.PAD: "movement_emit",
    Op.EXPAND: "movement_emit",
    Op.UPSAMPLE_NEAREST: "movement_emit",
    Op.QSOFTMAX: "norm_emit",
    Op.QLAYER_NORM: "norm_emit",
}
DATA_MOVEMENT_OPS = frozenset({Op.TRANSPOSE, Op.CONCAT, Op.SLICE, Op.PAD, Op.EXPAND,
                               Op.UPSAMPLE_NEAREST})
VIEW_OPS = frozenset({Op.RESHAPE})  # no data movement: the result aliases its input in DRAM


def is_view(node: Node) -> bool:
    return node.op in VIEW_OPS


def emitter_for(node: Node) -> ModuleType:
    name = EMITTERS.get(node.op)
    if name is None:
        raise TesselCompileError(f"{node} at {node.loc}: no NPU lowering for '{node.op.value}'")
    return importlib.import_module(f"tessel.ops.{name}")


# emitter function that states the emitter's shape rules: (node, graph | None) -> reason | None
REFUSALS: dict[Op, str] = {Op.QCONV2D: "refusal", Op.MAX_POOL2D: "pool_refusal",
                           Op.QAVG_POOL2D: "pool_refusal"}


def npu_refusal(node: Node, graph: Graph | None = None) -> str | None:
    """Why the NPU cannot run this node, or None: no emitter, not integer, or outside the
    emitter's shape rules (the same rules the emitter enforces; those that need operand
    shapes are checked when `graph` is given). Decided before partitioning, so what does not
    fit falls back to the host with this reason."""
    if not (node.op in VIEW_OPS or node.op in EMITTERS):
        return f"no NPU lowering for '{node.op.value}'"
    if not node.type.dtype.is_int:
        return f"{node.type.dtype.value} result (the NPU computes on integers)"
    rule = REFUSALS.get(node.op)
    if rule is None:
        return None
    return getattr(emitter_for(node), rule)(node, graph)


def npu_supported(node: Node, graph: Graph | None = None) -> bool:
    """Whether the op (on integer tensors, within its emitter's shape rules) runs on the NPU."""
    return npu_refusal(node, graph) is None
