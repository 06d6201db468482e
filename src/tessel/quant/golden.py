"""The golden model: the integer Graph IR interpreter that defines every compiled model's output.

`GOLDEN_KERNELS` is the kernel table for `tessel.ir.run_graph`: each integer op is the exact
composition of the NPU instructions' arithmetic (`tessel.ops.intops`, one function per ISA
instruction, built on `tessel.isa.fixedpoint`), so the simulator running the compiled
binary must equal it bit for bit. Quantize / dequantize (host, PyTorch rounding), data
movement and host (float) ops use the float interpreter's kernels.

    outputs = run_golden(qm.graph, [x])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.graph import Graph
from tessel.ir.interpreter import run_graph
from tessel.ir.kernels import KERNELS, Kernel, from_nhwc, to_nhwc
from tessel.ir.ops import Op, window_out
from tessel.ir.types import Layout
from tessel.isa.fields import EltOp, PoolOp, ReduceOp
from tessel.ops import intops, softmax
from tessel.ops import layer_norm as layernorm

GOLDEN_KERNELS: dict[Op, Kernel] = dict(KERNELS)


def golden(*ops: Op) -> Callable[[Kernel], Kernel]:
    """Register a golden kernel for `ops`."""
    def register(fn: Kernel) -> Kernel:
        for op in ops:
            GOLDEN_KERNELS[op] = fn
        return fn
    return register


def _dtype(a: Mapping[str, Any]) -> np.dtype:
    return a["dtype"].numpy


# ---------------------------------------------------------------- matrix engine + REQUANT


def _geometry(a: Mapping[str, Any], h: int, w: int, kh: int, kw: int) -> dict[str, Any]:
    """Window fields of CONV / DWCONV / POOL from the op's attributes (NHWC input h x w)."""
    pt, pl, pb, pr = a["padding"]
    dil = tuple(a.get("dilation") or (1, 1))
    ceil = a.get("ceil_mode", False)
    oh = window_out(h, kh, a["stride"][0], pt, pb, dil[0], ceil)
    ow = window_out(w, kw, a["stride"][1], pl, pr, dil[1], ceil)
    return {"stride": tuple(a["stride"]), "dilation": dil, "pad": (pt, pl), "out_hw": (oh, ow)}


@golden(Op.QCONV2D)
def qconv2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """CONV (DWCONV when groups == channels, one CONV per group otherwise) + REQUANT src=ACC."""
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    w = xs[1] if layout is Layout.NHWC else xs[1].transpose(0, 2, 3, 1)  # OHWI
    o, kh, kw, ci = w.shape
    g, c = a["groups"], x.shape[3]
    geo = _geometry(a, x.shape[1], x.shape[2], kh, kw)
    hwio = w.transpose(1, 2, 3, 0)
    if g == 1:
        acc = intops.conv_acc(x, hwio, a["in_zp"], **geo)
    elif g == c and o == c and ci == 1:
        acc = intops.dwconv_acc(x, hwio[:, :, 0, :], a["in_zp"], **geo)
    else:
        og = o // g
        acc = np.concatenate([intops.conv_acc(x[..., k * ci:(k + 1) * ci],
                                              hwio[..., k * og:(k + 1) * og], a["in_zp"], **geo)
                              for k in range(g)], axis=3)
    y = intops.requant(acc, xs[2], xs[3], xs[4], a["out_zp"], a["act_min"], a["act_max"],
                       _dtype(a))
    return from_nhwc(y, layout)


