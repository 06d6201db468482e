"""The ONNX frontend: an ONNX model (default-domain opset >= 13) -> float Graph IR.

    graph = tessel.frontend.onnx_import.import_onnx("model.onnx")

One walk over the (topologically ordered) nodes. Initializers and `Constant` outputs are known
arrays: they become IR `constant` nodes on first use as a tensor, and shape-like operands
(Reshape's shape, Clip's bounds, Pad's pads, ...) are read from them directly; small shape
computations on known arrays (`Shape -> Gather -> Unsqueeze -> Concat`) fold on the way. Each
node goes through the converter registered for its op type (`onnx_ops.py`); every node that no
converter handles is collected and raised together as one TesselUnsupportedOpError naming the
ONNX nodes. A QDQ model (QuantizeLinear / DequantizeLinear) imports with IR `quantize` /
`dequantize` nodes in the structure the pt2e import produces, so `lower_qdq` keeps its scales.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from tessel.errors import TesselConfigError, TesselFormatError, TesselUnsupportedOpError
from tessel.frontend.context import ImportContext, Unsupported
from tessel.frontend.contract import check_elements, node_boundary
from tessel.frontend.importer import drop_dead
from tessel.ir import DType, Graph, GraphBuilder, Op, SourceLoc, TensorType, sanitize_name, verify

MIN_OPSET = 13
_DEFAULT_DOMAINS = ("", "ai.onnx")

ONNX_DTYPES: dict[int, DType] = {
    onnx.TensorProto.FLOAT: DType.F32, onnx.TensorProto.INT64: DType.I64,
    onnx.TensorProto.INT32: DType.I32, onnx.TensorProto.INT16: DType.I16,
    onnx.TensorProto.INT8: DType.I8, onnx.TensorProto.UINT8: DType.U8,
    onnx.TensorProto.BOOL: DType.BOOL,
}

OnnxConverter = Callable[["OnnxContext", onnx.NodeProto], Sequence[str | np.ndarray | None]]
ONNX_CONVERTERS: dict[str, OnnxConverter] = {}


def onnx_converts(*op_types: str) -> Callable[[OnnxConverter], OnnxConverter]:
    """Register a converter for ONNX op types of the default domain."""
    def register(fn: OnnxConverter) -> OnnxConverter:
        for op_type in op_types:
            ONNX_CONVERTERS[op_type] = fn
        return fn
    return register


def onnx_dtype(elem_type: int) -> DType:
    if elem_type not in ONNX_DTYPES:
        known = {v: k for k, v in onnx.TensorProto.DataType.items()}
        name = known.get(elem_type, f"code {elem_type} (not an ONNX element type)")
        raise Unsupported(f"element type {name} (Tessel supports {sorted(d.value for d in DType)})")
    return ONNX_DTYPES[elem_type]


@dataclass
class OnnxContext:
    """Builder helpers (ImportContext), ONNX tensor name -> IR value, and known arrays."""

    ctx: ImportContext
    opset: int
    values: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def has(self, node: onnx.NodeProto, k: int) -> bool:
        """True if optional input k is given (present and not the empty name)."""
        return len(node.input) > k and node.input[k] != ""

    def v(self, name: str) -> str:
        """The IR value of an ONNX tensor (a known array becomes a constant on first use)."""
        if name in self.values:
            return self.values[name]
        if name in self.arrays:
            array = self.arrays[name]
            if array.dtype == np.float64:
                array = array.astype(np.float32)
            self.values[name] = self.ctx.const(array, hint=name)
            return self.values[name]
        raise Unsupported(f"tensor '{name}' is not defined")

    def array(self, name: str, what: str) -> np.ndarray:
        """A known array (initializer, Constant or folded), or Unsupported naming `what`."""
        if name not in self.arrays:
            raise Unsupported(f"{what} ('{name}') must be a constant")
        return self.arrays[name]

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.arrays and name not in self.values:
            return tuple(int(d) for d in self.arrays[name].shape)
        return self.ctx.shape(self.v(name))

    def type(self, name: str) -> TensorType:
        return self.ctx.type(self.v(name))

    def add(self, op: Op, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        return self.ctx.add(op, inputs, attrs)


def _text(value: str | bytes) -> str:
    """A name field as text (protobuf hands back bytes for a field that is not valid UTF-8)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values (tensors as numpy arrays, bytes as str)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        out[a.name] = value
    return out


