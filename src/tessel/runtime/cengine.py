"""The C engine: a .tsl binary loaded by the C runtime (libtessel) and run on the C NPU model,
through ctypes (`tessel run --engine c`, the tests that compare it with the Python simulator).

    engine = CEngine(binary_bytes, arch)      # TesselFormatError when the C loader refuses it
    outputs = engine.run(*inputs)             # numpy arrays, in the model's output order

Load failures name the rule of docs/binary-format.md that failed (the C runtime's status code,
docs/runtime.md) with the byte offset, section and name the runtime reports.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from tessel.errors import TesselConfigError, TesselFormatError, TesselSimError


class Engine(StrEnum):
    """What runs a binary: the Python simulator (host parts by the golden kernels), or the C
    runtime (libtessel, its host kernels) on the C NPU model."""

    PYTHON = "python"
    C = "c"


def engine_of(value: Engine | str) -> Engine:
    """`value` as an Engine; TesselConfigError naming the choices otherwise."""
    try:
        return Engine(value)
    except ValueError:
        raise TesselConfigError(f"unknown engine {value!r}; choose from "
                                f"{', '.join(e.value for e in Engine)}") from None


MAX_RANK = 8
MEMORIES = 8
NPU_TRAP, NPU_DEADLOCK, HOST_RUNTIME = 143, 144, 145
RUN_CODES = {NPU_TRAP, NPU_DEADLOCK, HOST_RUNTIME}
DTYPES = {1: np.dtype("<i1"), 2: np.dtype("<u1"), 3: np.dtype("<i2"), 4: np.dtype("<i4"),
          5: np.dtype("<f2"), 6: np.dtype("<f4"), 7: np.dtype("<i8"), 8: np.dtype("bool")}
ENGINES = ("DMA_IN", "MATRIX", "VECTOR", "DMA_OUT")


class Error(ctypes.Structure):
    """tsl_error (tessel/tessel.h)."""

    _fields_ = [("code", ctypes.c_int), ("offset", ctypes.c_uint64), ("section", ctypes.c_int32),
                ("index", ctypes.c_int32), ("engine", ctypes.c_int32),
                ("name_ptr", ctypes.c_void_p), ("name_len", ctypes.c_uint32),
                ("name_json", ctypes.c_uint8)]


class Target(ctypes.Structure):
    """tsl_target."""

    _fields_ = [("arch_hash", ctypes.c_char_p), ("memory_count", ctypes.c_uint32),
                ("memory_size", ctypes.c_uint64 * MEMORIES)]


class SimConfig(ctypes.Structure):
    """tsl_sim_config (tessel/tessel_sim.h)."""

    _fields_ = [("sram_bytes", ctypes.c_uint32), ("acc_entries", ctypes.c_uint32),
                ("lut_entries", ctypes.c_uint32), ("offchip_count", ctypes.c_uint32),
                ("offchip_size", ctypes.c_uint64 * MEMORIES), ("wdecoder", ctypes.c_uint32),
                ("sparse", ctypes.c_uint32)]


_P, _U32, _U64, _I = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "tslh_source_hash": (ctypes.c_char_p, []),
    "tslh_model_size": (ctypes.c_size_t, []),
    "tslh_status_text": (ctypes.c_char_p, [_I]),
    "tslh_error_name": (_I, [ctypes.POINTER(Error), ctypes.c_char_p, ctypes.c_size_t]),
    "tslh_check": (_I, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Target),
                        ctypes.POINTER(Error), ctypes.POINTER(_U64)]),
    "tslh_open": (_P, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Target),
                       ctypes.POINTER(SimConfig), ctypes.POINTER(Error), ctypes.POINTER(_I)]),
    "tslh_close": (None, [_P]),
    "tslh_count": (_U32, [_P, _I]),
    "tslh_info": (_I, [_P, _I, _U32, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_I),
                       ctypes.POINTER(_I), ctypes.POINTER(_U32), ctypes.POINTER(_I),
                       ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_int64)]),
    "tslh_data": (_P, [_P, _I, _U32]),
    "tslh_nbytes": (_U64, [_P, _I, _U32]),
    "tslh_invoke": (_I, [_P, ctypes.POINTER(Error)]),
    "tslh_trap": (ctypes.c_char_p, [_P]),
    "tslh_arena_size": (_U64, [_P]),
    "tslh_executed": (_U64, [_P]),
    "tslh_macs": (_U64, [_P]),
    "tsl_sim_memory_size": (ctypes.c_size_t, [ctypes.POINTER(SimConfig)]),
    "tslh_sim_run": (_I, [ctypes.POINTER(SimConfig), _I, ctypes.c_char_p, ctypes.c_size_t, _U32,
                          _P, _P, _P, _P, _U64, ctypes.POINTER(ctypes.c_int32),
                          ctypes.POINTER(ctypes.c_char_p)]),
}


_LIB: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The C runtime's shared library (built on first use: tessel.runtime.cbuild)."""
    global _LIB
    if _LIB is None:
        from tessel.runtime.cbuild import library

        handle = ctypes.CDLL(str(library()))
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype, fn.argtypes = restype, argtypes
        _LIB = handle
    return _LIB


