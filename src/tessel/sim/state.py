"""The simulated machine's memories and program I/O placement.

Every memory is a zero-initialised numpy ``uint8`` byte array sized from the ``NpuArch``:
one per off-chip memory, the on-chip SRAM, the accumulator (read as little-endian int32) and
the LUT memory (read as little-endian int16); a ``BatchState`` holds n of each. The
instructions' steps reach their operands through views of these (``tessel.sim.hostmem``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessel.arch.types import NpuArch
from tessel.binary.layout import DType as IoDType
from tessel.binary.program import TensorDescriptor, TslProgram
from tessel.errors import TesselConfigError
from tessel.isa.fields import DType

# ISA element types -> little-endian numpy dtypes
NP_DTYPE: dict[DType, np.dtype] = {
    DType.I8: np.dtype("<i1"),
    DType.I16: np.dtype("<i2"),
    DType.I32: np.dtype("<i4"),
}
# .tsl I/O tensor types -> numpy dtypes
IO_DTYPE: dict[IoDType, np.dtype] = {
    IoDType.INT8: np.dtype("<i1"),
    IoDType.UINT8: np.dtype("<u1"),
    IoDType.INT16: np.dtype("<i2"),
    IoDType.INT32: np.dtype("<i4"),
    IoDType.FLOAT16: np.dtype("<f2"),
    IoDType.FLOAT32: np.dtype("<f4"),
}
I32 = np.dtype("<i4")


class Trap(Exception):
    """A data-dependent trap inside an instruction; the executor adds engine and index."""


class MachineState:
    """All memories of one simulated NPU, powered up as zeros."""

    def __init__(self, arch: NpuArch) -> None:
        self.arch = arch
        # np.zeros maps large memories lazily (calloc): untouched pages cost nothing
        try:
            self.offchip = [np.zeros(m.size_bytes, np.uint8) for m in arch.offchip]
            self.sram = np.zeros(arch.onchip.sram_bytes, np.uint8)
            self.acc_bytes = np.zeros(arch.derived.acc_entries * 4, np.uint8)
            self.lut_bytes = np.zeros(arch.onchip.lut_entries * 2, np.uint8)
        except MemoryError:
            raise TesselConfigError(f"simulate: this host cannot map the memories of {arch.name} "
                                    f"({sum(m.size_bytes for m in arch.offchip)} off-chip bytes)"
                                    ) from None
        self.lut = self.lut_bytes.view("<i2")

    batch: int | None = None  # a BatchState simulates several samples at once
    shared: tuple[int, int, int, np.ndarray] | None = None
    pool: Any = None  # host buffers of the instructions' steps (tessel.sim.hostmem.Pool)
    views: dict | None = None  # operand views shared by the steps (hostmem.memory_view)
    bound: dict | None = None  # plans bound to this state (functional.bound_plan)

    def ext_buffer(self, mem: int, lo: int, hi: int) -> np.ndarray:
        """The off-chip memory a DMA reads bytes [lo, hi) of (BatchState: maybe shared)."""
        return self.offchip[mem]


class BatchState(MachineState):
    """The memories of ``n`` simulated NPUs running the same program on different samples:
    every memory is an ``(n, size)`` byte array, so each instruction's operand is one numpy
    view with a leading batch axis (``nd``) and the handlers apply it to all samples at once.

    ``shared``: (memory, start, end, buffer) of a constant block that the program never
    writes: kept once (not ``n`` times), in a 1-D ``buffer`` at its own addresses (the bytes
    below ``start`` are never touched, so never mapped), and DMA loads wholly inside
    [start, end) read it broadcast to every sample.
    Off-chip memories are sized ``extent[mem]`` (the highest byte the program can touch)."""

    def __init__(self, arch: NpuArch, n: int, extents: Sequence[int],
                 shared: tuple[int, int, int, np.ndarray] | None = None) -> None:
        self.arch, self.batch, self.shared = arch, n, shared
        try:
            self.offchip = [np.zeros((n, size), np.uint8) for size in extents]
            self.sram = np.zeros((n, arch.onchip.sram_bytes), np.uint8)
            self.acc_bytes = np.zeros((n, arch.derived.acc_entries * 4), np.uint8)
            self.lut_bytes = np.zeros((n, arch.onchip.lut_entries * 2), np.uint8)
        except MemoryError:
            raise TesselConfigError(f"simulate: this host cannot map the memories of {n} "
                                    f"samples on {arch.name}; use a smaller batch") from None
        self.lut = self.lut_bytes.view("<i2")

    def ext_buffer(self, mem: int, lo: int, hi: int) -> np.ndarray:
        sh = self.shared
        if sh is not None and sh[0] == mem and sh[1] <= lo and hi <= sh[2]:
            return sh[3]  # 1-D: the view has no batch axis and broadcasts
        return self.offchip[mem]


def extent(base: int, shape: Sequence[int], strides: Sequence[int], itemsize: int
           ) -> tuple[int, int]:
    """[lo, hi): the bytes a pattern spans (hi = lo when it is empty)."""
    if not all(shape):
        return base, base
    lo = base + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    hi = base + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True)) + itemsize
    return lo, hi


def surely_disjoint(dims: Sequence[int], strides: Sequence[int], elem: int) -> bool:
    """Fast sufficient test that no two elements of a pattern share a byte.

    Sorting the dimensions by |stride|, each stride must step over everything the inner
    dimensions span. When this says False the caller uses the exact arithmetic test
    (``tessel.isa.footprint.self_overlapping``).
    """
    span = elem
    for n, s in sorted(((n, abs(s)) for n, s in zip(dims, strides, strict=True) if n > 1),
                       key=lambda t: t[1]):
        if s < span:
            return False
        span += s * (n - 1)
    return True


# ---- program I/O -------------------------------------------------------------------------------
def place_constants(state: MachineState, program: TslProgram) -> None:
    """Copy the constant block to its off-chip address (placements already checked)."""
    data = program.constants
    if data and not (state.batch is not None and state.shared is not None):
        at = program.constants_address
        state.offchip[program.constants_memory][..., at:at + len(data)] = \
            np.frombuffer(data, np.uint8)


def write_inputs(state: MachineState, program: TslProgram, inputs: Mapping[str, object]) -> None:
    """Write every input tensor at its descriptor's address; names, dtypes, shapes checked."""
    expected = {d.name for d in program.inputs}
    extra = sorted(set(inputs) - expected)
    if extra:
        raise TesselConfigError(f"simulate: unknown input {extra[0]!r}; the program's inputs "
                                f"are {sorted(expected)}")
    for desc in program.inputs:
        if desc.name not in inputs:
            raise TesselConfigError(f"simulate: input {desc.name!r} is missing")
        write_tensor(state, desc, inputs[desc.name])


