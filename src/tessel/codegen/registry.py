"""Which emitter lowers which integer op to NPU instructions.

An emitter module provides `candidates(node, ctx) -> list[Mapping]` (mappings that fit the
NPU's memories) and `step(node, mapping, ctx, *, emit) -> StepWork`.
"""

from __future__ import annotations

from types import ModuleType

from tessel.codegen import ops_conv
from tessel.errors import TesselCompileError
from tessel.ir import Node, Op

EMITTERS: dict[Op, ModuleType] = {
    Op.QCONV2D: ops_conv,
}
VIEW_OPS = frozenset({Op.RESHAPE})  # no data movement: the result aliases its input in DRAM


def is_view(node: Node) -> bool:
    return node.op in VIEW_OPS


def emitter_for(node: Node) -> ModuleType:
    em = EMITTERS.get(node.op)
    if em is None:
        raise TesselCompileError(f"{node} at {node.loc}: no NPU lowering for '{node.op.value}'")
    return em


def npu_supported(node: Node) -> bool:
    return node.op in EMITTERS or node.op in VIEW_OPS