def available() -> str | None:
    """None when the C engine can run here, else the one-line reason it cannot."""
    try:
        lib()
    except TesselConfigError as exc:
        return str(exc)
    return None


def describe(err: Error) -> str:
    """The C runtime's error as one line: the rule, and where."""
    text = lib().tslh_status_text(err.code).decode()
    parts = [f"C runtime: {text} (code {err.code})"]
    if err.offset != 2**64 - 1:
        parts.append(f"at byte {err.offset}")
    if err.section >= 0:
        parts.append(f"section {err.section}")
    if err.engine >= 0:
        parts.append(f"engine {ENGINES[err.engine] if err.engine < 4 else err.engine}")
    if err.index >= 0:
        parts.append(f"index {err.index}")
    if err.name_ptr:
        buf = ctypes.create_string_buffer(4096)
        if lib().tslh_error_name(ctypes.byref(err), buf, len(buf)) >= 0:
            parts.append(f"name {buf.value.decode(errors='replace')!r}")
    return ", ".join(parts)


def target_of(arch: Any) -> Target:
    t = Target()
    t.arch_hash = bytes(arch.arch_hash_bytes)
    t.memory_count = len(arch.offchip)
    for i, m in enumerate(arch.offchip[:MEMORIES]):
        t.memory_size[i] = int(m.size_bytes)
    return t


def sim_config(arch: Any) -> SimConfig:
    c = SimConfig()
    c.sram_bytes = int(arch.onchip.sram_bytes)
    c.acc_entries = int(arch.derived.acc_entries)
    c.lut_entries = int(arch.onchip.lut_entries)
    c.offchip_count = len(arch.offchip)
    for i, m in enumerate(arch.offchip[:MEMORIES]):
        c.offchip_size[i] = int(m.size_bytes)
    c.wdecoder = int(arch.wdecoder.enabled)
    c.sparse = int(arch.sparse.enabled)
    return c


def check(data: bytes, arch: Any = None) -> tuple[int, Error, int]:
    """(status code, error, arena size) of the C loader on `data` (0: accepted)."""
    err, size = Error(), _U64(0)
    target = ctypes.byref(target_of(arch)) if arch is not None else None
    code = lib().tslh_check(data, len(data), target, ctypes.byref(err), ctypes.byref(size))
    return code, err, size.value


def check_host_memory(data: bytes, arch: Any) -> None:
    """TesselConfigError, before the C runtime allocates anything for `data`, if its arena (the
    off-chip bytes the program can touch, its I/O tensors) and the C NPU model's memories exceed
    the simulator's host-memory budget (`tessel.sim.budget`). A binary the C loader refuses
    passes here: opening it reports the loader's reason."""
    from tessel.sim.budget import ENV, budget_bytes

    code, _, arena = check(data, arch)
    if code:
        return
    need = arena + len(data) + int(lib().tsl_sim_memory_size(ctypes.byref(sim_config(arch))))
    budget = budget_bytes()
    if need > budget:
        raise TesselConfigError(
            f"C runtime: this program needs {need} bytes of host memory ({need >> 20} MiB: its "
            f"arena of {arena} bytes, the NPU model's memories), more than the simulator's "
            f"budget of {budget >> 20} MiB (set {ENV} to raise it)")


