"""TFLite operator converters: one function per builtin operator, each writing the float op
between the given tensors' quantize / dequantize (see `tflite_import`).

`fn(tc, op)` reads `op.inputs` / `op.outputs` (TfTensor) and `op.options` (the generated
options class) and binds each output with `tc.output(tensor, value, fused_activation)`. A case
the IR cannot express raises `Unsupported(reason)`; the importer reports the operator.
"""

from __future__ import annotations

import numpy as np
import tflite

from tessel.frontend.context import Unsupported
from tessel.frontend.tflite_import import (
    TfliteContext,
    TfOp,
    TfTensor,
    fused_activation,
    quantize_dequantize,
    same_padding,
    tflite_converts,
)
from tessel.ir import DType, Layout, Op
from tessel.ops import litert

B = tflite.BuiltinOperator


def _padding(op: TfOp, hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
             dilation: tuple[int, int] = (1, 1)) -> tuple[int, int, int, int]:
    """IR padding [top, left, bottom, right] of a SAME / VALID TFLite window op."""
    if op.options.Padding() == tflite.Padding.VALID:
        return 0, 0, 0, 0
    top, bottom = same_padding(hw[0], kernel[0], stride[0], dilation[0])
    left, right = same_padding(hw[1], kernel[1], stride[1], dilation[1])
    return top, left, bottom, right


def _nhwc(t: TfTensor) -> tuple[int, int]:
    if len(t.shape) != 4:
        raise Unsupported(f"input '{t.name}' has rank {len(t.shape)} (NHWC expected)")
    return t.shape[1], t.shape[2]


def _weights(tc: TfliteContext, w: TfTensor, data: np.ndarray, axis: int) -> str:
    if w.data is None:
        raise Unsupported(f"weights '{w.name}' are not constant")
    if w.dtype is not DType.I8:
        raise Unsupported(f"weights '{w.name}' are {w.dtype.value} (int8 expected)")
    return tc.constant(w, data, axis)


def _bias(tc: TfliteContext, op: TfOp) -> list[str]:
    b = op.inputs[2] if len(op.inputs) > 2 else None
    if b is None:
        return []
    if b.data is None:
        raise Unsupported(f"bias '{b.name}' is not constant")
    return [tc.constant(b, b.data, 0)]


def _conv(tc: TfliteContext, op: TfOp, data: np.ndarray | None, groups: int) -> None:
    """conv2d {nhwc} of `op`'s input with weights `data` ([O, H, W, I/groups]) and its bias."""
    x, w = op.inputs[0], op.inputs[1]
    o = op.options
    stride, dil = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
    pads = _padding(op, _nhwc(x), w.shape[1:3], stride, dil)
    weight = _weights(tc, w, data, 0)
    y = tc.add(Op.CONV2D, [tc.value(x), weight, *_bias(tc, op)], {
        "stride": stride, "padding": pads, "dilation": dil, "groups": groups,
        "layout": Layout.NHWC})
    tc.output(op.outputs[0], y, o.FusedActivationFunction())


