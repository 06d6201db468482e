"""Tessel's quantised integer graph as a TOSA 1.0 flatbuffer (profile PRO-INT).

`export_tosa(graph)` maps each integer op of the golden model's IR to the TOSA operators that
compute the same integers (`MAPPING`, one table keyed by IR op: only the TOSA modules read it,
so it stays here instead of adding a field to every op definition; its one-to-one part `IR_OF`
serves the importer too). The rules of single layers are here, the longer chains (exact
average pool, upsampling, softmax, LUTs) in `tosa_chains`, the converter's softmax chains that
an imported `qsoftmax_tosa` / `qsoftmax16_tosa` is written back as in `tosa_converter_chains`,
the layer norm and its exact integer inverse square root in `tosa_norm`, the block under
construction in `tosa_build`. The graph's
boundary `quantize` / `dequantize` stay outside: the TOSA graph's inputs are the quantised
input tensors and its outputs the integer tensors the model dequantises (with `cut=True`, the
float host operators before and after them stay outside too).

Numerics (docs/frontend.md, "TOSA in and out"): Tessel's requantisation, TFLite's
MultiplyByQuantizedMultiplier, is a RESCALE with `rounding_mode=DOUBLE_ROUND` (extension
EXT-DOUBLEROUND) and shift `31 - shift`; the act_min / act_max clamp is a CLAMP after it; a
mean divides through its multiplier, so it is a REDUCE_SUM of the zero-point-free inputs and a
RESCALE. A node with the SINGLE rounding (a convolution's or an element-wise op's `rounding`
attribute) writes its RESCALEs with `rounding_mode=SINGLE_ROUND`. What TOSA's integer
profile cannot say is refused: `TesselExportError` naming the node, its op and the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tessel.errors import TesselConfigError, TesselExportError
from tessel.frontend.tosa_build import (
    PROFILE,
    Builder,
    centred,
    loc_of,
    nhwc,
    numpy_dtype,
    refuse,
    same_rank,
    tosa_dtype,
    value_dtype,
    window_pads,
)
from tessel.frontend.tosa_chains import lut, qavg_pool, qsoftmax, upsample
from tessel.frontend.tosa_converter_chains import qsoftmax16_tosa, qsoftmax_tosa
from tessel.frontend.tosa_norm import layer_norm
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import TosaGraph, TosaOp
from tessel.ir import DType, Graph, Node, Op
from tessel.isa.fixedpoint import Rounding
from tessel.ops import Trait, definition
from tessel.ops.quantise import rounding_of


@dataclass
class TosaExport:
    """The exported graph and how its boundary maps to the Tessel graph's."""

    graph: TosaGraph
    inputs: tuple[str, ...]  # the Tessel values fed to the TOSA inputs (quantised inputs)
    outputs: tuple[str, ...]  # the Tessel values the TOSA outputs hold

    def to_bytes(self) -> bytes:
        return self.graph.write()


# ---------------------------------------------------------------- windows


def _qconv2d(b: Builder, node: Node) -> None:
    nhwc(node)
    g = b.graph
    a = node.attr_map
    w = g.constant_value(node.inputs[1])
    if w is None or g.type_of(node.inputs[1]).dtype is not DType.I8:
        raise refuse(node, "the weights must be an int8 constant")
    o, kh, kw, ci = w.shape
    c = g.type_of(node.inputs[0]).shape[3]
    groups = a["groups"]
    x, pads = window_pads(node, b, node.inputs[0], (kh, kw), a["dilation"])
    in_t = b.get(x).dtype
    bias, bias_t, acc_t = _bias(g, node, in_t)
    if groups == 1:
        op, weight = TosaOp.CONV2D, w
    elif groups == c and o == c and ci == 1:
        op, weight = TosaOp.DEPTHWISE_CONV2D, w.transpose(1, 2, 0, 3)  # [KH, KW, C, 1]
    else:
        raise refuse(node, f"grouped convolution ({groups} groups of {ci} channels): TOSA "
                           "has no grouped CONV2D")
    inputs = [x, b.const(f"{node.name}_w", weight, T.INT8), b.const(f"{node.name}_b", bias, bias_t),
              b.zp(f"{node.name}_x", a["in_zp"], in_t), b.zp(f"{node.name}_w", 0, T.INT8)]
    acc = b.op(op, inputs, b.fresh(f"{node.name}_acc"), node.type.shape, acc_t, loc_of(node),
               pad=pads, stride=list(a["stride"]), dilation=list(a["dilation"]),
               local_bound=False, acc_type=int(acc_t))
    _requant_consts(b, node, acc)


