"""What op emitters need to know about memory: where each tensor lives in DRAM, the constant
pool (weights pre-tiled in read order), and a per-step SRAM / accumulator allocator."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessel.arch import NpuArch
from tessel.errors import TesselCompileError
from tessel.ir import DType, Graph, Node
from tessel.isa.fields import DType as IsaDType

ALIGN = 16  # bytes: every SRAM region and DRAM tensor starts on a 16-byte boundary

ISA_DTYPE = {DType.I8: IsaDType.I8, DType.I16: IsaDType.I16, DType.I32: IsaDType.I32}


def require_int4(node: Node, ctx: CodegenContext) -> None:
    """Refuse a node with int4 weights on an NPU without the int4 decoder, naming the fix."""
    if not ctx.arch.matrix.int4_weights:
        raise TesselCompileError(
            f"{node} at {node.loc}: int4 weights, but {ctx.arch.name} has no int4 weight decoder "
            "(matrix.int4_weights = false); quantise this layer's weights to int8 "
            "(--layer-weights PATTERN=int8, LayerOverride(weights=WeightDtype.INT8))")


def align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class DramTensor:
    """A tensor in off-chip memory: row-major (C order) from `address`, `itemsize` bytes each."""

    memory: int
    address: int
    shape: tuple[int, ...]
    dtype: DType

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def strides(self) -> tuple[int, ...]:
        """Byte strides of each dim (C order)."""
        out, acc = [], self.itemsize
        for d in reversed(self.shape):
            out.append(acc)
            acc *= d
        return tuple(reversed(out))


@dataclass(frozen=True)
class StepConstants:
    """What one step reads from the constant pool: its blobs (pre-tiled weights, parameter
    tables, LUT tables, constant operands) in the order its program reads them. An emitter's
    `constants(node, mapping, ctx)` builds it without touching the pool; `ConstPool.place`
    appends it."""

    blobs: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class PlacedConstants:
    """Where a step's constants were placed: `addresses[k]` is the pool address of blob k of
    its StepConstants. An emitter's `step(node, mapping, ctx, placed)` reads them; placed=None
    (estimation: the instructions are costed, never run) reads address 0 for every blob."""

    addresses: tuple[int, ...]


def const_addresses(placed: PlacedConstants | None, count: int) -> tuple[int, ...]:
    """The `count` addresses of a step's constant blobs: `placed`'s, or 0s when estimating."""
    if placed is None:
        return (0,) * count
    if len(placed.addresses) != count:
        raise ValueError(f"{len(placed.addresses)} placed constants for a step that reads "
                         f"{count}")
    return placed.addresses


@dataclass
class ConstPool:
    """Constant bytes in the weights memory, appended in the order the program reads them."""

    memory: int
    blob: bytearray = field(default_factory=bytearray)

    def add(self, data: bytes | np.ndarray) -> int:
        """Append (16-byte aligned); returns the address of the first byte."""
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        self.blob.extend(b"\0" * (align(len(self.blob)) - len(self.blob)))
        addr = len(self.blob)
        self.blob.extend(raw)
        return addr

    def place(self, consts: StepConstants) -> PlacedConstants:
        """Append a step's blobs in read order (each 16-byte aligned); their addresses."""
        return PlacedConstants(tuple(self.add(b) for b in consts.blobs))


@dataclass
class SramPlan:
    """Bump allocation of one step's SRAM and accumulator regions (a step starts empty)."""

    arch: NpuArch
    what: str  # the step, for error messages
    sram_used: int = 0
    acc_used: int = 0

    def sram(self, nbytes: int, name: str) -> int:
        addr = align(self.sram_used)
        self.sram_used = addr + nbytes
        if self.sram_used > self.arch.onchip.sram_bytes:
            raise TesselCompileError(
                f"{self.what}: SRAM region '{name}' of {nbytes} bytes does not fit: "
                f"{self.sram_used} > {self.arch.onchip.sram_bytes} bytes of SRAM")
        return addr

    def acc(self, entries: int, name: str) -> int:
        addr = self.acc_used
        self.acc_used += entries
        if self.acc_used > self.arch.onchip.acc_bytes // 4:
            raise TesselCompileError(
                f"{self.what}: accumulator region '{name}' of {entries} entries does not fit: "
                f"{self.acc_used} > {self.arch.onchip.acc_bytes // 4}")
        return addr


@dataclass
class CodegenContext:
    """Shared by all emitters of one program."""

    arch: NpuArch
    graph: Graph
    dram: dict[str, DramTensor]
    consts: ConstPool
    act_memory: int
    _scopes: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def memo(self, key: object, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per ``key`` in this context (a decision an emitter takes from
        the constants, asked for by every candidate mapping)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def cost_scope(self, unit: object) -> object:
        """A token of `unit` (a node or a fused chain) in this context, the same object every
        time: an emitter's steps of `unit` built here carry it as `StepWork.cost_scope`, so
        the estimates of a search's candidates share the costs of tiles with equal keys."""
        got = self._scopes.get(id(unit))
        if got is None or got[0] is not unit:  # (the unit is kept: its id stays its own)
            got = self._scopes[id(unit)] = (unit, object())
        return got[1]

    def tensor(self, name: str) -> DramTensor:
        return self.dram[name]

    def const(self, name: str) -> np.ndarray:
        value = self.graph.constant_value(name)
        if value is None:
            raise TesselCompileError(f"%{name} must be a constant for the NPU")
        return value
