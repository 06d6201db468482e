"""One definition per op (tessel.ops.base.OpDef): what every stage needs to know about an IR
op, declared once, by family (boundary, unary, binary, conv, matmul, pool, movement, norm,
softmax_tosa: an imported TOSA graph's host-run softmax);
the NPU step emitters of the integer ops (`*_emit`, with their contract: context, dma, step);
and the integer maths the golden model and the lowering share (intops, lut, softmax,
layer_norm, quantise). Importing the package registers every definition.
"""

from tessel.ir.ops import Op
from tessel.ops import (  # noqa: F401
    binary,
    boundary,
    conv,
    matmul,
    movement,
    norm,
    pool,
    softmax_tosa,  # noqa: F401
    unary,
)
from tessel.ops.base import DEFINITIONS, OpDef, Trait
from tessel.ops.registry import definition

_missing = set(Op) - set(DEFINITIONS)
assert not _missing, f"ops without a definition: {sorted(o.value for o in _missing)}"

__all__ = ["DEFINITIONS", "OpDef", "Trait", "definition"]