def _bias(g: Graph, node: Node, in_t: T) -> tuple[np.ndarray, T, T]:
    """A MAC's bias, its TOSA type and the accumulator's: int32 for int8 inputs; INT48 for an
    int16 input (the wide accumulator, docs/numerics.md)."""
    bias = np.asarray(g.constant_value(node.inputs[2]), np.int64)
    if in_t is T.INT16:
        return bias, T.INT48, T.INT48
    return bias.astype(np.int32), T.INT32, T.INT32


def _requant_consts(b: Builder, node: Node, acc: str) -> None:
    g = b.graph
    mult = np.asarray(g.constant_value(node.inputs[3]), np.int64)
    shift = np.asarray(g.constant_value(node.inputs[4]), np.int64)
    b.requant_out(acc, node, mult, shift, per_channel=mult.size > 1)


def _qlinear(b: Builder, node: Node) -> None:
    """A 1x1 CONV2D over the rows of x (weights [N, K] are already OHWI [N, 1, 1, K])."""
    g = b.graph
    x_t = g.type_of(node.inputs[0])
    w = g.constant_value(node.inputs[1])
    if w is None or g.type_of(node.inputs[1]).dtype is not DType.I8:
        raise refuse(node, "the weights must be an int8 constant")
    n_out, k = w.shape
    rows = int(np.prod(x_t.shape[:-1]))
    x = b.reshape(node.inputs[0], b.fresh(f"{node.name}_rows"), (1, rows, 1, k), loc_of(node))
    a = node.attr_map
    bias, bias_t, acc_t = _bias(g, node, b.get(x).dtype)
    inputs = [x, b.const(f"{node.name}_w", w.reshape(n_out, 1, 1, k), T.INT8),
              b.const(f"{node.name}_b", bias, bias_t),
              b.zp(f"{node.name}_x", a["in_zp"], b.get(x).dtype),
              b.zp(f"{node.name}_w", 0, T.INT8)]
    acc = b.op(TosaOp.CONV2D, inputs, b.fresh(f"{node.name}_acc"), (1, rows, 1, n_out), acc_t,
               loc_of(node), pad=[0, 0, 0, 0], stride=[1, 1], dilation=[1, 1], local_bound=False,
               acc_type=int(acc_t))
    if acc_t is T.INT48:  # TOSA reshapes no INT48 tensor: requantise the rows, then reshape
        y = b.fresh(f"{node.name}_rows")
        _requant_consts(b, node.replace(name=y, type=replace(node.type, shape=(1, rows, 1, n_out))),
                        acc)
        b.reshape(y, node.name, node.type.shape, loc_of(node))
        return
    acc = b.reshape(acc, b.fresh(f"{node.name}_acc"), node.type.shape, loc_of(node))
    _requant_consts(b, node, acc)


def _max_pool(b: Builder, node: Node) -> None:
    nhwc(node)
    if not node.type.dtype.is_int:
        raise refuse(node, "a float max pool (the integer profile pools integers)")
    a = node.attr_map
    dil = tuple(a.get("dilation") or (1, 1))
    if dil != (1, 1):
        raise refuse(node, f"dilation {list(dil)}: MAX_POOL2D has no dilation")
    x, pads = window_pads(node, b, node.inputs[0], a["kernel"], dil)
    b.op(TosaOp.MAX_POOL2D, [x], node.name, node.type.shape, tosa_dtype(node), loc_of(node),
         kernel=list(a["kernel"]), stride=list(a["stride"]), pad=pads, nan_mode=1)


# ---------------------------------------------------------------- element-wise