# CONV_2D(x, W[O,H,W,I], b) {padding, stride, dilation, fused act}  =>  conv2d {nhwc}
@tflite_converts(B.CONV_2D)
def conv_2d(tc: TfliteContext, op: TfOp) -> None:
    x, w = op.inputs[0], op.inputs[1]
    _conv(tc, op, w.data, x.shape[3] // w.shape[3])


# DEPTHWISE_CONV_2D(x, W[1,H,W,C*M], b) {depth_multiplier, ...}  =>  conv2d {groups = C, nhwc}
@tflite_converts(B.DEPTHWISE_CONV_2D)
def depthwise_conv_2d(tc: TfliteContext, op: TfOp) -> None:
    x, w = op.inputs[0], op.inputs[1]
    if w.data is None:
        raise Unsupported(f"weights '{w.name}' are not constant")
    data = np.ascontiguousarray(np.transpose(w.data, (3, 1, 2, 0)))  # -> [C*M, H, W, 1]
    _conv(tc, op, data, x.shape[3])


# FULLY_CONNECTED(x, W[O,I], b) {fused act}  =>  [reshape to [-1, I]] linear
@tflite_converts(B.FULLY_CONNECTED)
def fully_connected(tc: TfliteContext, op: TfOp) -> None:
    x, w = op.inputs[0], op.inputs[1]
    o = op.options
    if o is not None and o.WeightsFormat() != 0:
        raise Unsupported("shuffled weights format")
    v = tc.value(x)
    if len(x.shape) != 2 or x.shape[1] != w.shape[1]:  # reshape between its own Q / DQ
        v = tc.ctx.reshape(v, (int(np.prod(x.shape)) // w.shape[1], w.shape[1]))
        v = quantize_dequantize(tc, v, x)
    y = tc.add(Op.LINEAR, [v, _weights(tc, w, w.data, 0), *_bias(tc, op)])
    out = op.outputs[0]
    act = o.FusedActivationFunction() if o is not None else 0
    if tc.ctx.shape(y) != out.shape:  # keep_num_dims: linear -> Q / DQ -> reshape
        y = quantize_dequantize(tc, fused_activation(tc, y, act), out)
        y, act = tc.ctx.reshape(y, out.shape), 0
    tc.output(out, y, act)


_BINARY = {B.ADD: Op.ADD, B.SUB: Op.SUB, B.MUL: Op.MUL}


# ADD / SUB / MUL(a, b) {fused act}  =>  add / sub / mul (numpy broadcasting)
@tflite_converts(*_BINARY)
def binary(tc: TfliteContext, op: TfOp) -> None:
    a, b = op.inputs[0], op.inputs[1]
    y = tc.add(_BINARY[op.code], [tc.value(a), tc.value(b)])
    act = op.options.FusedActivationFunction() if op.options is not None else 0
    tc.output(op.outputs[0], y, act)


# AVERAGE_POOL_2D / MAX_POOL_2D {padding, stride, filter, fused act}  =>  avg / max_pool2d {nhwc}
@tflite_converts(B.AVERAGE_POOL_2D, B.MAX_POOL_2D)
def pool_2d(tc: TfliteContext, op: TfOp) -> None:
    x = op.inputs[0]
    o = op.options
    kernel, stride = (o.FilterHeight(), o.FilterWidth()), (o.StrideH(), o.StrideW())
    attrs = {"kernel": kernel, "stride": stride, "padding": _padding(op, _nhwc(x), kernel, stride),
             "layout": Layout.NHWC}
    if op.code == B.AVERAGE_POOL_2D:  # TFLite divides by the number of valid pixels
        y = tc.add(Op.AVG_POOL2D, [tc.value(x)], {**attrs, "count_include_pad": False})
    else:
        y = tc.add(Op.MAX_POOL2D, [tc.value(x)], attrs)
    tc.output(op.outputs[0], y, o.FusedActivationFunction())


# MEAN(x, axes) {keep_dims}  =>  mean {litert: LiteRT's multiplier, tessel.ops.litert}
@tflite_converts(B.MEAN)
def mean(tc: TfliteContext, op: TfOp) -> None:
    x, axes_t = op.inputs[0], op.inputs[1]
    if axes_t.data is None:
        raise Unsupported("axes are not constant")
    rank = len(x.shape)
    axes = tuple(sorted({int(a) % rank for a in axes_t.data.reshape(-1)}))
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    y = tc.add(Op.MEAN, [tc.value(x)], {"axes": axes, "keepdim": keep, "litert": True})
    tc.output(op.outputs[0], y)


# RESHAPE / SQUEEZE(x[, shape])  =>  reshape to the output tensor's shape
@tflite_converts(B.RESHAPE, B.SQUEEZE)
def reshape(tc: TfliteContext, op: TfOp) -> None:
    tc.output(op.outputs[0], tc.ctx.reshape(tc.value(op.inputs[0]), op.outputs[0].shape))


# SOFTMAX(x) {beta = 1}  =>  softmax over the last axis
@tflite_converts(B.SOFTMAX)
def softmax(tc: TfliteContext, op: TfOp) -> None:
    beta = op.options.Beta() if op.options is not None else 1.0
    if beta != 1.0:
        raise Unsupported(f"beta = {beta} (1.0 imports)")
    tc.output(op.outputs[0], tc.add(Op.SOFTMAX, [tc.value(op.inputs[0])], {"axis": -1}))


# CONCATENATION(xs...) {axis, fused act}  =>  concat
@tflite_converts(B.CONCATENATION)
def concatenation(tc: TfliteContext, op: TfOp) -> None:
    rank = len(op.outputs[0].shape)
    axis = op.options.Axis() % rank
    y = tc.add(Op.CONCAT, [tc.value(t) for t in op.inputs if t is not None], {"axis": axis})
    tc.output(op.outputs[0], y, op.options.FusedActivationFunction())


# PAD(x, paddings[rank, 2])  =>  pad {value = 0.0, the zero point in the integer domain}
@tflite_converts(B.PAD)
def pad(tc: TfliteContext, op: TfOp) -> None:
    x, p = op.inputs[0], op.inputs[1]
    if p.data is None:
        raise Unsupported("paddings are not constant")
    pads = [int(v) for v in p.data.reshape(-1)]
    tc.output(op.outputs[0], tc.add(Op.PAD, [tc.value(x)], {"pads": pads, "value": 0.0}))


_UNARY = {B.LOGISTIC: Op.SIGMOID, B.TANH: Op.TANH, B.HARD_SWISH: Op.HARDSWISH, B.RELU: Op.RELU}


# LOGISTIC / TANH / HARD_SWISH / RELU  =>  sigmoid / tanh / hardswish / relu
# (HARD_SWISH int8 -> int8 carries LiteRT's int8 table: its fixed-point steps, tessel.ops.litert)
@tflite_converts(*_UNARY)
def unary(tc: TfliteContext, op: TfOp) -> None:
    x, out = op.inputs[0], op.outputs[0]
    attrs = {}
    if op.code == B.HARD_SWISH and x.dtype is DType.I8 and out.dtype is DType.I8 \
            and not (x.per_channel or out.per_channel):
        attrs["table"] = litert.hardswish_table_i8(x.scales[0], x.zero_points[0],
                                                   out.scales[0], out.zero_points[0])
    tc.output(out, tc.add(_UNARY[op.code], [tc.value(x)], attrs))


# RELU6 / RELU_N1_TO_1  =>  clamp
@tflite_converts(B.RELU6, B.RELU_N1_TO_1)
def relu_n(tc: TfliteContext, op: TfOp) -> None:
    lo, hi = (0.0, 6.0) if op.code == B.RELU6 else (-1.0, 1.0)
    tc.output(op.outputs[0], tc.add(Op.CLAMP, [tc.value(op.inputs[0])], {"min": lo, "max": hi}))


# QUANTIZE(float x) => quantize; QUANTIZE(int8 x) => requantize (dequantize -> quantize)
@tflite_converts(B.QUANTIZE)
def quantize(tc: TfliteContext, op: TfOp) -> None:
    tc.output(op.outputs[0], tc.value(op.inputs[0]))


# DEQUANTIZE(int8 x)  =>  the real value (the dequantize of x's quantize)
@tflite_converts(B.DEQUANTIZE)
def dequantize(tc: TfliteContext, op: TfOp) -> None:
    if op.outputs[0].dtype is not DType.F32:
        raise Unsupported(f"DEQUANTIZE to {op.outputs[0].dtype.value}")
    tc.values[op.outputs[0].index] = tc.value(op.inputs[0])
