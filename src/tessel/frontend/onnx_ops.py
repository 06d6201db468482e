"""ONNX converters of compute ops: convolution, Gemm / MatMul, pooling, normalisation,
activations and element-wise arithmetic (shape ops and Q/DQ are in `onnx_ops_shape.py`).

A converter is `fn(octx, node) -> [result per output]`, a result being an IR value name, a
numpy array (a value folded at import time) or None (an output not produced). It raises
`Unsupported(reason)` for a case the IR cannot express; the importer reports the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

from tessel.frontend import onnx_ops_shape  # noqa: F401  (registers shape and Q/DQ converters)
from tessel.frontend.context import Unsupported
from tessel.frontend.contract import check_elements
from tessel.frontend.onnx_import import OnnxContext, attributes, onnx_converts
from tessel.ir import Op

Node = onnx.NodeProto
Results = list[str | np.ndarray | None]


def _spatial_pads(a: dict, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int]) -> tuple[int, int, int, int]:
    """IR padding [top, left, bottom, right] from ONNX `pads` / `auto_pad`."""
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        p = [int(v) for v in a.get("pads", [0, 0, 0, 0])]
        return p[0], p[1], p[2], p[3]  # ONNX: [h_begin, w_begin, h_end, w_end]
    if auto == "VALID":
        return 0, 0, 0, 0
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return begin[0], begin[1], end[0], end[1]


def _window(a: dict, x_shape: Sequence[int], kernel: Sequence[int]) -> dict:
    if len(x_shape) != 4 or len(kernel) != 2:
        raise Unsupported(f"only 2-D windows on NCHW tensors (input shape {list(x_shape)})")
    strides = [int(s) for s in a.get("strides", [1, 1])]
    dil = [int(d) for d in a.get("dilations", [1, 1])]
    pads = _spatial_pads(a, x_shape[2:], kernel, strides, dil)
    return {"stride": strides, "padding": pads, "dilation": dil}


# Conv(x, W[, B]) {strides, pads | auto_pad, dilations, group}  =>  conv2d (1-D: over [N, C, 1, L])
@onnx_converts("Conv")
def conv(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    x_shape, w_shape = o.shape(n.input[0]), o.shape(n.input[1])
    if len(w_shape) == 3:  # Conv1d: a conv2d over a height of 1
        for key in ("strides", "dilations"):
            if key in a:
                a[key] = [1, *a[key]]
        if "pads" in a:
            a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
        w_name = n.input[1]
        w4 = (*w_shape[:2], 1, w_shape[2])
        w = (o.ctx.const(o.arrays[w_name].reshape(w4), hint=w_name)
             if w_name in o.arrays and w_name not in o.values else o.ctx.reshape(o.v(w_name), w4))
        x = o.ctx.reshape(o.v(n.input[0]), (*x_shape[:2], 1, x_shape[2]))
        y = _conv2d(o, n, a, x, w, (*x_shape[:2], 1, x_shape[2]), (1, w_shape[2]))
        return [o.ctx.reshape(y, [d for i, d in enumerate(o.ctx.shape(y)) if i != 2])]
    return [_conv2d(o, n, a, o.v(n.input[0]), o.v(n.input[1]), x_shape, w_shape[2:])]


def _conv2d(o: OnnxContext, n: Node, a: dict, x: str, w: str, x_shape: Sequence[int],
            kernel: Sequence[int]) -> str:
    attrs = _window(a, x_shape, kernel)
    attrs["groups"] = int(a.get("group", 1))
    inputs = [x, w] + ([o.v(n.input[2])] if o.has(n, 2) else [])
    return o.add(Op.CONV2D, inputs, attrs)


def _weight(o: OnnxContext, name: str, transpose: bool, scale: float) -> str:
    """A 2-D weight as [out, in] for `linear` (a constant array is transposed / scaled here)."""
    if name in o.arrays and name not in o.values:
        w = np.asarray(o.arrays[name], np.float32)
        w = w.T if transpose else w
        return o.ctx.const(np.ascontiguousarray(w * np.float32(scale) if scale != 1 else w),
                           hint=name)
    w = o.ctx.transpose(o.v(name), (1, 0)) if transpose else o.v(name)
    return o.ctx.scaled(w, scale, o.type(name).dtype)


# Gemm(A, B, C) {alpha, beta, transA = 0, transB}  =>  linear(A, B^T, C) (scaled by alpha / beta)
@onnx_converts("Gemm")
def gemm(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    if int(a.get("transA", 0)):
        raise Unsupported("transA = 1")
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    w = _weight(o, n.input[1], transpose=not int(a.get("transB", 0)), scale=alpha)
    if not o.has(n, 2):
        return [o.add(Op.LINEAR, [o.v(n.input[0]), w])]
    out = o.ctx.shape(w)[0]
    c_shape = o.shape(n.input[2])
    if c_shape in ((out,), (1, out)):
        if n.input[2] in o.arrays and n.input[2] not in o.values:
            bias = np.asarray(o.arrays[n.input[2]], np.float32).reshape(out) * np.float32(beta)
            return [o.add(Op.LINEAR, [o.v(n.input[0]), w, o.ctx.const(bias, hint=n.input[2])])]
        if beta == 1.0:
            return [o.add(Op.LINEAR, [o.v(n.input[0]), w, o.ctx.reshape(o.v(n.input[2]), (out,))])]
    y = o.add(Op.LINEAR, [o.v(n.input[0]), w])
    c = o.v(n.input[2])
    return [o.add(Op.ADD, [y, o.ctx.scaled(c, beta, o.type(n.input[2]).dtype)])]


# MatMul(A, B)  =>  linear(A, B^T) for a constant 2-D B, else matmul(A, B)
@onnx_converts("MatMul")
def matmul(o: OnnxContext, n: Node) -> Results:
    b = n.input[1]
    if b in o.arrays and b not in o.values and o.arrays[b].ndim == 2 and len(o.shape(n.input[0])) >= 2:
        return [o.add(Op.LINEAR, [o.v(n.input[0]), _weight(o, b, transpose=True, scale=1.0)])]
    return [o.add(Op.MATMUL, [o.v(n.input[0]), o.v(b)])]


_BINARY = {"Add": (Op.ADD, np.add), "Sub": (Op.SUB, np.subtract), "Mul": (Op.MUL, np.multiply),
           "Div": (Op.DIV, None), "Pow": (Op.POW, np.power), "Max": (Op.MAXIMUM, np.maximum),
           "Min": (Op.MINIMUM, np.minimum)}


def _fold_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.issubdtype(x.dtype, np.integer):
        return np.trunc(x / y).astype(x.dtype)  # ONNX integer Div truncates
    return (x / y).astype(x.dtype)


# Add / Sub / Mul / Div / Pow / Max / Min (two operands; numpy broadcasting)  =>  the binary op
@onnx_converts(*_BINARY)
def binary(o: OnnxContext, n: Node) -> Results:
    op, fold = _BINARY[n.op_type]
    if len(n.input) != 2:
        raise Unsupported(f"{len(n.input)} operands (Tessel imports 2)")
    lhs, rhs = n.input
    if all(i in o.arrays and i not in o.values for i in n.input):
        check_elements(np.broadcast_shapes(o.arrays[lhs].shape, o.arrays[rhs].shape),
                       f"{n.op_type} '{n.name}' output")
        fn = fold or _fold_div
        return [np.asarray(fn(o.arrays[lhs], o.arrays[rhs]))]
    return [o.add(op, [o.v(lhs), o.v(rhs)])]


_UNARY = {"Relu": Op.RELU, "Sigmoid": Op.SIGMOID, "Tanh": Op.TANH, "HardSwish": Op.HARDSWISH,
          "Exp": Op.EXP, "Log": Op.LOG, "Neg": Op.NEG, "Abs": Op.ABS, "Sqrt": Op.SQRT,
          "Reciprocal": Op.RECIPROCAL}


# Relu / Sigmoid / Tanh / HardSwish / Exp / Log / Neg / Abs / Sqrt / Reciprocal  =>  same IR op
@onnx_converts(*_UNARY)
def unary(o: OnnxContext, n: Node) -> Results:
    return [o.add(_UNARY[n.op_type], [o.v(n.input[0])])]


# HardSigmoid {alpha = 1/6, beta = 1/2}  =>  hardsigmoid
@onnx_converts("HardSigmoid")
def hardsigmoid(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
    if not (math.isclose(alpha, 1 / 6, rel_tol=1e-6) and math.isclose(beta, 0.5)):
        raise Unsupported(f"alpha = {alpha}, beta = {beta} (the IR's hardsigmoid is "
                          "alpha = 1/6, beta = 1/2)")
    return [o.add(Op.HARDSIGMOID, [o.v(n.input[0])])]


# Gelu {approximate}  =>  gelu
@onnx_converts("Gelu")
def gelu(o: OnnxContext, n: Node) -> Results:
    return [o.add(Op.GELU, [o.v(n.input[0])], {"approximate": attributes(n).get("approximate",
                                                                                "none")})]


# Clip(x, min?, max?) with constant bounds  =>  clamp {min, max}
@onnx_converts("Clip")
def clip(o: OnnxContext, n: Node) -> Results:
    lo = float(o.array(n.input[1], "Clip min")) if o.has(n, 1) else -math.inf
    hi = float(o.array(n.input[2], "Clip max")) if o.has(n, 2) else math.inf
    if lo == 0.0 and hi == math.inf:
        return [o.add(Op.RELU, [o.v(n.input[0])])]
    return [o.add(Op.CLAMP, [o.v(n.input[0])], {"min": lo, "max": hi})]


# Softmax / LogSoftmax {axis = -1}  =>  softmax [-> log]
@onnx_converts("Softmax", "LogSoftmax")
def softmax(o: OnnxContext, n: Node) -> Results:
    axis = int(attributes(n).get("axis", -1))
    y = o.add(Op.SOFTMAX, [o.v(n.input[0])], {"axis": axis})
    return [o.add(Op.LOG, [y]) if n.op_type == "LogSoftmax" else y]


# BatchNormalization(x, scale, B, mean, var) {epsilon} (inference)  =>  batch_norm
@onnx_converts("BatchNormalization")
def batch_norm(o: OnnxContext, n: Node) -> Results:
    if int(attributes(n).get("training_mode", 0)):
        raise Unsupported("training_mode = 1")
    x, scale, bias, mean, var = (o.v(i) for i in n.input[:5])
    eps = float(attributes(n).get("epsilon", 1e-5))
    return [o.add(Op.BATCH_NORM, [x, mean, var, scale, bias], {"eps": eps})]


# LayerNormalization(x, scale, B) {axis, epsilon}  =>  layer_norm {normalized_shape = shape[axis:]}
@onnx_converts("LayerNormalization")
def layer_norm(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    shape = o.shape(n.input[0])
    axis = int(a.get("axis", -1)) % len(shape)
    inputs = [o.v(i) for i in n.input[:3] if i]
    y = o.add(Op.LAYER_NORM, inputs, {"normalized_shape": shape[axis:],
                                      "eps": float(a.get("epsilon", 1e-5))})
    return [y, None, None]


# MaxPool / AveragePool {kernel_shape, strides, pads, ceil_mode, ...}  =>  max_pool2d / avg_pool2d
@onnx_converts("MaxPool", "AveragePool")
def pool(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    if len(n.output) > 1 and n.output[1]:
        raise Unsupported("the indices output")
    kernel = [int(k) for k in a["kernel_shape"]]
    attrs = _window(a, o.shape(n.input[0]), kernel)
    attrs.update(kernel=kernel, ceil_mode=bool(a.get("ceil_mode", 0)))
    if n.op_type == "MaxPool":
        return [o.add(Op.MAX_POOL2D, [o.v(n.input[0])], attrs)]
    if attrs.pop("dilation") != [1, 1]:
        raise Unsupported("dilated average pooling")
    attrs["count_include_pad"] = bool(a.get("count_include_pad", 0))
    return [o.add(Op.AVG_POOL2D, [o.v(n.input[0])], attrs)]


# GlobalAveragePool / GlobalMaxPool  =>  mean / reduce_max over H, W (keepdim)
@onnx_converts("GlobalAveragePool", "GlobalMaxPool")
def global_pool(o: OnnxContext, n: Node) -> Results:
    rank = len(o.shape(n.input[0]))
    op = Op.MEAN if n.op_type == "GlobalAveragePool" else Op.REDUCE_MAX
    return [o.add(op, [o.v(n.input[0])], {"axes": tuple(range(2, rank)), "keepdim": True})]


_REDUCE = {"ReduceMean": Op.MEAN, "ReduceSum": Op.SUM, "ReduceMax": Op.REDUCE_MAX}


# ReduceMean / ReduceSum / ReduceMax(x[, axes]) {axes, keepdims}  =>  mean / sum / reduce_max
@onnx_converts(*_REDUCE)
def reduce(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    rank = len(o.shape(n.input[0]))
    axes = a.get("axes")
    if o.has(n, 1):
        axes = o.array(n.input[1], "axes").tolist()
    if not axes:
        if int(a.get("noop_with_empty_axes", 0)):
            return [o.v(n.input[0])]
        axes = list(range(rank))
    axes = tuple(sorted(int(x) % rank for x in axes))
    keep = bool(a.get("keepdims", 1))
    return [o.add(_REDUCE[n.op_type], [o.v(n.input[0])], {"axes": axes, "keepdim": keep})]