def _qadd_sub(b: Builder, node: Node) -> None:
    a = node.attr_map
    ls = a["left_shift"]
    xs = []
    for k, key in ((0, "a"), (1, "b")):
        v = same_rank(b, node, node.inputs[k])
        v = centred(b, node, v, a[f"{key}_zp"], ls)
        xs.append(b.rescale(v, b.fresh(f"{node.name}_{key}"), b.get(v).shape, T.INT32,
                            multiplier=a[f"{key}_multiplier"], shift=a[f"{key}_shift"],
                            double_round=rounding_of(a) == Rounding.DOUBLE, loc=loc_of(node)))
    op = TosaOp.ADD if node.op is Op.QADD else TosaOp.SUB
    r = b.op(op, xs, b.fresh(f"{node.name}_r"), node.type.shape, T.INT32, loc_of(node))
    b.requant_out(r, node, a["out_multiplier"], a["out_shift"], per_channel=False)


def _qmul(b: Builder, node: Node) -> None:
    a = node.attr_map
    xs = [centred(b, node, same_rank(b, node, node.inputs[k]), a[f"{key}_zp"], 0)
          for k, key in ((0, "a"), (1, "b"))]
    shift = b.const(f"{node.name}_mshift", np.zeros((1,), np.int8), T.INT8)
    r = b.op(TosaOp.MUL, [*xs, shift], b.fresh(f"{node.name}_r"), node.type.shape, T.INT32,
             loc_of(node))
    b.requant_out(r, node, a["out_multiplier"], a["out_shift"], per_channel=False)


def _requantize(b: Builder, node: Node) -> None:
    """One RESCALE with the input zero point (TOSA takes a zero point on int8 inputs only:
    int16 is centred first)."""
    a = node.attr_map
    x, zp = node.inputs[0], a["in_zp"]
    if zp and b.get(x).dtype is not T.INT8:
        x, zp = centred(b, node, x, zp, 0), 0
    y = b.rescale(x, b.fresh(node.name), node.type.shape, tosa_dtype(node),
                  multiplier=a["multiplier"], shift=a["shift"], in_zp=zp, out_zp=a["out_zp"],
                  loc=loc_of(node))
    b.clamp(y, node.name, a["act_min"], a["act_max"], loc_of(node))


def _qmean(b: Builder, node: Node) -> None:
    a = node.attr_map
    x_t = b.graph.type_of(node.inputs[0])
    v = centred(b, node, node.inputs[0], a["in_zp"], 0)
    shape = list(x_t.shape)
    for ax in sorted({ax % len(shape) for ax in a["axes"]}):
        shape[ax] = 1
        v = b.op(TosaOp.REDUCE_SUM, [v], b.fresh(f"{node.name}_sum"), shape, T.INT32, loc_of(node),
                 axis=ax)
    if tuple(shape) != node.type.shape:
        v = b.reshape(v, b.fresh(f"{node.name}_sum"), node.type.shape, loc_of(node))
    b.requant_out(v, node, a["multiplier"], a["shift"], per_channel=False)


def _qmatmul(b: Builder, node: Node) -> None:
    a = node.attr_map
    g = b.graph
    sa, sb = g.type_of(node.inputs[0]).shape, g.type_of(node.inputs[1]).shape
    if sa[:-2] != sb[:-2]:
        raise refuse(node, "broadcast batch dimensions (TOSA MATMUL takes equal batches)")
    batch = int(np.prod(sa[:-2]))
    x = b.reshape(node.inputs[0], b.fresh(node.name), (batch, *sa[-2:]), loc_of(node))
    y = b.reshape(node.inputs[1], b.fresh(node.name), (batch, *sb[-2:]), loc_of(node))
    in_t = b.get(x).dtype
    acc = b.op(TosaOp.MATMUL, [x, y, b.zp(f"{node.name}_a", a["a_zp"], in_t),
                               b.zp(f"{node.name}_b", a["b_zp"], b.get(y).dtype)],
               b.fresh(f"{node.name}_acc"), (batch, sa[-2], sb[-1]), T.INT32, loc_of(node))
    acc = b.reshape(acc, b.fresh(f"{node.name}_acc"), node.type.shape, loc_of(node))
    b.requant_out(acc, node, a["multiplier"], a["shift"], per_channel=False)


# ---------------------------------------------------------------- data movement