def read_model(source: str | Path | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """The ModelProto of a path, serialised bytes or a ModelProto; TesselFormatError if unreadable."""
    if isinstance(source, onnx.ModelProto):
        return source
    what = "the given bytes" if isinstance(source, bytes) else str(source)
    try:
        if isinstance(source, bytes):
            return onnx.load_from_string(source)
        return onnx.load(str(source))
    except FileNotFoundError:
        raise TesselConfigError(f"ONNX model file not found: {source}") from None
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise TesselFormatError(f"{what}: not a readable ONNX model ({type(exc).__name__}: "
                                f"{exc})") from None


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    raise TesselFormatError("ONNX model imports no default-domain opset")


def check_node(node: onnx.NodeProto, opset: int, where: str) -> None:
    """onnx's check of one node against its op's schema (the number of inputs and outputs,
    required attributes and their types) as a TesselFormatError naming the node."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version, ctx.opset_imports = onnx.IR_VERSION, {"": opset}
    try:
        onnx.checker.check_node(node, ctx)
    except Exception as exc:  # noqa: BLE001 - ValidationError, or protobuf on a broken field
        line = next((s.strip() for s in str(exc).splitlines() if s.strip()), type(exc).__name__)
        raise TesselFormatError(f"{where}: {line[:300]}") from None


def import_onnx(source: str | Path | bytes | onnx.ModelProto, *, name: str | None = None) -> Graph:
    """The verified float Graph IR of an ONNX model (outputs in the graph's output order)."""
    model = read_model(source)
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise TesselConfigError(
            f"ONNX opset {opset} is too old: Tessel imports opset >= {MIN_OPSET} (upgrade with "
            f"onnx.version_converter.convert_version(model, {MIN_OPSET}))")
    from tessel.frontend import onnx_ops  # noqa: F401  (registers the converters)

    file = str(source) if isinstance(source, (str, Path)) else ""
    default = Path(file).stem if file else (_text(model.graph.name) or "onnx_model")
    walk = _Walk(model.graph, GraphBuilder(sanitize_name(name or default)), opset, file)
    outputs = walk.run()
    if walk.unsupported:
        raise TesselUnsupportedOpError(walk.unsupported)
    return verify(drop_dead(walk.octx.ctx.builder.build(outputs)))


class _Walk:
    """One pass over an ONNX graph's nodes."""

    def __init__(self, graph: onnx.GraphProto, builder: GraphBuilder, opset: int, file: str):
        self.graph, self.file = graph, file
        self.octx = OnnxContext(ImportContext(builder), opset)
        self.unsupported: list[tuple[str, str]] = []
        self.poisoned: set[str] = set()

    def run(self) -> list[str]:
        for init in self.graph.initializer:
            where = f"ONNX initializer '{init.name}'"
            check_elements(init.dims, where)
            with node_boundary(where):
                array = numpy_helper.to_array(init)
            if array.dtype.kind == "f" and bool(np.isnan(array).any()):
                raise TesselFormatError(f"{where} holds NaN values")
            self.octx.arrays[init.name] = array
        for value in self.graph.input:
            if value.name not in self.octx.arrays:
                self._input(value)
        for index, node in enumerate(self.graph.node):
            self._node(index, node)
        names = []
        for out in self.graph.output:
            if out.name in self.poisoned:
                continue
            try:
                names.append(self.octx.v(out.name))
            except Unsupported as exc:
                self.unsupported.append((f"output '{out.name}'", str(exc)))
        return names

    def _input(self, value: onnx.ValueInfoProto) -> None:
        t = value.type.tensor_type
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise TesselConfigError(
                    f"ONNX input '{value.name}' has a dynamic dimension '{d.dim_param}': Tessel "
                    "compiles static shapes (export with fixed input sizes)")
            dims.append(int(d.dim_value))
        check_elements(dims, f"ONNX input '{value.name}'")
        try:
            dtype = onnx_dtype(t.elem_type)
        except Unsupported as exc:
            raise TesselConfigError(f"ONNX input '{value.name}': {exc}") from None
        self.octx.values[value.name] = self.octx.ctx.builder.input(
            _text(value.name), TensorType(tuple(dims), dtype))

    def _node(self, index: int, node: onnx.NodeProto) -> None:
        label = _text(node.name) or f"{_text(node.op_type)}_{index}"
        ctx = self.octx.ctx
        ctx.loc = SourceLoc(module=label, file=self.file, line=index + 1 if self.file else 0)
        ctx.hint = sanitize_name(_text(node.output[0]) if node.output else label)
        if any(i in self.poisoned for i in node.input):
            self.poisoned.update(node.output)
            return
        converter = ONNX_CONVERTERS.get(node.op_type)
        try:
            if node.domain not in _DEFAULT_DOMAINS or converter is None:
                domain = f"{node.domain}." if node.domain not in _DEFAULT_DOMAINS else ""
                raise Unsupported(f"no converter for {domain}{node.op_type}")
            where = f"ONNX node '{label}' ({node.op_type})"
            check_node(node, self.octx.opset, where)
            with node_boundary(where, (Unsupported,)):
                results = converter(self.octx, node)
        except Unsupported as exc:
            self.unsupported.append((f"{node.op_type} ({exc})", f"ONNX node '{label}'"))
            self.poisoned.update(node.output)
            return
        for out, result in zip(node.output, results, strict=False):
            if isinstance(result, np.ndarray):
                self.octx.arrays[out] = result
            elif result is not None:
                self.octx.values[out] = result


def onnx_module(source: str | Path | bytes | onnx.ModelProto, *, name: str | None = None,
                seed: int = 0) -> tuple[Any, tuple[Any, ...]]:
    """(module, example inputs) of an ONNX model, ready for `tessel.compile` / `tessel.quantize`.

    A float model becomes an `IRModule` (quantised by Tessel as usual); a QDQ model (one with
    QuantizeLinear) a `QDQModule` whose own scales are kept. The example inputs are drawn from
    a standard normal (seeded) in the graph inputs' shapes (integer inputs: zeros).
    """
    import torch

    from tessel.frontend.ir_module import IRModule, QDQModule

    graph = import_onnx(source, name=name)
    quantized = any(n.op is Op.QUANTIZE for n in graph.nodes)
    module = QDQModule(graph) if quantized else IRModule(graph)
    gen = torch.Generator().manual_seed(seed)
    for v in graph.inputs:  # (checked on import; the example inputs are allocated here)
        check_elements(v.type.shape, f"ONNX input '{v.name}'")
    inputs = tuple(torch.randn(v.type.shape, generator=gen) if v.type.dtype is DType.F32 else
                   torch.from_numpy(np.zeros(v.type.shape, v.type.dtype.numpy))
                   for v in graph.inputs)
    return module, inputs
