"""Numpy reference kernels for the float Graph IR (the oracle for everything after it).

Each kernel takes the node's attributes (defaults filled in) and numpy operands and returns one
numpy array. Sliding-window ops work in NHWC; NCHW callers are transposed around them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tessel.ir.ops import Op, window_out
from tessel.ir.types import Layout

Kernel = Callable[[Mapping[str, Any], list[np.ndarray]], np.ndarray]
KERNELS: dict[Op, Kernel] = {}


def _special() -> Any:
    """scipy.special, imported on first use (its import is slow; the CLI starts without it)."""
    import scipy.special

    return scipy.special


def kernel(*ops: Op) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for op in ops:
            KERNELS[op] = fn
        return fn
    return register


def to_nhwc(x: np.ndarray, layout: Layout) -> np.ndarray:
    return x if layout is Layout.NHWC else x.transpose(0, 2, 3, 1)


def from_nhwc(x: np.ndarray, layout: Layout) -> np.ndarray:
    return x if layout is Layout.NHWC else x.transpose(0, 3, 1, 2)


def windows(x: np.ndarray, kernel_hw: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Strided view (N, OH, OW, C, KH, KW) of the (already padded) NHWC input."""
    kh, kw = kernel_hw
    dh, dw = dilation
    view = sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(1, 2))
    view = view[:, ::stride[0], ::stride[1], :, ::dh, ::dw]
    return view[:, :out_hw[0], :out_hw[1]]


def pad_hw(x: np.ndarray, padding: tuple[int, ...], value: float, extra: tuple[int, int] = (0, 0)
           ) -> np.ndarray:
    pt, pl, pb, pr = padding
    return np.pad(x, ((0, 0), (pt, pb + extra[0]), (pl, pr + extra[1]), (0, 0)),
                  constant_values=value)


# ---------------------------------------------------------------- compute


@kernel(Op.CONV2D)
def conv2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    w = xs[1] if layout is Layout.NHWC else xs[1].transpose(0, 2, 3, 1)  # -> OHWI
    o, kh, kw, ci = w.shape
    g = a["groups"]
    n, h, wd, c = x.shape
    oh = window_out(h, kh, a["stride"][0], a["padding"][0], a["padding"][2], a["dilation"][0])
    ow = window_out(wd, kw, a["stride"][1], a["padding"][1], a["padding"][3], a["dilation"][1])
    win = windows(pad_hw(x, a["padding"], 0.0), (kh, kw), a["stride"], a["dilation"], (oh, ow))
    if g == 1:
        out = np.tensordot(win, w.transpose(3, 1, 2, 0), axes=([3, 4, 5], [0, 1, 2]))
    elif g == c and ci == 1 and o == c:
        out = np.einsum("nhwckl,ckl->nhwc", win, w[..., 0], optimize=True)
    else:
        og = o // g
        parts = [np.tensordot(win[:, :, :, gi * ci:(gi + 1) * ci],
                              w[gi * og:(gi + 1) * og].transpose(3, 1, 2, 0),
                              axes=([3, 4, 5], [0, 1, 2])) for gi in range(g)]
        out = np.concatenate(parts, axis=3)
    if len(xs) > 2:
        out = out + xs[2]
    return from_nhwc(out.astype(xs[0].dtype), layout)


