"""The importer's working state and the converter registry.

A converter turns one exported ATen node into IR values: `fn(ctx, node, args) -> result` where
`args` is the node's arguments bound by name to the op schema (defaults filled in) and the
result is an IR value name, a tuple of them (multi-output ops; None for outputs not imported),
or `ctx.passthrough(x)` for ops that vanish. A converter that meets a case it cannot import
raises `Unsupported(reason)`; the importer then reports the node (or makes it a host op).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx

from tessel.ir import UNKNOWN_LOC, DType, GraphBuilder, Op, QuantParams, SourceLoc, TensorType


class Unsupported(Exception):
    """A node (or one use of an op) that the IR cannot express; the message says why."""


Converter = Callable[["ImportContext", torch.fx.Node, dict[str, Any]], Any]
CONVERTERS: dict[Any, Converter] = {}

TORCH_DTYPES: dict[torch.dtype, DType] = {
    torch.float32: DType.F32, torch.int64: DType.I64, torch.int32: DType.I32,
    torch.int16: DType.I16, torch.int8: DType.I8, torch.uint8: DType.U8, torch.bool: DType.BOOL,
}


def converts(*targets: Any) -> Callable[[Converter], Converter]:
    """Register a converter for each ATen overload (or OpOverloadPacket: all its overloads)."""
    def register(fn: Converter) -> Converter:
        for target in targets:
            if isinstance(target, torch._ops.OpOverloadPacket):
                for overload in target.overloads():
                    if not overload.endswith("out"):  # out= variants never appear in exports
                        CONVERTERS[getattr(target, overload)] = fn
            else:
                CONVERTERS[target] = fn
        return fn
    return register


def ir_dtype(dtype: torch.dtype) -> DType:
    if dtype not in TORCH_DTYPES:
        raise Unsupported(f"dtype {dtype} (Tessel supports {sorted(d.value for d in DType)})")
    return TORCH_DTYPES[dtype]


def bind_args(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, with schema defaults for the omitted ones."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {f"arg{i}": a for i, a in enumerate(node.args)} | dict(node.kwargs)
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        else:
            bound[arg.name] = arg.default_value if arg.has_default_value() else None
    return bound


@dataclass(frozen=True)
class _Def:
    """What the importer itself emitted for a value (to fold reshape/transpose chains)."""

    op: Op
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]


@dataclass
class ImportContext:
    """Builder, fx-node -> IR value map, and the location of the node being converted."""

    builder: GraphBuilder
    env: dict[torch.fx.Node, Any] = field(default_factory=dict)
    defs: dict[str, _Def] = field(default_factory=dict)
    loc: SourceLoc = UNKNOWN_LOC
    hint: str = "v"
    names: list[str] = field(default_factory=list)  # names for the next ops added (in order)

    # ------------------------------------------------------------ values
    def v(self, arg: Any) -> str:
        """The IR value of a tensor argument."""
        if not isinstance(arg, torch.fx.Node):
            raise Unsupported(f"expected a tensor argument, got {type(arg).__name__} {arg!r}")
        value = self.env.get(arg)
        if not isinstance(value, str):
            raise Unsupported(f"argument %{arg.name} is not an imported tensor")
        return value

    def type(self, name: str) -> TensorType:
        return self.builder.type_of(name)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.builder.type_of(name).shape

    @staticmethod
    def out_meta(node: torch.fx.Node) -> tuple[tuple[int, ...], DType]:
        """Static (shape, dtype) of a single-tensor node from node.meta['val']."""
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise Unsupported("result is not a single tensor")
        try:
            shape = tuple(int(d) for d in val.shape)
        except TypeError as exc:
            raise Unsupported(f"dynamic shape {list(val.shape)}") from exc
        return shape, ir_dtype(val.dtype)

    # ------------------------------------------------------------ emitting
    def add(self, op: Op, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None,
            hint: str | None = None) -> str:
        if hint is None and self.names:
            hint = self.names.pop(0)
        name = self.builder.add(op, list(inputs), attrs or {}, name=hint or self.hint, loc=self.loc)
        self.defs[name] = _Def(op, tuple(inputs), dict(attrs or {}))
        return name

    def const(self, array: np.ndarray, hint: str | None = None,
              loc: SourceLoc | None = None) -> str:
        name = self.builder.constant(array, name=hint or self.hint + "_const",
                                     loc=self.loc if loc is None else loc)
        self.defs[name] = _Def(Op.CONSTANT, (), {})
        return name

    def scalar(self, value: float | int | bool, dtype: DType) -> str:
        """A rank-0 constant holding `value` in `dtype`."""
        return self.const(np.asarray(value).astype(dtype.numpy), hint=self.hint + "_scalar")

    def operand(self, arg: Any, dtype: DType) -> str:
        """A tensor argument cast to `dtype`, or a Python number as a constant of `dtype`."""
        if isinstance(arg, torch.fx.Node):
            return self.cast(self.v(arg), dtype)
        if isinstance(arg, (bool, int, float)):
            return self.scalar(arg, dtype)
        raise Unsupported(f"operand {arg!r} is neither a tensor nor a number")

    def scaled(self, x: str, factor: float, dtype: DType) -> str:
        """x * factor (a scalar of `dtype`); x itself for a factor of 1."""
        return x if factor == 1 else self.add(Op.MUL, [x, self.scalar(factor, dtype)])

    def square(self, x: str) -> str:
        return self.add(Op.MUL, [x, x])

    def dequantized_constant(self, q: np.ndarray, scales: np.ndarray, zero_points: np.ndarray,
                             axis: int | None, dtype: DType | None = None) -> str:
        """An integer constant read in the float domain, the form every importer writes (and
        the lowering reads back, tessel.ops.quantise.int_weight): dequantize(C) for one scale;
        for per-channel scales along `axis`, mul(cast(C), scales) (after a zero-point sub),
        the constant's type carrying its QuantParams. `dtype`: its element type when it is
        narrower than what `q` holds (I4 in an int8 array)."""
        scales = np.asarray(scales, np.float64).reshape(-1)
        zps = np.broadcast_to(np.asarray(zero_points, np.int64).reshape(-1), scales.shape)
        quant = QuantParams(tuple(float(s) for s in scales), tuple(int(z) for z in zps), axis)
        if axis is None:
            return self.add(Op.DEQUANTIZE, [self.quantized_constant(q, quant, dtype)],
                            {"scale": float(scales[0]), "zero_point": int(zps[0])})
        x = self.add(Op.CAST, [self.quantized_constant(q, quant, dtype)], {"dtype": DType.F32})
        bshape = [1] * q.ndim
        bshape[axis] = scales.size
        if np.any(zps):
            x = self.add(Op.SUB, [x, self.const(zps.astype(np.float32).reshape(bshape))])
        return self.add(Op.MUL, [x, self.const(scales.astype(np.float32).reshape(bshape))])

    def quantized_constant(self, q: np.ndarray, quant: QuantParams, dtype: DType | None = None
                           ) -> str:
        """An integer constant whose type carries `quant` (`dtype`: as dequantized_constant)."""
        type_ = TensorType(tuple(int(d) for d in q.shape), dtype or DType.from_numpy(q.dtype),
                           quant=quant)
        return self.builder.constant(q, name=self.hint + "_int", loc=self.loc, type_=type_)

    # ------------------------------------------------------------ data movement, folded
    def cast(self, x: str, dtype: DType) -> str:
        return x if self.type(x).dtype is dtype else self.add(Op.CAST, [x], {"dtype": dtype})

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        """reshape(x, shape); a reshape of a reshape reads the first one's input."""
        shape = tuple(int(d) for d in shape)
        if self.shape(x) == shape:
            return x
        d = self.defs.get(x)
        if d is not None and d.op is Op.RESHAPE:
            return self.reshape(d.inputs[0], shape)
        return self.add(Op.RESHAPE, [x], {"shape": shape})

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        """transpose(x, perm); transposes compose, identities vanish."""
        rank = len(self.shape(x))
        perm = tuple(int(p) % rank for p in perm) if rank else ()
        d = self.defs.get(x)
        if d is not None and d.op is Op.TRANSPOSE:
            inner = d.attrs["perm"]
            return self.transpose(d.inputs[0], [inner[p] for p in perm])
        if perm == tuple(range(rank)):
            return x
        return self.add(Op.TRANSPOSE, [x], {"perm": perm})

    def expand(self, x: str, shape: Sequence[int]) -> str:
        shape = tuple(int(d) for d in shape)
        if self.shape(x) == shape:
            return x
        d = self.defs.get(x)
        if d is not None and d.op is Op.EXPAND:
            return self.expand(d.inputs[0], shape)
        return self.add(Op.EXPAND, [x], {"shape": shape})


def normalize_dims(dims: Any, rank: int) -> tuple[int, ...]:
    """Reduction dims as sorted non-negative ints; None or [] means every dim."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({int(d) % max(rank, 1) for d in dims}))
