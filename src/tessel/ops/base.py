"""What one op definition holds (`OpDef`), in the spirit of MLIR's op definitions: everything a
stage needs to know about an IR op, declared once, next to the code it names.

* the IR spec (operands, attributes, shape and type rule): the verifier, parser, printer;
* its float semantics (`kernel`, numpy; `torch`, the same in torch) and, for integer ops, the
  golden model's (`golden`: the exact chain of NPU instructions);
* how the layout pass moves it to NHWC (`layout`);
* how the QDQ -> integer lowering rewrites `quantize(op(dequantize ...))` (`lower`), and the
  float function a LUT holds for a pointwise activation (`lut`);
* whether and how the NPU runs it (`npu`: the step emitter, the support rule that says why
  not, what the search signature keeps of it);
* what docs/figures.md counts as its MACs (`macs`).

Every per-op table of the compiler is derived from these definitions (`tessel.ops.registry`).
`register` also fills the IR's spec and kernel tables, so `tessel.ir` reads the same
definitions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.ir.kernels import KERNELS, Kernel
from tessel.ir.ops import SPECS, Op, OpSpec

if TYPE_CHECKING:
    import torch

    from tessel.ir.graph import Graph, Node
    from tessel.ir.rewriting import Rewriter

TorchKernel = Callable[[Mapping[str, Any], list["torch.Tensor"]], "torch.Tensor"]
# a QDQ -> integer rule, called on a `quantize` node: the name of the integer value that
# replaces it, or None when the float op(s) in front of it do not match
LowerRule = Callable[["Rewriter", "Node"], "str | None"]
# why the NPU cannot run the node (its emitter's shape rules), or None; `graph` gives operand
# types (None: decide from the node alone)
Refusal = Callable[["Node", "Graph | None"], "str | None"]
MacRule = Callable[["Graph", "Node"], int]
FloatFn = Callable[[np.ndarray], np.ndarray]


class Trait(enum.Enum):
    """Properties a stage asks an op about."""

    INTEGER = "integer"  # an integer op: a fixed chain of NPU instructions (docs/numerics.md)
    BOUNDARY = "boundary"  # quantize / dequantize at the model's edges (always on the host)
    POINTWISE = "pointwise"  # integer and element-wise: with constant other operands, a
    # function of each element of one tensor (a chain of them folds into one table)
    SAME_ON_INTEGERS = "same_on_integers"  # moves / selects elements (or takes their max): on
    # the integer values it gives the quantised float result, so it is lowered unchanged
    VIEW = "view"  # no data movement: the result aliases its input in DRAM
    DATA_MOVEMENT = "data_movement"  # an NPU step of DMA transfers only
    HOST_INTEGER = "host_integer"  # an integer op of an imported graph whose arithmetic no NPU
    # instruction computes: it has no NPU form and runs on the host by its golden kernel


class LayoutRule(enum.Enum):
    """How the NHWC layout pass (tessel.passes.to_nhwc) treats the op."""

    GENERIC = "generic"  # needs the logical dim order: operands transposed back to it
    WINDOW = "window"  # a 4-D NCHW window op: becomes layout=nhwc
    WINDOW_WEIGHTS = "window_weights"  # the same, and operand 1 is an OIHW weight -> OHWI
    FOLLOW = "follow"  # element-wise in one operand: runs in its operand's stored order
    FOLLOW_FIRST = "follow_first"  # element-wise in operand 0; the others are tables
    BROADCAST = "broadcast"  # n-ary element-wise (or concat): operands follow one order
    AXES = "axes"  # reduction / softmax / slice / pad: its axis attributes are remapped
    TRANSPOSE = "transpose"  # absorbed into the order its operand is stored under
    RESHAPE = "reshape"  # runs on the stored data where dim groups stay contiguous
    CONSTANT = "constant"  # transposed at compile time where a reader needs it


@dataclass(frozen=True)
class Npu:
    """How the NPU runs an integer op.

    `emitter`: the module with the op's `candidates(node, ctx)`, `constants(node, mapping,
    ctx)` and `step(node, mapping, ctx, placed)` (tessel.ops.step, tessel.ops.context);
    `refusal`: the emitter's shape rules as a reason (None: every integer node fits);
    `matrix`: its steps may use the matrix engine; `values_matter`: its constant operands'
    values change the program (tables), so the search signature keeps them; `quant_free`: the
    attributes the search signature drops (parameters that only become instruction fields no
    cost, candidate or event count reads, isa.costs.COST_FIELDS), and with them the operands'
    and result's quantisation parameters (None: the signature keeps everything); `int4`: the
    operand positions that may be int4 (weights the matrix instructions unpack); `int64`: those
    that may be int64 (the bias of an int16-input MAC, read by REQUANT's wide mode)."""

    emitter: ModuleType | None  # None: a view (Trait.VIEW), no step of its own
    refusal: Refusal | None = None
    matrix: bool = True
    values_matter: bool = False
    quant_free: frozenset[str] | None = None
    int4: frozenset[int] = frozenset()
    int64: frozenset[int] = frozenset()


@dataclass(frozen=True)
class OpDef:
    """One op, declared once (see the module docstring for what each field serves)."""

    op: Op
    spec: OpSpec
    kernel: Kernel | None = None
    torch: TorchKernel | None = None
    golden: Kernel | None = None
    layout: LayoutRule = LayoutRule.GENERIC
    lower: tuple[LowerRule, ...] = ()
    look_through: bool = False  # lowering: rules of the op in front of it may absorb it
    lut: Callable[[Node], FloatFn] | None = None
    npu: Npu | None = None
    macs: MacRule | None = None
    traits: frozenset[Trait] = field(default_factory=frozenset)

    def has(self, trait: Trait) -> bool:
        return trait in self.traits


def lazy_torch() -> ModuleType:
    """torch, imported on first use: the back half of the compiler, the simulator and the
    design-space exploration run without it (torch kernels only run float graphs)."""
    import torch

    return torch


def lazy_functional() -> ModuleType:
    """torch.nn.functional, imported on first use."""
    import torch.nn.functional

    return torch.nn.functional


DEFINITIONS: dict[Op, OpDef] = {}


def register(*defs: OpDef) -> None:
    """Declare ops (once each); the IR's spec and kernel tables are filled from them."""
    for d in defs:
        if d.op in DEFINITIONS:
            raise ValueError(f"op {d.op.value} is defined twice")
        DEFINITIONS[d.op] = d
        SPECS[d.op] = d.spec
        if d.kernel is not None:
            KERNELS[d.op] = d.kernel