def _reshape(b: Builder, node: Node) -> None:
    tosa_dtype(node)
    b.reshape(node.inputs[0], node.name, node.type.shape, loc_of(node))


def _transpose(b: Builder, node: Node) -> None:
    b.op(TosaOp.TRANSPOSE, [node.inputs[0]], node.name, node.type.shape, tosa_dtype(node),
         loc_of(node), perms=list(node.attr("perm")))


def _concat(b: Builder, node: Node) -> None:
    axis = node.attr("axis") % len(node.type.shape)
    b.op(TosaOp.CONCAT, list(node.inputs), node.name, node.type.shape, tosa_dtype(node),
         loc_of(node), axis=axis)


def _slice(b: Builder, node: Node) -> None:
    a = node.attr_map
    if a["step"] != 1:
        raise refuse(node, f"step {a['step']}: TOSA SLICE takes contiguous ranges")
    shape = b.graph.type_of(node.inputs[0]).shape
    axis = a["axis"] % len(shape)
    start = [0] * len(shape)
    start[axis] = range(shape[axis])[slice(a["start"], a["end"])].start if node.type.shape[axis] \
        else 0
    b.op(TosaOp.SLICE, [node.inputs[0], b.shape(f"{node.name}_start", start),
                        b.shape(f"{node.name}_size", node.type.shape)], node.name,
         node.type.shape, tosa_dtype(node), loc_of(node))


def _pad(b: Builder, node: Node) -> None:
    dtype = tosa_dtype(node)
    value = node.attr("value")
    if value != int(value):
        raise refuse(node, f"pad value {value} is not an integer")
    b.op(TosaOp.PAD, [node.inputs[0], b.shape(f"{node.name}_pads", node.attr("pads")),
                      b.const(f"{node.name}_value", np.array([int(value)], numpy_dtype(dtype)),
                              dtype)],
         node.name, node.type.shape, dtype, loc_of(node))


_Rule = Callable[[Builder, Node], None]
# the IR ops that are one TOSA operator both ways (the importer builds them from this table)
IR_OF: Mapping[TosaOp, Op] = {
    TosaOp.RESHAPE: Op.RESHAPE, TosaOp.TRANSPOSE: Op.TRANSPOSE, TosaOp.CONCAT: Op.CONCAT,
    TosaOp.SLICE: Op.SLICE, TosaOp.PAD: Op.PAD, TosaOp.MAX_POOL2D: Op.MAX_POOL2D,
    TosaOp.TABLE: Op.LUT, TosaOp.RESIZE: Op.UPSAMPLE_NEAREST,
}
MAPPING: Mapping[Op, _Rule] = {
    Op.QCONV2D: _qconv2d, Op.QLINEAR: _qlinear, Op.QMATMUL: _qmatmul, Op.QADD: _qadd_sub,
    Op.QSUB: _qadd_sub, Op.QMUL: _qmul, Op.REQUANTIZE: _requantize, Op.QMEAN: _qmean,
    Op.QAVG_POOL2D: qavg_pool, Op.QSOFTMAX: qsoftmax, Op.QSOFTMAX_TOSA: qsoftmax_tosa,
    Op.QSOFTMAX16_TOSA: qsoftmax16_tosa, Op.QLAYER_NORM: layer_norm,
    **{IR_OF[t]: rule for t, rule in ((TosaOp.RESHAPE, _reshape), (TosaOp.TRANSPOSE, _transpose),
                                      (TosaOp.CONCAT, _concat), (TosaOp.SLICE, _slice),
                                      (TosaOp.PAD, _pad), (TosaOp.MAX_POOL2D, _max_pool),
                                      (TosaOp.TABLE, lut), (TosaOp.RESIZE, upsample))},
}
REFUSED: Mapping[Op, str] = {
    Op.HOST: "an op the compiler runs on the host has no TOSA form",
}


