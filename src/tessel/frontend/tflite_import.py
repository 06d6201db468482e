"""The TFLite frontend: a fully-int8 TFLite model -> QDQ Graph IR with the model's own
scales and zero points (lowered to integer IR by `lower_qdq`, no re-quantisation).

    graph = tessel.frontend.tflite_import.import_tflite("model.tflite")

The flatbuffer is read with the `tflite` package's generated schema. Every int8 activation
tensor T (scale s, zero point z) is the IR value `dequantize(quantize(op(...)))` with s and z:
the structure the pt2e import produces, so `lower_qdq` turns each op into its integer form with
the multipliers derived from the TFLite scales (the same (in * w) / out double products as
TFLite). Constant int8 weights are integer constants whose type carries their per-channel
QuantParams, int32 biases likewise; fused activations become `relu` / `clamp` in front of the
quantize (folded into act_min / act_max). The IR is NHWC like TFLite (conv weights OHWI).
Graph inputs and outputs are float: an int8 model input is quantised with its own parameters,
an int8 output dequantised (QUANTIZE / DEQUANTIZE at the edges read the same).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tflite

from tessel.errors import TesselConfigError, TesselFormatError, TesselUnsupportedOpError
from tessel.frontend.context import ImportContext, Unsupported
from tessel.frontend.contract import check_elements, check_scales, node_boundary
from tessel.frontend.importer import drop_dead
from tessel.ir import (
    DType,
    Graph,
    GraphBuilder,
    Op,
    SourceLoc,
    TensorType,
    sanitize_name,
    verify,
)

_TENSOR_DTYPES = {tflite.TensorType.FLOAT32: DType.F32, tflite.TensorType.INT8: DType.I8,
                  tflite.TensorType.INT16: DType.I16, tflite.TensorType.INT32: DType.I32,
                  tflite.TensorType.INT64: DType.I64}
OP_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}

TfliteConverter = Callable[["TfliteContext", "TfOp"], None]
TFLITE_CONVERTERS: dict[int, TfliteConverter] = {}


def tflite_converts(*codes: int) -> Callable[[TfliteConverter], TfliteConverter]:
    def register(fn: TfliteConverter) -> TfliteConverter:
        for code in codes:
            TFLITE_CONVERTERS[code] = fn
        return fn
    return register


@dataclass(frozen=True)
class TfTensor:
    """One tensor of the subgraph: shape, dtype, quantisation, constant data (or None)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: DType
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int
    data: np.ndarray | None

    @property
    def quantized(self) -> bool:
        return bool(self.scales)

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1


@dataclass(frozen=True)
class TfOp:
    """One operator: its builtin code, input / output tensors (None = omitted) and options."""

    code: int
    index: int
    inputs: tuple[TfTensor | None, ...]
    outputs: tuple[TfTensor, ...]
    options: Any

    @property
    def name(self) -> str:
        return f"{OP_NAMES.get(self.code, self.code)}_{self.index}"


