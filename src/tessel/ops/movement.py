"""Data movement: reshape, transpose, concat, slice, pad, expand, cast, upsample_nearest.

On integer tensors they run unchanged (their result types carry the operand's quantisation
parameters; a pad's value becomes the zero point's integer), as DMA-only NPU steps
(tessel.ops.movement_emit); reshape is a view (the result aliases its input in DRAM); cast
stays on the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.ir.attrs import AttrKind, AttrSpec
from tessel.ir.graph import Graph, Node
from tessel.ir.ops import (
    Op,
    OpSpec,
    axis_index,
    broadcast_shapes,
    nchw_like,
    require,
    slice_len,
    spatial,
)
from tessel.ir.rewriting import Rewriter
from tessel.ir.types import DType, Layout, TensorType
from tessel.ops import movement_emit
from tessel.ops.base import LayoutRule, Npu, OpDef, Trait, lazy_functional, lazy_torch, register
from tessel.ops.quantise import IntVal, QOut, deq, emit, requantize

_INTS, _LAYOUT = AttrKind.INTS, AttrKind.LAYOUT


def torch_dtype(dtype: DType) -> Any:
    """The torch dtype of an IR dtype."""
    return getattr(lazy_torch(), {"f32": "float32", "i64": "int64", "i32": "int32", "i16": "int16",
                                  "i8": "int8", "u8": "uint8", "bool": "bool"}[dtype.value])


# ---------------------------------------------------------------- shape rules


def _reshape(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    shape = tuple(attrs["shape"])
    require(all(d >= 0 for d in shape), f"reshape target {list(shape)} has a negative dim")
    require(math.prod(shape) == ts[0].numel, f"reshape {list(ts[0].shape)} -> {list(shape)} "
            "changes the element count")
    return TensorType(shape, ts[0].dtype)


def _transpose(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    perm = tuple(attrs["perm"])
    require(sorted(perm) == list(range(ts[0].rank)), f"perm {list(perm)} is not a permutation "
            f"of rank {ts[0].rank}")
    return TensorType(tuple(ts[0].shape[p] for p in perm), ts[0].dtype)


def _concat(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    first = ts[0]
    axis = axis_index(attrs["axis"], first.rank)
    for t in ts[1:]:
        require(t.dtype == first.dtype, "concat operands differ in dtype")
        require(t.rank == first.rank and all(
            d == e for i, (d, e) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis),
            f"concat operand shape {list(t.shape)} does not match {list(first.shape)} off axis {axis}")
    size = sum(t.shape[axis] for t in ts)
    return TensorType(first.shape[:axis] + (size,) + first.shape[axis + 1:], first.dtype,
                      first.layout)


def _slice(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    axis = axis_index(attrs["axis"], x.rank)
    require(attrs["step"] >= 1, f"slice step must be >= 1, got {attrs['step']}")
    n = slice_len(x.shape[axis], attrs["start"], attrs["end"], attrs["step"])
    return TensorType(x.shape[:axis] + (n,) + x.shape[axis + 1:], x.dtype, x.layout)


def _pad(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = ts[0]
    pads = attrs["pads"]
    require(len(pads) == 2 * x.rank, f"pads needs 2 x rank = {2 * x.rank} entries, got {len(pads)}")
    require(all(p >= 0 for p in pads), f"negative padding {list(pads)}")
    shape = tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x.shape))
    return TensorType(shape, x.dtype, x.layout)


def _expand(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    shape = tuple(attrs["shape"])
    require(broadcast_shapes(ts[0].shape, shape) == shape,
            f"cannot expand {list(ts[0].shape)} to {list(shape)}")
    return TensorType(shape, ts[0].dtype)


def _cast(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(ts[0].shape, attrs["dtype"], ts[0].layout)


def _upsample(ts: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    layout = attrs["layout"]
    n, c, h, w = spatial(ts[0], layout)
    fh, fw = attrs["scale"]
    require(fh >= 1 and fw >= 1, f"scale factors must be >= 1, got {[fh, fw]}")
    return TensorType(nchw_like(layout, n, c, h * fh, w * fw), ts[0].dtype, layout)


# ---------------------------------------------------------------- float kernels


def _slice_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    index = [slice(None)] * xs[0].ndim
    index[a["axis"]] = slice(a["start"], a["end"], a["step"])
    return np.ascontiguousarray(xs[0][tuple(index)])


def _pad_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    p = a["pads"]
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(xs[0].ndim)]
    return np.pad(xs[0], widths, constant_values=a["value"])


def _upsample_kernel(a: Mapping[str, Any], xs: list[np.ndarray]) -> np.ndarray:
    hx, wx = (1, 2) if a["layout"] is Layout.NHWC else (2, 3)
    return np.repeat(np.repeat(xs[0], a["scale"][0], axis=hx), a["scale"][1], axis=wx)


def _slice_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    index = [slice(None)] * xs[0].dim()
    index[a["axis"]] = slice(a["start"], a["end"], a["step"])
    return xs[0][tuple(index)]


def _pad_torch(a: Mapping[str, Any], xs: list[Any]) -> Any:
    p = a["pads"]
    flat = [v for i in reversed(range(xs[0].dim())) for v in (p[2 * i], p[2 * i + 1])]
    return lazy_functional().pad(xs[0], flat, value=a["value"])


# ---------------------------------------------------------------- QDQ -> integer


def _movement_chain(rw: Rewriter, name: str) -> tuple[IntVal, list[Node]] | None:
    """(x, [op1, ..., opk]) when `name` = opk(...op1(dq(x))) with ops that compute the same on
    integers only (Trait.SAME_ON_INTEGERS)."""
    from tessel.ops.registry import definition

    chain: list[Node] = []
    node = rw.producer(name)
    while (node is not None and definition(node.op).has(Trait.SAME_ON_INTEGERS)
           and len(chain) < 16):
        chain.append(node)
        x = deq(rw, node.inputs[0])
        if x is not None:
            return x, chain[::-1]
        node = rw.producer(node.inputs[0])
    return None


# q(max_pool2d | reshape | transpose | slice | pad | expand | upsample(...(dq(x))))
#   =>  the same ops on the integer x (pad value -> the zero point) [-> requantize]
def lower_movement(rw: Rewriter, q: Node) -> str | None:
    found = _movement_chain(rw, q.inputs[0])
    if found is None:
        return None
    x, chain = found
    for node in chain:
        attrs = dict(node.attr_map)
        if node.op is Op.PAD:  # the padding value in the integer domain (0.0 -> zero point)
            lo, hi = x.dtype.bounds
            attrs["value"] = float(np.clip(x.zp + np.rint(node.attr("value") / x.scale), lo, hi))
        y = emit(rw, node.op, [x.name], attrs, x.quant, hint=f"{node.name}_q", loc=node.loc)
        x = IntVal(y, x.scale, x.zp, x.dtype)
    return requantize(rw, x, QOut.of(q), hint=f"{chain[-1].name}_rq", loc=chain[-1].loc)


# q(concat(dq(x1), dq(x2), ...))  =>  concat(requantize?(x1), ...) with the output's parameters
def lower_concat(rw: Rewriter, q: Node) -> str | None:
    node = rw.producer_op(q.inputs[0], Op.CONCAT)
    if node is None:
        return None
    parts = [deq(rw, i) for i in node.inputs]
    if any(p is None for p in parts):
        return None
    out = QOut.of(q)
    names = [requantize(rw, p, out, hint=f"{node.name}_in{k}", loc=node.loc)
             for k, p in enumerate(parts)]
    return emit(rw, Op.CONCAT, names, node.attr_map, out.quant, hint=f"{node.name}_q",
                loc=node.loc)


# ---------------------------------------------------------------- NPU


def refusal(node: Node, graph: Graph | None = None) -> str | None:
    """The DMA steps move elements of one type, and upsample_nearest's is 4-D."""
    if node.op is Op.UPSAMPLE_NEAREST and node.type.rank != 4:
        return f"upsample_nearest of a rank-{node.type.rank} tensor (the NPU's is 4-D)"
    if graph is not None:
        for name in node.inputs:
            if graph.type_of(name).dtype is not node.type.dtype:
                return (f"operand %{name} is {graph.type_of(name).dtype.value}, the result "
                        f"{node.type.dtype.value}")
    return None


