"""Which ATen op (as torch.export emits it) is which :class:`OpKind` for the quantiser.

One table: anything not in it stays float. The graph is the one of
``torch.export.export(model, inputs, strict=False).module()`` (pre-dispatch ATen).
"""

from __future__ import annotations

import torch
from torch.fx import Node

from tessel.quant.config import OpKind

aten = torch.ops.aten

_TABLE: dict[object, OpKind] = {
    aten.conv1d.default: OpKind.CONV,
    aten.conv2d.default: OpKind.CONV,
    aten.conv1d.padding: OpKind.CONV,
    aten.conv2d.padding: OpKind.CONV,
    aten.conv_transpose2d.input: OpKind.CONV_TRANSPOSE,
    aten.linear.default: OpKind.LINEAR,
    aten.matmul.default: OpKind.MATMUL,
    aten.bmm.default: OpKind.MATMUL,
    aten.mm.default: OpKind.MATMUL,
    aten.add.Tensor: OpKind.ADD,
    aten.add_.Tensor: OpKind.ADD,
    aten.sub.Tensor: OpKind.SUB,
    aten.rsub.Scalar: OpKind.SUB,  # c - x: the frontend's sub(c, x)
    aten.rsub.Tensor: OpKind.SUB,
    aten.mul.Tensor: OpKind.MUL,
    aten.mul_.Tensor: OpKind.MUL,
    aten.div.Tensor: OpKind.DIV,
    aten.cat.default: OpKind.CAT,
    aten.concat.default: OpKind.CAT,
    aten.sigmoid.default: OpKind.SIGMOID,
    aten.tanh.default: OpKind.TANH,
    aten.hardswish.default: OpKind.HARDSWISH,
    aten.hardswish_.default: OpKind.HARDSWISH,
    aten.hardsigmoid.default: OpKind.HARDSIGMOID,
    aten.gelu.default: OpKind.GELU,
    aten.silu.default: OpKind.SILU,
    aten.silu_.default: OpKind.SILU,
    aten.exp.default: OpKind.EXP,
    aten.neg.default: OpKind.NEG,
    aten.rsqrt.default: OpKind.RSQRT,
    aten.softmax.int: OpKind.SOFTMAX,
    aten._softmax.default: OpKind.SOFTMAX,
    aten.layer_norm.default: OpKind.LAYER_NORM,
    aten.relu.default: OpKind.RELU,
    aten.relu_.default: OpKind.RELU,
    aten.relu6.default: OpKind.CLAMP,
    aten.hardtanh.default: OpKind.CLAMP,
    aten.hardtanh_.default: OpKind.CLAMP,
    aten.clamp.default: OpKind.CLAMP,
    aten.clamp_.default: OpKind.CLAMP,
    aten.max_pool1d.default: OpKind.MAX_POOL,
    aten.max_pool2d.default: OpKind.MAX_POOL,
    aten.adaptive_max_pool2d.default: OpKind.MAX_POOL,
    aten.avg_pool1d.default: OpKind.AVG_POOL,
    aten.avg_pool2d.default: OpKind.AVG_POOL,
    aten.adaptive_avg_pool1d.default: OpKind.AVG_POOL,
    aten.adaptive_avg_pool2d.default: OpKind.AVG_POOL,
    aten.mean.dim: OpKind.MEAN,
    aten.upsample_bilinear2d.vec: OpKind.RESAMPLE,
    aten.upsample_bilinear2d.default: OpKind.RESAMPLE,
    aten.batch_norm.default: OpKind.BATCH_NORM,
    aten.unbind.int: OpKind.SPLIT,
    aten.split.Tensor: OpKind.SPLIT,
    aten.split_with_sizes.default: OpKind.SPLIT,
    aten.chunk.default: OpKind.SPLIT,
}
_DATA_MOVEMENT = (
    "view.default", "reshape.default", "_unsafe_view.default", "flatten.using_ints",
    "permute.default", "transpose.int", "t.default", "squeeze.dim", "squeeze.dims",
    "squeeze.default", "unsqueeze.default", "contiguous.default", "clone.default",
    "slice.Tensor", "select.int", "constant_pad_nd.default", "pad.default", "expand.default",
    "pixel_shuffle.default", "pixel_unshuffle.default", "upsample_nearest2d.vec",
    "upsample_nearest2d.default", "narrow.default",
)
for _name in _DATA_MOVEMENT:
    _packet, _overload = _name.split(".")
    _op = getattr(getattr(aten, _packet, None), _overload, None)
    if _op is not None:
        _TABLE[_op] = OpKind.DATA_MOVEMENT

# ops that pass a quantised value through a clamp (fusable into the producer's requantisation)
CLAMP_KINDS = frozenset({OpKind.RELU, OpKind.CLAMP})
# ops whose output values are input values (lossless), or interpolate between neighbouring
# input values (resampling: the same range and resolution), so they keep the input's scale and
# zero point; averaging ops are not among them: a mean over many values can have a far smaller
# range than its input (below one input LSB), so they get their own observed output range
SAME_SCALE_KINDS = frozenset(
    {OpKind.DATA_MOVEMENT, OpKind.RESAMPLE, OpKind.MAX_POOL, OpKind.RELU, OpKind.CLAMP}
)
AVERAGING_KINDS = frozenset({OpKind.AVG_POOL, OpKind.MEAN})
LUT_KINDS = frozenset(
    {OpKind.SIGMOID, OpKind.TANH, OpKind.HARDSWISH, OpKind.HARDSIGMOID, OpKind.GELU, OpKind.SILU,
     OpKind.EXP, OpKind.NEG, OpKind.RSQRT}
)
MAC_KINDS = frozenset({OpKind.CONV, OpKind.CONV_TRANSPOSE, OpKind.LINEAR, OpKind.MATMUL})
# the MAC ops whose activation input may be int16 (an int16 x int8 / int4 MAC, int64 bias)
INT16_INPUT_MACS = frozenset({OpKind.CONV, OpKind.LINEAR})
BINARY_KINDS = frozenset({OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.DIV})


def op_kind(node: Node) -> OpKind | None:
    """The kind of a ``call_function`` node, or None if the quantiser does not know it."""
    if node.op != "call_function":
        return None
    return _TABLE.get(node.target)


def is_float_tensor(arg: object) -> bool:
    """True if ``arg`` is an FX node whose value (``meta['val']``) is a floating-point tensor."""
    if not isinstance(arg, Node):
        return False
    val = arg.meta.get("val")
    return isinstance(val, torch.Tensor) and val.is_floating_point()


def module_paths(node: Node) -> tuple[str, ...]:
    """Fully qualified names of the modules the node was traced in, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = []
    for path, _type in stack.values():
        paths.append(path[len("L['self'].") :] if path.startswith("L['self'].") else path)
    return tuple(paths)