@kernel(Op.LINEAR)
def linear(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    out = xs[0] @ xs[1].T
    return out + xs[2] if len(xs) > 2 else out


@kernel(Op.MATMUL)
def matmul(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return np.matmul(xs[0], xs[1])


@kernel(Op.BATCH_NORM)
def batch_norm(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x, mean, var = xs[:3]
    axis = 3 if a["layout"] is Layout.NHWC else 1
    shape = [1] * x.ndim
    shape[axis] = -1
    scale = 1.0 / np.sqrt(var.astype(np.float64) + a["eps"])
    if len(xs) > 3:
        scale = scale * xs[3]
    shift = -mean * scale + (xs[4] if len(xs) > 4 else 0.0)
    return (x * scale.reshape(shape) + shift.reshape(shape)).astype(x.dtype)


@kernel(Op.LAYER_NORM)
def layer_norm(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    axes = tuple(range(x.ndim - len(a["normalized_shape"]), x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + a["eps"])
    if len(xs) > 1:
        y = y * xs[1]
    if len(xs) > 2:
        y = y + xs[2]
    return y.astype(x.dtype)


@kernel(Op.SOFTMAX)
def softmax(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return (e / e.sum(axis=a["axis"], keepdims=True)).astype(x.dtype)


@kernel(Op.SDPA)
def sdpa(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    q, k, v = xs[:3]
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(a["scale"])
    if a["causal"]:
        lq, lk = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((lq, lk), bool)), scores, -np.inf)
    if len(xs) > 3:
        mask = xs[3]
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    return np.matmul(softmax({"axis": -1}, [scores.astype(q.dtype)]), v)


@kernel(Op.MAX_POOL2D, Op.AVG_POOL2D)
def pool2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    _, h, w, _ = x.shape
    (kh, kw), (sh, sw), pad = a["kernel"], a["stride"], a["padding"]
    dil = a.get("dilation", (1, 1))
    ceil = a["ceil_mode"]
    oh = window_out(h, kh, sh, pad[0], pad[2], dil[0], ceil)
    ow = window_out(w, kw, sw, pad[1], pad[3], dil[1], ceil)
    extra = (max(0, (oh - 1) * sh + dil[0] * (kh - 1) + 1 - (h + pad[0] + pad[2])),
             max(0, (ow - 1) * sw + dil[1] * (kw - 1) + 1 - (w + pad[1] + pad[3])))
    if "dilation" in a:  # max pool
        padded = pad_hw(x, pad, -np.inf, extra)
        out = windows(padded, (kh, kw), (sh, sw), dil, (oh, ow)).max(axis=(4, 5))
    else:
        total = windows(pad_hw(x, pad, 0.0, extra), (kh, kw), (sh, sw), (1, 1), (oh, ow))
        ones = np.ones((1, h, w, 1), np.float64)
        region = pad_hw(ones, pad, 1.0 if a["count_include_pad"] else 0.0)
        region = pad_hw(region, (0, 0, 0, 0), 0.0, extra)  # ceil overflow never counts
        count = windows(region, (kh, kw), (sh, sw), (1, 1), (oh, ow)).sum(axis=(4, 5))
        out = total.sum(axis=(4, 5), dtype=np.float64) / count
    return from_nhwc(out.astype(xs[0].dtype), layout)


def _reducer(fn: Callable[..., np.ndarray]) -> Kernel:
    def k(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
        return np.asarray(fn(xs[0], axis=tuple(a["axes"]), keepdims=a["keepdim"])).astype(
            xs[0].dtype)
    return k


KERNELS[Op.MEAN] = _reducer(np.mean)
KERNELS[Op.SUM] = _reducer(np.sum)
KERNELS[Op.REDUCE_MAX] = _reducer(np.max)


@kernel(Op.EMBEDDING)
def embedding(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return xs[0][xs[1]]


@kernel(Op.UPSAMPLE_NEAREST)
def upsample_nearest(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    hx, wx = (1, 2) if a["layout"] is Layout.NHWC else (2, 3)
    return np.repeat(np.repeat(xs[0], a["scale"][0], axis=hx), a["scale"][1], axis=wx)


# ---------------------------------------------------------------- elementwise
def expit(x: np.ndarray) -> np.ndarray:
    """The logistic sigmoid (scipy's, imported on first use: scipy is slow to import)."""
    from scipy.special import expit as _expit
    return _expit(x)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function (scipy's, imported on first use)."""
    from scipy.special import erf as _erf
    return _erf(x)


_UNARY: dict[Op, Callable[[np.ndarray], np.ndarray]] = {
    Op.RELU: lambda x: np.maximum(x, 0),
    Op.SIGMOID: lambda x: _special().expit(x),
    Op.TANH: np.tanh,
    Op.HARDSWISH: lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    Op.HARDSIGMOID: lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    Op.SILU: lambda x: x * _special().expit(x),
    Op.EXP: np.exp,
    Op.LOG: np.log,
    Op.NEG: np.negative,
    Op.ABS: np.abs,
    Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: 1.0 / np.sqrt(x),
    Op.RECIPROCAL: lambda x: 1.0 / x,
}
_BINARY: dict[Op, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
    Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum, Op.POW: np.power,
}


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    return lambda a, xs: np.asarray(fn(xs[0])).astype(xs[0].dtype)


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def k(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
        out = fn(xs[0], xs[1])
        if xs[0].dtype.kind in "iu" and fn is np.divide:  # torch: int / int -> true division
            return out.astype(np.float32)
        return np.asarray(out).astype(np.result_type(xs[0], xs[1]))
    return k


for _op, _fn in _UNARY.items():
    KERNELS[_op] = _unary(_fn)
for _op, _fn in _BINARY.items():
    KERNELS[_op] = _binary(_fn)


@kernel(Op.CLAMP)
def clamp(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return np.clip(xs[0], a["min"], a["max"]).astype(xs[0].dtype)


@kernel(Op.GELU)
def gelu(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0].astype(np.float64)
    if a["approximate"] == "tanh":
        y = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1.0 + _special().erf(x / np.sqrt(2.0)))
    return y.astype(xs[0].dtype)


# ---------------------------------------------------------------- data movement


@kernel(Op.RESHAPE)
def reshape(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return xs[0].reshape(a["shape"])


@kernel(Op.TRANSPOSE)
def transpose(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(xs[0].transpose(a["perm"]))


@kernel(Op.CONCAT)
def concat(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs, axis=a["axis"])


@kernel(Op.SLICE)
def slice_(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    index = [slice(None)] * xs[0].ndim
    index[a["axis"]] = slice(a["start"], a["end"], a["step"])
    return np.ascontiguousarray(xs[0][tuple(index)])


@kernel(Op.PAD)
def pad(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    p = a["pads"]
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(xs[0].ndim)]
    return np.pad(xs[0], widths, constant_values=a["value"])


@kernel(Op.EXPAND)
def expand(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(xs[0], a["shape"]))


@kernel(Op.CAST)
def cast(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return xs[0].astype(a["dtype"].numpy)


@kernel(Op.CONSTANT)
def constant(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    return a["value"].array



@kernel(Op.QUANTIZE)
def quantize(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """PyTorch's quantize_per_tensor: round(x / scale) half to even, + zero point, clamp."""
    q = np.rint(xs[0].astype(np.float32) * np.float32(1.0 / a["scale"])) + a["zero_point"]
    return np.clip(q, a["qmin"], a["qmax"]).astype(a["dtype"].numpy)


@kernel(Op.DEQUANTIZE)
def dequantize(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    diff = xs[0].astype(np.int32) - np.int32(a["zero_point"])
    return (diff.astype(np.float32) * np.float32(a["scale"])).astype(np.float32)