def run_queue(arch: Any, engine: int, stream: bytes, count: int, sram: np.ndarray,
              acc: np.ndarray, lut: np.ndarray, ext: np.ndarray) -> tuple[int, int, str]:
    """Run `count` encoded instructions of one engine on the C NPU model over the given memories
    (uint8 arrays: SRAM, accumulator bytes, LUT bytes, off-chip memory 0 from address 0),
    updated in place. Returns (status, index of the trapping instruction or -1, reason)."""
    index, trap = ctypes.c_int32(-1), ctypes.c_char_p()
    arrays = [np.ascontiguousarray(a, np.uint8) for a in (sram, acc, lut, ext)]
    for a, b in zip(arrays, (sram, acc, lut, ext), strict=True):
        if a is not b:
            raise TesselConfigError("run_queue: memories must be contiguous uint8 arrays")
    code = lib().tslh_sim_run(ctypes.byref(sim_config(arch)), engine, stream, len(stream), count,
                              *(a.ctypes.data for a in arrays), ext.size, ctypes.byref(index),
                              ctypes.byref(trap))
    return code, index.value, (trap.value or b"").decode()


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as the C runtime describes it."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    quant: tuple[float, int] | None  # per-tensor (scale, zero point)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class CEngine:
    """A binary loaded by libtessel, run on the C NPU model of `arch`."""

    def __init__(self, data: bytes, arch: Any) -> None:
        self._lib = lib()
        err, status = Error(), _I(0)
        data = bytes(data)
        check_host_memory(data, arch)
        self._handle = self._lib.tslh_open(data, len(data), ctypes.byref(target_of(arch)),
                                           ctypes.byref(sim_config(arch)), ctypes.byref(err),
                                           ctypes.byref(status))
        if not self._handle:
            if status.value == err.code and err.code:
                raise TesselFormatError(describe(err))
            raise TesselConfigError(f"C runtime: cannot open the binary "
                                    f"({self._lib.tslh_status_text(status.value).decode()})")
        self.inputs = [self._info(0, i) for i in range(self._lib.tslh_count(self._handle, 0))]
        self.outputs = [self._info(1, i) for i in range(self._lib.tslh_count(self._handle, 1))]

    def _info(self, output: int, i: int) -> TensorInfo:
        name = ctypes.create_string_buffer(4096)
        dtype, rank, quantised = _I(), _I(), _I()
        shape = (_U32 * MAX_RANK)()
        scale, zp = ctypes.c_double(), ctypes.c_int64()
        self._lib.tslh_info(self._handle, output, i, name, len(name), ctypes.byref(dtype),
                            ctypes.byref(rank), shape, ctypes.byref(quantised),
                            ctypes.byref(scale), ctypes.byref(zp))
        return TensorInfo(name.value.decode(), DTYPES[dtype.value], tuple(shape[:rank.value]),
                          (scale.value, zp.value) if quantised.value else None)

    @property
    def arena_size(self) -> int:
        return int(self._lib.tslh_arena_size(self._handle))

    @property
    def executed(self) -> int:
        """Instructions the C NPU model has executed (all runs)."""
        return int(self._lib.tslh_executed(self._handle))

    @property
    def macs(self) -> int:
        """Multiply-accumulates the C NPU model's matrix engine has run (all runs; a 2:4
        sparse CONV runs the kept half of its reduction, as the simulator counts it)."""
        return int(self._lib.tslh_macs(self._handle))

    def run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """The outputs for one set of inputs (cast to the inputs' dtypes, shapes checked)."""
        if len(arrays) != len(self.inputs):
            raise TesselConfigError(f"the model takes {len(self.inputs)} input(s), got {len(arrays)}")
        for i, (info, a) in enumerate(zip(self.inputs, arrays, strict=True)):
            a = np.ascontiguousarray(np.asarray(a), dtype=info.dtype)
            if a.shape != info.shape:
                raise TesselConfigError(f"input {i + 1} ({info.name}) has shape {list(a.shape)}, "
                                        f"the model expects {list(info.shape)}")
            if a.nbytes:
                ctypes.memmove(self._lib.tslh_data(self._handle, 0, i), a.ctypes.data, a.nbytes)
        err = Error()
        code = self._lib.tslh_invoke(self._handle, ctypes.byref(err))
        if code:
            trap = self._lib.tslh_trap(self._handle).decode()
            msg = describe(err) + (f": {trap}" if trap and code in (NPU_TRAP, NPU_DEADLOCK) else "")
            raise (TesselSimError if code in RUN_CODES else TesselConfigError)(msg)
        out = []
        for i, info in enumerate(self.outputs):
            a = np.empty(info.shape, info.dtype)
            if a.nbytes:
                ctypes.memmove(a.ctypes.data, self._lib.tslh_data(self._handle, 1, i), a.nbytes)
            out.append(a)
        return out

    def close(self) -> None:
        if getattr(self, "_handle", None):
            self._lib.tslh_close(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()