@golden(Op.QLINEAR)
def qlinear(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """MATMUL (x [M, K] by w^T [K, N], weight zero point 0) + REQUANT per output channel."""
    x, w = xs[0], xs[1]
    acc = intops.matmul_acc(x.reshape(-1, x.shape[-1]), w.T, a["in_zp"], 0)
    y = intops.requant(acc, xs[2], xs[3], xs[4], a["out_zp"], a["act_min"], a["act_max"],
                       _dtype(a))
    return y.reshape(x.shape[:-1] + (w.shape[0],))


@golden(Op.QMATMUL)
def qmatmul(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """MATMUL per batch entry (both zero points subtracted) + REQUANT (per tensor)."""
    acc = intops.matmul_acc(xs[0], xs[1], a["a_zp"], a["b_zp"])
    return intops.requant(acc, 0, a["multiplier"], a["shift"], a["out_zp"], a["act_min"],
                          a["act_max"], _dtype(a))


# ---------------------------------------------------------------- vector engine


def _elt_params(a: Mapping[str, Any]) -> dict[str, Any]:
    return {"a_zp": a["a_zp"], "b_zp": a["b_zp"], "left_shift": a["left_shift"],
            "a_mult": a["a_multiplier"], "a_shift": a["a_shift"], "b_mult": a["b_multiplier"],
            "b_shift": a["b_shift"], "out_mult": a["out_multiplier"],
            "out_shift": a["out_shift"], "out_zp": a["out_zp"], "act_min": a["act_min"],
            "act_max": a["act_max"], "out_dtype": _dtype(a)}


@golden(Op.QADD)
def qadd(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE ADD (TFLite rescale: left shift, per-input and output multipliers)."""
    return intops.eltwise(EltOp.ADD, xs[0], xs[1], **_elt_params(a))


@golden(Op.QSUB)
def qsub(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE SUB."""
    return intops.eltwise(EltOp.SUB, xs[0], xs[1], **_elt_params(a))


@golden(Op.QMUL)
def qmul(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE MUL: sat32((a - a_zp) * (b - b_zp)), then the output multiplier."""
    return intops.eltwise(EltOp.MUL, xs[0], xs[1], a_zp=a["a_zp"], b_zp=a["b_zp"],
                          out_mult=a["out_multiplier"], out_shift=a["out_shift"],
                          out_zp=a["out_zp"], act_min=a["act_min"], act_max=a["act_max"],
                          out_dtype=_dtype(a))


@golden(Op.REQUANTIZE)
def requantize(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """ELTWISE ADD with b multiplier 0: clamp(MBQM(x - in_zp, multiplier, shift) + out_zp)."""
    x = xs[0]
    return intops.eltwise(EltOp.ADD, x, np.zeros((), np.int32), a_zp=a["in_zp"], b_zp=0,
                          left_shift=0, a_mult=a["multiplier"], a_shift=a["shift"], b_mult=0,
                          b_shift=0, out_mult=1 << 30, out_shift=1, out_zp=a["out_zp"],
                          act_min=a["act_min"], act_max=a["act_max"], out_dtype=_dtype(a))


@golden(Op.LUT)
def lut(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """LUT I8_256 (int8) or I16_513 (int16, TFLite interpolation)."""
    x, table = xs
    return intops.lut_i8(x, table) if x.dtype == np.int8 else intops.lut_i16(x, table)


@golden(Op.QAVG_POOL2D)
def qavg_pool2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """POOL AVG: rounding_div(sum(valid), count(valid)), clamped; same parameters in and out."""
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    kh, kw = a["kernel"]
    y = intops.pool(x, PoolOp.AVG, (kh, kw), **_geometry(a, x.shape[1], x.shape[2], kh, kw),
                    act_min=a["act_min"], act_max=a["act_max"])
    return from_nhwc(y, layout)


@golden(Op.MAX_POOL2D)
def max_pool2d(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """POOL MAX on integer tensors (padding never wins); the float kernel for float tensors."""
    if not np.issubdtype(xs[0].dtype, np.integer):
        return KERNELS[Op.MAX_POOL2D](a, xs)
    layout = a["layout"]
    x = to_nhwc(xs[0], layout)
    kh, kw = a["kernel"]
    lo, hi = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max
    y = intops.pool(x, PoolOp.MAX, (kh, kw), **_geometry(a, x.shape[1], x.shape[2], kh, kw),
                    act_min=int(lo), act_max=int(hi))
    return from_nhwc(y, layout)


@golden(Op.QMEAN)
def qmean(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """REDUCE SUM (zero point subtracted) over the axes (moved last and merged: a COPY) +
    REQUANT src=SRAM."""
    x = xs[0]
    axes = sorted({ax % x.ndim for ax in a["axes"]})
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = x.transpose(kept + axes)
    flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
    s = intops.reduce(flat, ReduceOp.SUM, -1, a["in_zp"])
    y = intops.requant(s, 0, a["multiplier"], a["shift"], a["out_zp"], a["act_min"],
                       a["act_max"], _dtype(a))
    if a["keepdim"]:
        return y.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return y


@golden(Op.QSOFTMAX)
def qsoftmax(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """The softmax chain of docs/numerics.md (REDUCE MAX, ELTWISE SUB, LUT, REDUCE SUM,
    UNARY RECIP, ELTWISE MUL), `tessel.ops.softmax.softmax_int`."""
    plan = softmax.SoftmaxPlan.from_attrs(a, xs[1])
    return softmax.softmax_int(xs[0], plan, a["axis"])


@golden(Op.QLAYER_NORM)
def qlayer_norm(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    """The layer-norm chain of docs/numerics.md, `tessel.ops.layer_norm.layer_norm_int`."""
    plan = layernorm.LayerNormPlan.from_attrs(a, xs[1], xs[2])
    return layernorm.layer_norm_int(xs[0], plan)


def run_golden(graph: Graph, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
               ) -> list[np.ndarray]:
    """The golden model's outputs for `inputs` (float32 graph inputs)."""
    return run_graph(graph, inputs, kernels=GOLDEN_KERNELS)