def export_tosa(graph: Graph, *, cut: bool = False) -> TosaExport:
    """The TOSA graph of an integer graph (`QuantizedModel.graph`); TesselExportError for an op
    TOSA's integer profile cannot express, naming the op and why.

    `cut=True` exports the integer part alone: float operators in front of the model's
    `quantize` nodes and after its `dequantize` nodes (a host prologue such as an embedding
    lookup, a host epilogue such as pooling and normalisation in float) stay outside; the TOSA
    inputs are the values those `quantize` nodes produce, the outputs the integer values the
    `dequantize` nodes read."""
    b = Builder(graph)
    inputs, outputs = _cut(graph) if cut else _boundary(graph)
    for name in inputs:
        b.tensor(name, graph.type_of(name).shape, value_dtype(graph, name))
    for node in graph.nodes:
        if node.is_constant or _boundary_op(node) or (cut and not node.type.dtype.is_int):
            if node.is_constant and not node.type.dtype.is_int and not cut:
                raise refuse(node, "a float constant (the integer profile holds integers)")
            continue
        rule = MAPPING.get(node.op)
        if rule is None:
            reason = REFUSED.get(node.op, "no TOSA mapping (not an integer op of the golden "
                                          "model, or a float op the quantiser left)")
            raise refuse(node, reason)
        rule(b, node)
    tosa = TosaGraph(b.ops, b.tensors, b.shapes, list(inputs), list(outputs), PROFILE,
                     tuple(sorted(b.extensions)))
    return TosaExport(tosa, inputs, outputs)


def _boundary(graph: Graph) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The integer values a TOSA graph exchanges: each quantised graph input (a float input
    read only by `quantize` nodes, or an integer input) and each graph output (before its
    `dequantize`)."""
    users = graph.users
    inputs: list[str] = []
    for v in graph.inputs:
        if v.type.dtype.is_int:
            inputs.append(v.name)
            continue
        readers = users.get(v.name, ())
        if not readers or not all(_boundary_op(n) for n in readers):
            bad = next((n for n in readers if not _boundary_op(n)), None)
            what = f"read by {bad.described()} ({bad.op.value})" if bad else "unused"
            raise TesselExportError(f"TOSA export: float input %{v.name} is {what}; the TOSA "
                                    "graph takes the quantised inputs only")
        inputs.extend(n.name for n in readers)
    outputs = []
    for name in graph.outputs:
        node = graph.producer(name)
        outputs.append(node.inputs[0] if node is not None and _boundary_op(node) else name)
    return tuple(inputs), tuple(outputs)


def _cut(graph: Graph) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The integer part's boundary: every `quantize` result (and each integer graph input that
    an integer op reads) in, the integer value of every `dequantize` (and each integer graph
    output) out."""
    users = graph.users
    inputs = [v.name for v in graph.inputs if v.type.dtype.is_int
              and any(n.type.dtype.is_int and not _boundary_op(n) for n in users.get(v.name, ()))]
    outputs: list[str] = []
    for node in graph.nodes:
        if _boundary_op(node) and node.type.dtype.is_int:
            inputs.append(node.name)
        elif _boundary_op(node) and node.inputs[0] not in outputs:
            outputs.append(node.inputs[0])
    outputs += [n for n in graph.outputs if graph.type_of(n).dtype.is_int and n not in outputs]
    return tuple(inputs), tuple(outputs)


def _boundary_op(node: Node) -> bool:
    """The model's boundary `quantize` / `dequantize` (outside the TOSA graph)."""
    return definition(node.op).has(Trait.BOUNDARY)


def mlir_text(path: str | Path) -> str:
    """The TOSA MLIR text of a .tosa file, through `tosa-opt --tosa-deserialize` (the
    exporter writes flatbuffers itself; only this text form needs the tool)."""
    tool = shutil.which("tosa-opt") or _beside_python("tosa-opt")
    if tool is None:
        raise TesselConfigError("MLIR text needs tosa-opt on PATH (pip install tosa-tools)")
    with tempfile.NamedTemporaryFile("w", suffix=".mlir") as empty:
        done = subprocess.run([tool, f"--tosa-deserialize=tosa-flatbuffer-filename={path}",
                               empty.name], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TesselExportError(f"tosa-opt could not read {path}: {done.stderr.strip()[:500]}")
    # the serialisation library prints its version notes to stdout, between the MLIR lines
    return "".join(line for line in done.stdout.splitlines(keepends=True)
                   if not line.startswith(("WARNING:", "INFO:")))


def _beside_python(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else None
