"""Which emitter lowers which integer op to NPU instructions.

An emitter module provides three pure functions (none mutates the context or its pool):

* `candidates(node, ctx) -> list[Mapping]`: mappings that fit the NPU's memories (a mapping is
  a frozen dataclass whose str() reads well in reports);
* `constants(node, mapping, ctx) -> StepConstants`: the blobs the step reads from the constant
  pool (pre-tiled weights, parameter and LUT tables, constant operands) in read order;
* `step(node, mapping, ctx, placed=None) -> StepWork` (see tessel.codegen.step): the step's
  program, reading blob k at `placed.addresses[k]`; `placed=None` is estimation (every
  constant address 0, nothing packed: the search calls it per candidate).

The schedule stage (schedule/plan.py) places each chosen step's constants with
`ConstPool.place` in program order and passes the addresses to `step`
(tessel.codegen.context: StepConstants, PlacedConstants).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tessel.errors import TesselCompileError
from tessel.ir import Graph, Node, Op

EMITTERS: dict[Op, str] = {
    Op.QCONV2D: "ops_conv",
    Op.QLINEAR: "ops_matmul",
    Op.QMATMUL: "ops_matmul",
    Op.QADD: "ops_eltwise",
    Op.QSUB: "ops_eltwise",
    Op.QMUL: "ops_eltwise",
    Op.REQUANTIZE: "ops_eltwise",
    Op.LUT: "ops_eltwise",
    Op.MAX_POOL2D: "ops_pool",
    Op.QAVG_POOL2D: "ops_pool",
    Op.QMEAN: "ops_pool",
    Op.TRANSPOSE: "ops_movement",
    Op.CONCAT: "ops_movement",
    Op.SLICE: "ops_movement",
    Op.PAD: "ops_movement",
    Op.EXPAND: "ops_movement",
    Op.UPSAMPLE_NEAREST: "ops_movement",
    Op.QSOFTMAX: "ops_norm",
    Op.QLAYER_NORM: "ops_norm",
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
    return importlib.import_module(f"tessel.codegen.{name}")


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
