"""ONNX converters of shape / data-movement ops, constants, and QuantizeLinear /
DequantizeLinear.

Shape computations on known arrays fold at import time (the converter returns a numpy array),
so `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` chains of traced exports become one
`reshape`. Q/DQ nodes import in the structure of the pt2e import (`convert_quant.py`):
activations as `quantize` / `dequantize` with the given scale and zero point, a dequantised
constant (weight, int32 bias) as an integer constant whose type carries its QuantParams, read
through `dequantize` (per tensor) or `mul(cast(C), scales)` (per channel). uint8 tensors become
int8 with the zero point minus 128, which is exact (q - zp is unchanged).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from tessel.frontend.context import Unsupported
from tessel.frontend.contract import check_elements, check_scales
from tessel.frontend.onnx_import import OnnxContext, attributes, onnx_converts, onnx_dtype
from tessel.ir import DType, Op

Node = onnx.NodeProto
Results = list[str | np.ndarray | None]


def _known(o: OnnxContext, name: str) -> bool:
    return name in o.arrays and name not in o.values


def _reshape(o: OnnxContext, name: str, shape: tuple[int, ...]) -> str | np.ndarray:
    if _known(o, name):
        return np.reshape(o.arrays[name], shape)
    return o.ctx.reshape(o.v(name), shape)


# Identity / Dropout (inference)  =>  the input
@onnx_converts("Identity", "Dropout")
def identity(o: OnnxContext, n: Node) -> Results:
    x = n.input[0]
    return [o.arrays[x] if _known(o, x) else o.v(x), None]


# Constant {value | value_float(s) | value_int(s)}  =>  a known array
@onnx_converts("Constant")
def constant(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return [np.asarray(a[key], dtype=dtype)]
    raise Unsupported(f"Constant with attribute(s) {sorted(a)}")


# Shape(x) {start, end}  =>  a known int64 array (shapes are static)
@onnx_converts("Shape")
def shape(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    dims = o.shape(n.input[0])
    start, end = int(a.get("start", 0)), a.get("end")
    return [np.asarray(dims[start:None if end is None else int(end)], np.int64)]


# ConstantOfShape(shape) {value}  =>  a known array
@onnx_converts("ConstantOfShape")
def constant_of_shape(o: OnnxContext, n: Node) -> Results:
    dims = check_elements(o.array(n.input[0], "shape").reshape(-1),
                          f"ConstantOfShape '{n.name}' input 'shape'")
    value = attributes(n).get("value", np.zeros(1, np.float32))
    return [np.full(dims, np.asarray(value).reshape(-1)[0], dtype=np.asarray(value).dtype)]


# Cast(x) {to}  =>  cast (folded on known arrays)
@onnx_converts("Cast")
def cast(o: OnnxContext, n: Node) -> Results:
    dtype = onnx_dtype(int(attributes(n)["to"]))
    if _known(o, n.input[0]):
        return [o.arrays[n.input[0]].astype(dtype.numpy)]
    return [o.ctx.cast(o.v(n.input[0]), dtype)]


# Flatten(x) {axis = 1}  =>  reshape [prod(dims[:axis]), prod(dims[axis:])]
@onnx_converts("Flatten")
def flatten(o: OnnxContext, n: Node) -> Results:
    dims = o.shape(n.input[0])
    axis = int(attributes(n).get("axis", 1)) % (len(dims) + 1)
    return [_reshape(o, n.input[0], (math.prod(dims[:axis]), math.prod(dims[axis:])))]


# Reshape(x, shape) {allowzero}  =>  reshape (0 copies the input dim, -1 is inferred)
@onnx_converts("Reshape")
def reshape(o: OnnxContext, n: Node) -> Results:
    dims = o.shape(n.input[0])
    target = [int(d) for d in o.array(n.input[1], "Reshape shape")]
    if not int(attributes(n).get("allowzero", 0)):
        target = [dims[i] if d == 0 else d for i, d in enumerate(target)]
    if target.count(-1) == 1:
        known = math.prod(d for d in target if d != -1)
        target[target.index(-1)] = math.prod(dims) // max(known, 1)
    if math.prod(target) != math.prod(dims):
        raise Unsupported(f"cannot reshape {list(dims)} to {target}")
    return [_reshape(o, n.input[0], tuple(target))]


def _axes(o: OnnxContext, n: Node, rank: int) -> list[int] | None:
    """Axes from input 1 (opset >= 13) or the `axes` attribute, normalised; None if absent."""
    if o.has(n, 1):
        axes = o.array(n.input[1], "axes").tolist()
    else:
        axes = attributes(n).get("axes")
    return None if axes is None else sorted(int(a) % rank for a in axes)


# Squeeze(x, axes?)  =>  reshape without those (or all) size-1 dims
@onnx_converts("Squeeze")
def squeeze(o: OnnxContext, n: Node) -> Results:
    dims = o.shape(n.input[0])
    axes = _axes(o, n, len(dims))
    drop = set(axes) if axes is not None else {i for i, d in enumerate(dims) if d == 1}
    return [_reshape(o, n.input[0], tuple(d for i, d in enumerate(dims) if i not in drop))]


# Unsqueeze(x, axes)  =>  reshape with size-1 dims inserted
@onnx_converts("Unsqueeze")
def unsqueeze(o: OnnxContext, n: Node) -> Results:
    dims = list(o.shape(n.input[0]))
    axes = _axes(o, n, len(dims) + len(o.array(n.input[1], "axes").reshape(-1))
                 if o.has(n, 1) else len(dims) + len(attributes(n).get("axes", [])))
    for axis in axes or []:
        dims.insert(axis, 1)
    return [_reshape(o, n.input[0], tuple(dims))]


# Transpose(x) {perm = reversed}  =>  transpose
@onnx_converts("Transpose")
def transpose(o: OnnxContext, n: Node) -> Results:
    rank = len(o.shape(n.input[0]))
    perm = [int(p) for p in attributes(n).get("perm", list(range(rank))[::-1])]
    if _known(o, n.input[0]):
        return [np.transpose(o.arrays[n.input[0]], perm)]
    return [o.ctx.transpose(o.v(n.input[0]), perm)]


# Concat(xs...) {axis}  =>  concat (folded on known arrays)
@onnx_converts("Concat")
def concat(o: OnnxContext, n: Node) -> Results:
    axis = int(attributes(n)["axis"])
    if all(_known(o, i) for i in n.input):
        return [np.concatenate([o.arrays[i] for i in n.input], axis=axis)]
    rank = len(o.shape(n.input[0]))
    return [o.add(Op.CONCAT, [o.v(i) for i in n.input], {"axis": axis % rank})]


# Gather(data, indices) {axis}: folded on known arrays; a scalar index  =>  slice + reshape
@onnx_converts("Gather")
def gather(o: OnnxContext, n: Node) -> Results:
    data, idx = n.input
    axis = int(attributes(n).get("axis", 0))
    if _known(o, data) and _known(o, idx):
        d, i = o.arrays[data], o.arrays[idx]
        check_elements((*d.shape[:axis % max(d.ndim, 1)], *i.shape, *d.shape[axis % max(d.ndim, 1) + 1:]),
                       f"Gather '{n.name}' output")
        return [np.take(o.arrays[data], o.arrays[idx], axis=axis)]
    if _known(o, data) and o.arrays[data].ndim == 2 and axis == 0:
        return [o.add(Op.EMBEDDING, [o.v(data), o.v(idx)])]
    index = o.array(idx, "Gather indices")
    if index.ndim != 0:
        raise Unsupported("Gather of a runtime tensor with non-scalar indices")
    dims = o.shape(data)
    axis %= len(dims)
    start = int(index) % dims[axis]
    y = o.add(Op.SLICE, [o.v(data)], {"axis": axis, "start": start, "end": start + 1})
    return [o.ctx.reshape(y, dims[:axis] + dims[axis + 1:])]


# Slice(x, starts, ends, axes?, steps?)  =>  one slice per axis
@onnx_converts("Slice")
def slice_(o: OnnxContext, n: Node) -> Results:
    dims = o.shape(n.input[0])
    starts = o.array(n.input[1], "starts").tolist()
    ends = o.array(n.input[2], "ends").tolist()
    axes = o.array(n.input[3], "axes").tolist() if o.has(n, 3) else list(range(len(starts)))
    steps = o.array(n.input[4], "steps").tolist() if o.has(n, 4) else [1] * len(starts)
    if _known(o, n.input[0]):
        index = [slice(None)] * len(dims)
        for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
            index[int(a)] = slice(int(s), int(e), int(st))
        return [o.arrays[n.input[0]][tuple(index)]]
    y = o.v(n.input[0])
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = int(a) % len(dims)
        if int(st) <= 0:
            raise Unsupported("Slice with a non-positive step")
        start, end, _ = slice(int(s), int(e), int(st)).indices(dims[a])
        if (start, end, int(st)) != (0, dims[a], 1):
            y = o.add(Op.SLICE, [y], {"axis": a, "start": start, "end": end, "step": int(st)})
    return [y]


# Split(x, split?) {axis, num_outputs}  =>  one slice per output
@onnx_converts("Split")
def split(o: OnnxContext, n: Node) -> Results:
    dims = o.shape(n.input[0])
    a = attributes(n)
    axis = int(a.get("axis", 0)) % len(dims)
    if o.has(n, 1):
        sizes = [int(s) for s in o.array(n.input[1], "split")]
    else:
        parts = len(n.output)
        size = -(-dims[axis] // parts)
        sizes = [min(size, dims[axis] - k * size) for k in range(parts)]
    out, start = [], 0
    for size in sizes:
        out.append(o.add(Op.SLICE, [o.v(n.input[0])], {"axis": axis, "start": start,
                                                       "end": start + size}))
        start += size
    return out


# Pad(x, pads, value?, axes?) {mode = constant}  =>  pad {pads = [lo, hi] per dim, value}
@onnx_converts("Pad")
def pad(o: OnnxContext, n: Node) -> Results:
    if attributes(n).get("mode", "constant") != "constant":
        raise Unsupported(f"mode '{attributes(n)['mode']}' (only constant padding)")
    rank = len(o.shape(n.input[0]))
    p = [int(v) for v in o.array(n.input[1], "pads")]
    axes = ([int(x) % rank for x in o.array(n.input[3], "axes")] if o.has(n, 3)
            else list(range(rank)))
    if any(v < 0 for v in p):
        raise Unsupported("negative pads (cropping)")
    pads = [0] * (2 * rank)
    k = len(axes)
    for i, axis in enumerate(axes):
        pads[2 * axis], pads[2 * axis + 1] = p[i], p[i + k]
    value = float(o.array(n.input[2], "pad value")) if o.has(n, 2) else 0.0
    return [o.add(Op.PAD, [o.v(n.input[0])], {"pads": pads, "value": value})]


# Expand(x, shape)  =>  expand to the broadcast shape
@onnx_converts("Expand")
def expand(o: OnnxContext, n: Node) -> Results:
    target = tuple(int(d) for d in o.array(n.input[1], "Expand shape"))
    out = tuple(int(d) for d in np.broadcast_shapes(o.shape(n.input[0]), target))
    check_elements(out, f"Expand '{n.name}' output")
    if _known(o, n.input[0]):
        return [np.broadcast_to(o.arrays[n.input[0]], out).copy()]
    x = o.v(n.input[0])
    rank = len(o.ctx.shape(x))
    if rank < len(out):
        x = o.ctx.reshape(x, (1,) * (len(out) - rank) + o.ctx.shape(x))
    return [o.ctx.expand(x, out)]


# Resize(x, roi, scales | sizes) {mode = nearest} with integer factors  =>  upsample_nearest
@onnx_converts("Resize", "Upsample")
def resize(o: OnnxContext, n: Node) -> Results:
    a = attributes(n)
    if a.get("mode", "nearest") != "nearest":
        raise Unsupported(f"mode '{a.get('mode')}' (only nearest)")
    dims = o.shape(n.input[0])
    if o.has(n, 3):
        sizes = [int(s) for s in o.array(n.input[3], "sizes")]
        scales = [s / d for s, d in zip(sizes, dims, strict=True)]
    else:
        scales = [float(s) for s in o.array(n.input[2 if n.op_type == "Resize" else 1], "scales")]
    if len(dims) != 4 or scales[:2] != [1.0, 1.0] or any(s != int(s) or s < 1 for s in scales):
        raise Unsupported(f"scales {scales} (integer factors over H, W of NCHW only)")
    return [o.add(Op.UPSAMPLE_NEAREST, [o.v(n.input[0])], {"scale": [int(s) for s in scales[2:]]})]


# ------------------------------------------------------------------ QDQ
def _zero_point(o: OnnxContext, n: Node, k: int) -> tuple[np.ndarray, DType]:
    """(zero point(s) as int64, the integer IR dtype) of a Q/DQ node; uint8 shifted to int8."""
    if not o.has(n, k):
        return np.zeros(1, np.int64), DType.U8 if n.op_type == "QuantizeLinear" else DType.I8
    zp = o.array(n.input[k], "zero point")
    dtype = DType.from_numpy(zp.dtype)
    return zp.astype(np.int64).reshape(-1), dtype


def _to_signed(q: np.ndarray, zp: np.ndarray, dtype: DType) -> tuple[np.ndarray, np.ndarray, DType]:
    """uint8 values and zero points as int8 (both minus 128: q - zp is unchanged)."""
    if dtype is DType.U8:
        return (q.astype(np.int16) - 128).astype(np.int8), zp - 128, DType.I8
    if dtype not in (DType.I8, DType.I16, DType.I32):
        raise Unsupported(f"{dtype.value} quantisation (int8, uint8, int16, int32 import)")
    return q, zp, dtype


# QuantizeLinear(x, scale, zp) per tensor  =>  quantize {scale, zero_point, qmin, qmax, dtype}
@onnx_converts("QuantizeLinear")
def quantize_linear(o: OnnxContext, n: Node) -> Results:
    scale = o.array(n.input[1], "scale").astype(np.float64).reshape(-1)
    check_scales(scale, f"QuantizeLinear '{n.name}' input 'scale'")
    zp, dtype = _zero_point(o, n, 2)
    lo, hi = dtype.bounds
    if _known(o, n.input[0]):  # a float weight quantised in the graph: fold
        x = o.arrays[n.input[0]].astype(np.float64)
        axis = int(attributes(n).get("axis", 1)) % max(x.ndim, 1)
        bshape = [1] * x.ndim
        if scale.size > 1:
            bshape[axis] = scale.size
        q = np.clip(np.rint(x / scale.reshape(bshape)) + zp.reshape(bshape), lo, hi)
        return [q.astype(dtype.numpy)]
    if scale.size != 1:
        raise Unsupported("per-channel QuantizeLinear of an activation")
    _, zp, idtype = _to_signed(np.zeros(0, dtype.numpy), zp, dtype)
    lo, hi = idtype.bounds
    return [o.add(Op.QUANTIZE, [o.v(n.input[0])], {
        "scale": float(scale[0]), "zero_point": int(zp[0]), "qmin": lo, "qmax": hi,
        "dtype": idtype})]


# DequantizeLinear(q, scale, zp) {axis}  =>  dequantize (activation, per-tensor constant) or
#   mul(cast(C {per-channel quant}), scales) for a per-channel constant
@onnx_converts("DequantizeLinear")
def dequantize_linear(o: OnnxContext, n: Node) -> Results:
    scale = o.array(n.input[1], "scale").astype(np.float64).reshape(-1)
    check_scales(scale, f"DequantizeLinear '{n.name}' input 'scale'")
    zp, dtype = _zero_point(o, n, 2)
    if not _known(o, n.input[0]):
        if scale.size != 1:
            raise Unsupported("per-channel DequantizeLinear of an activation")
        if zp.size and o.type(n.input[0]).dtype is DType.I8 and dtype is DType.U8:
            zp = zp - 128  # the activation was made int8 by our QuantizeLinear
        return [o.add(Op.DEQUANTIZE, [o.v(n.input[0])],
                      {"scale": float(scale[0]), "zero_point": int(zp[0])})]
    q = np.asarray(o.arrays[n.input[0]])
    q, zp, _ = _to_signed(q, zp, DType.from_numpy(q.dtype))
    if scale.size == 1:
        return [o.ctx.dequantized_constant(q, scale, zp[:1], None)]
    axis = int(attributes(n).get("axis", 1)) % q.ndim
    if q.shape[axis] != scale.size:
        raise Unsupported(f"{scale.size} scales for shape {list(q.shape)} along axis {axis}")
    return [o.ctx.dequantized_constant(q, scale, np.broadcast_to(zp, scale.shape), axis)]