_NPU = Npu(movement_emit, refusal, matrix=False)
_MOVES = frozenset({Trait.SAME_ON_INTEGERS, Trait.DATA_MOVEMENT})

register(
    OpDef(Op.RESHAPE, OpSpec(("x",), _reshape, {"shape": AttrSpec(_INTS)}),
          kernel=lambda a, xs: xs[0].reshape(a["shape"]),
          torch=lambda a, xs: lazy_torch().reshape(xs[0], list(a["shape"])),
          layout=LayoutRule.RESHAPE, lower=(lower_movement,), look_through=True,
          npu=Npu(None, matrix=False), traits=frozenset({Trait.SAME_ON_INTEGERS, Trait.VIEW})),
    OpDef(Op.TRANSPOSE, OpSpec(("x",), _transpose, {"perm": AttrSpec(_INTS)}),
          kernel=lambda a, xs: np.ascontiguousarray(xs[0].transpose(a["perm"])),
          torch=lambda a, xs: lazy_torch().permute(xs[0], list(a["perm"])),
          layout=LayoutRule.TRANSPOSE, lower=(lower_movement,), npu=_NPU, traits=_MOVES),
    OpDef(Op.CONCAT, OpSpec(("inputs",), _concat, {"axis": AttrSpec(AttrKind.INT)},
                            variadic=True),
          kernel=lambda a, xs: np.concatenate(xs, axis=a["axis"]),
          torch=lambda a, xs: lazy_torch().cat(xs, a["axis"]),
          layout=LayoutRule.BROADCAST, lower=(lower_concat,), npu=_NPU,
          traits=frozenset({Trait.DATA_MOVEMENT})),
    OpDef(Op.SLICE, OpSpec(("x",), _slice, {
        "axis": AttrSpec(AttrKind.INT), "start": AttrSpec(AttrKind.INT),
        "end": AttrSpec(AttrKind.INT), "step": AttrSpec(AttrKind.INT, 1)}),
          kernel=_slice_kernel, torch=_slice_torch, layout=LayoutRule.AXES,
          lower=(lower_movement,), npu=_NPU, traits=_MOVES),
    OpDef(Op.PAD, OpSpec(("x",), _pad, {"pads": AttrSpec(_INTS),
                                        "value": AttrSpec(AttrKind.FLOAT, 0.0)}),
          kernel=_pad_kernel, torch=_pad_torch, layout=LayoutRule.AXES,
          lower=(lower_movement,), npu=_NPU, traits=_MOVES),
    OpDef(Op.EXPAND, OpSpec(("x",), _expand, {"shape": AttrSpec(_INTS)}),
          kernel=lambda a, xs: np.ascontiguousarray(np.broadcast_to(xs[0], a["shape"])),
          torch=lambda a, xs: xs[0].expand(list(a["shape"])),
          lower=(lower_movement,), npu=_NPU, traits=_MOVES),
    OpDef(Op.CAST, OpSpec(("x",), _cast, {"dtype": AttrSpec(AttrKind.DTYPE)}),
          kernel=lambda a, xs: xs[0].astype(a["dtype"].numpy),
          torch=lambda a, xs: xs[0].to(torch_dtype(a["dtype"])),
          layout=LayoutRule.FOLLOW),
    OpDef(Op.UPSAMPLE_NEAREST, OpSpec(("x",), _upsample, {
        "scale": AttrSpec(_INTS), "layout": AttrSpec(_LAYOUT, Layout.NCHW)}),
          kernel=_upsample_kernel,
          torch=lambda a, xs: lazy_functional().interpolate(xs[0], scale_factor=tuple(
              float(s) for s in a["scale"]), mode="nearest"),
          layout=LayoutRule.WINDOW, lower=(lower_movement,), npu=_NPU, traits=_MOVES),
)