@dataclass
class TfliteContext:
    """Builder helpers and tensor index -> IR value (the real, dequantised value)."""

    ctx: ImportContext
    values: dict[int, str] = field(default_factory=dict)

    def value(self, t: TfTensor) -> str:
        """The float IR value of an activation (or of a constant, dequantised)."""
        if t.index in self.values:
            return self.values[t.index]
        if t.data is None:
            raise Unsupported(f"tensor '{t.name}' is used before it is computed")
        self.values[t.index] = self.constant(t)
        return self.values[t.index]

    def constant(self, t: TfTensor, data: np.ndarray | None = None, axis: int | None = None) -> str:
        """A constant tensor in the float domain: an int8 / int32 constant carrying its
        QuantParams read through dequantize (per tensor) or mul(cast(C), scales)."""
        data = t.data if data is None else data
        axis = t.axis if axis is None else axis
        if not t.quantized:
            return self.ctx.const(np.asarray(data, np.float32 if t.dtype is DType.F32 else None),
                                  hint=t.name)
        return self.ctx.dequantized_constant(np.ascontiguousarray(data), np.asarray(t.scales),
                                             np.asarray(t.zero_points),
                                             axis if t.per_channel else None)

    def add(self, op: Op, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        return self.ctx.add(op, inputs, attrs)

    def output(self, t: TfTensor, y: str, activation: int = 0) -> None:
        """Bind output tensor t to `y` after a fused activation and t's quantize / dequantize."""
        y = fused_activation(self, y, activation)
        if t.quantized:
            y = quantize_dequantize(self, y, t)
        self.values[t.index] = y


def quantize_dequantize(tc: TfliteContext, y: str, t: TfTensor) -> str:
    if t.per_channel or t.dtype not in (DType.I8, DType.I16):
        raise Unsupported(f"output tensor '{t.name}' is {t.dtype.value}"
                          f"{' per channel' if t.per_channel else ''} (int8 / int16 per tensor)")
    lo, hi = t.dtype.bounds
    q = tc.add(Op.QUANTIZE, [y], {"scale": t.scales[0], "zero_point": t.zero_points[0],
                                  "qmin": lo, "qmax": hi, "dtype": t.dtype})
    return tc.add(Op.DEQUANTIZE, [q], {"scale": t.scales[0], "zero_point": t.zero_points[0]})


def fused_activation(tc: TfliteContext, y: str, activation: int) -> str:
    """NONE, RELU, RELU_N1_TO_1, RELU6 as relu / clamp; others are unsupported."""
    aft = tflite.ActivationFunctionType
    if activation == aft.NONE:
        return y
    if activation == aft.RELU:
        return tc.add(Op.RELU, [y])
    bounds = {aft.RELU6: (0.0, 6.0), aft.RELU_N1_TO_1: (-1.0, 1.0)}.get(activation)
    if bounds is None:
        raise Unsupported(f"fused activation {activation}")
    return tc.add(Op.CLAMP, [y], {"min": bounds[0], "max": bounds[1]})


def read_model(source: str | Path | bytes) -> tuple[tflite.Model, str]:
    """The flatbuffer Model of a path or bytes; TesselFormatError when it is not one."""
    if isinstance(source, (str, Path)):
        try:
            data = Path(source).read_bytes()
        except FileNotFoundError:
            raise TesselConfigError(f"TFLite model file not found: {source}") from None
        where = str(source)
    else:
        data, where = bytes(source), "the given bytes"
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise TesselFormatError(f"{where}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    with malformed(where):
        model = tflite.Model.GetRootAsModel(data, 0)
        count = model.SubgraphsLength()
    if count != 1:
        raise TesselConfigError(f"{where}: {count} subgraphs (Tessel imports single-subgraph "
                                "models)")
    return model, where


class malformed:  # noqa: N801  (a context manager used like a function)
    """Turn the errors of reading past a truncated / corrupt flatbuffer into TesselFormatError."""

    def __init__(self, where: str):
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> bool:
        if kind is not None and issubclass(kind, (struct.error, IndexError, ValueError,
                                                   TypeError, UnicodeDecodeError, AttributeError,
                                                   KeyError, OverflowError, ZeroDivisionError)):
            # (a table index past the end reads as None: AttributeError on its first field)
            raise TesselFormatError(f"{self.where}: malformed TFLite flatbuffer ({exc})") from None
        if kind is not None and issubclass(kind, Unsupported):
            raise TesselFormatError(f"{self.where}: {exc}") from None
        return False


def _tensor(model: tflite.Model, graph: tflite.SubGraph, index: int) -> TfTensor:
    if not 0 <= index < graph.TensorsLength():
        raise TesselFormatError(f"tensor index {index} is out of range (the subgraph has "
                                f"{graph.TensorsLength()} tensors)")
    t = graph.Tensors(index)
    name = (t.Name() or b"").decode(errors="replace") or f"t{index}"
    if t.Type() not in _TENSOR_DTYPES:
        raise Unsupported(f"tensor '{name}' has TFLite type {t.Type()} (float32, int8, int16, "
                          "int32, int64 import)")
    dtype = _TENSOR_DTYPES[t.Type()]
    q = t.Quantization()
    scales: tuple[float, ...] = ()
    zps: tuple[int, ...] = ()
    axis = 0
    if q is not None and q.ScaleLength() > 0:
        scales = tuple(float(s) for s in q.ScaleAsNumpy())
        zps = tuple(int(z) for z in q.ZeroPointAsNumpy()) if q.ZeroPointLength() else (0,) * len(
            scales)
        axis = int(q.QuantizedDimension())
        check_scales(scales, f"tensor '{name}' field 'quantization.scale'")
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    check_elements(shape, f"tensor '{name}' field 'shape'")
    data = None
    buffer = model.Buffers(t.Buffer())
    if buffer is not None and buffer.DataLength() > 0:
        raw = buffer.DataAsNumpy().tobytes()
        data = np.frombuffer(raw, dtype=dtype.numpy).reshape(shape).copy()
    return TfTensor(index, name, shape, dtype, scales, zps, axis, data)


def import_tflite(source: str | Path | bytes, *, name: str | None = None) -> Graph:
    """The verified QDQ Graph IR of a TFLite model (lower with `tessel.quantize(QDQModule)`)."""
    from tessel.frontend import tflite_ops  # noqa: F401  (registers the converters)

    model, where = read_model(source)
    with malformed(where):
        graph = model.Subgraphs(0)
    default = Path(where).stem if isinstance(source, (str, Path)) else "tflite_model"
    tc = TfliteContext(ImportContext(GraphBuilder(sanitize_name(name or default))))
    cache: dict[int, TfTensor] = {}

    def tensor(i: int) -> TfTensor | None:
        if i < 0:
            return None
        if i not in cache:
            cache[i] = _tensor(model, graph, i)
        return cache[i]

    with malformed(where):
        try:
            for i in graph.InputsAsNumpy():
                _input(tc, tensor(int(i)))
        except Unsupported as exc:
            raise TesselConfigError(f"{where}: model input: {exc}") from None
        unsupported = _walk(model, graph, tc, tensor, cache.get)
        outputs = [tc.values[int(i)] for i in graph.OutputsAsNumpy() if int(i) in tc.values]
    if unsupported:
        raise TesselUnsupportedOpError(unsupported)
    return verify(drop_dead(tc.ctx.builder.build(outputs)))


def _input(tc: TfliteContext, t: TfTensor) -> None:
    """A float graph input; an int8 model input is quantised with its own parameters."""
    if t.dtype not in (DType.F32, DType.I8, DType.I16):
        raise Unsupported(f"'{t.name}' is {t.dtype.value}")
    x = tc.ctx.builder.input(t.name, TensorType(t.shape, DType.F32))
    tc.values[t.index] = quantize_dequantize(tc, x, t) if t.dtype.is_int else x


def _walk(model: tflite.Model, graph: tflite.SubGraph, tc: TfliteContext,
          tensor: Callable[[int], TfTensor | None], cached: Callable[[int], TfTensor | None]
          ) -> list[tuple[str, str]]:
    unsupported: list[tuple[str, str]] = []
    poisoned: set[int] = set()
    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        opcode = model.OperatorCodes(op.OpcodeIndex())
        code = max(int(opcode.BuiltinCode()), int(opcode.DeprecatedBuiltinCode()))
        ins = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
        outs = [int(i) for i in op.OutputsAsNumpy()]
        label = f"{OP_NAMES.get(code, f'builtin {code}')}_{k}"
        tc.ctx.loc = SourceLoc(module=label)
        tc.ctx.hint = label.lower()
        if any(i in poisoned for i in ins):
            poisoned.update(outs)
            continue
        try:
            converter = TFLITE_CONVERTERS.get(code)
            if converter is None:
                raise Unsupported("no converter")
            with node_boundary(f"TFLite operator {k} ({label.rsplit('_', 1)[0]})",
                               (Unsupported,)):
                tf_op = TfOp(code, k, tuple(tensor(i) for i in ins),
                             tuple(tensor(i) for i in outs), _options(op))
                converter(tc, tf_op)
        except Unsupported as exc:
            first = cached(outs[0]) if outs else None
            out_name = first.name if first is not None else ""
            unsupported.append((f"{label.rsplit('_', 1)[0]} ({exc})",
                                f"TFLite operator {k} (output '{out_name}')"))
            poisoned.update(outs)
    return unsupported


def _options(op: tflite.Operator) -> Any:
    """The operator's builtin options table as its generated class (None if absent)."""
    kind = op.BuiltinOptionsType()
    table = op.BuiltinOptions()
    if kind == 0 or table is None:
        return None
    names = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    cls = getattr(tflite, names[kind])
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    return opts


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TFLite's SAME padding (before, after): the extra pixel goes after."""
    if stride < 1 or dilation < 1:
        raise TesselFormatError(f"options: stride {stride}, dilation {dilation} (both must be "
                                ">= 1)")
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def tflite_module(source: str | Path | bytes, *, name: str | None = None, seed: int = 0
                  ) -> tuple[Any, tuple[Any, ...]]:
    """(QDQModule, example inputs) of a TFLite model, ready for `tessel.compile`.

    The example inputs are float values on each input's quantisation grid (int8 levels drawn
    uniformly with `seed`), or standard-normal for a float input with no parameters.
    """
    import torch

    from tessel.frontend.ir_module import QDQModule

    graph = import_tflite(source, name=name)
    rng = np.random.default_rng(seed)
    inputs = []
    for v in graph.inputs:
        check_elements(v.type.shape, f"TFLite input '{v.name}'")
        user = next((n for n in graph.nodes if n.op is Op.QUANTIZE and n.inputs[0] == v.name),
                    None)
        if user is None:
            inputs.append(rng.standard_normal(v.type.shape).astype(np.float32))
            continue
        scale, zp = float(user.attr("scale")), int(user.attr("zero_point"))
        levels = rng.integers(int(user.attr("qmin")), int(user.attr("qmax")) + 1, v.type.shape)
        inputs.append((np.float32(scale) * (levels - zp)).astype(np.float32))
    return QDQModule(graph), tuple(torch.from_numpy(x) for x in inputs)