def write_tensor(state: MachineState, desc: TensorDescriptor, value: object) -> None:
    """Write one tensor at its descriptor's address; dtype and shape checked."""
    arr = np.asarray(value)
    want = IO_DTYPE[desc.dtype]
    if arr.dtype.newbyteorder("<") != want and arr.dtype != want:
        raise TesselConfigError(f"simulate: input {desc.name!r} must be {want.name} "
                                f"({desc.dtype.name}), got {arr.dtype.name}")
    lead = () if state.batch is None else (state.batch,)
    if tuple(arr.shape) != lead + desc.shape:
        raise TesselConfigError(f"simulate: input {desc.name!r} must have shape "
                                f"{lead + desc.shape}, got {tuple(arr.shape)}")
    raw = np.ascontiguousarray(arr, dtype=want).view(np.uint8).reshape(*lead, -1)
    state.offchip[desc.memory][..., desc.address:desc.address + raw.shape[-1]] = raw


def read_output(state: MachineState, desc: TensorDescriptor) -> np.ndarray:
    """A copy of one output tensor, read from its descriptor's address (a BatchState: with a
    leading batch axis)."""
    dt = IO_DTYPE[desc.dtype]
    raw = state.offchip[desc.memory][..., desc.address:desc.address + desc.nbytes]
    return raw.view(dt).reshape(raw.shape[:-1] + desc.shape).copy()
