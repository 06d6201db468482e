"""The Tessel NPU hardware model: one frozen, typed object (``NpuArch``) and its parts.

Everything a design-space exploration varies lives here; how the compiler behaves lives in
``tessel.arch.options.CompileOptions``. Values are validated by ``tessel.arch.loader`` when
read from TOML; derived figures (peak MACs, TOPS, area, ...) are computed once in
``NpuArch.__post_init__`` and never stored in two places.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from tessel.errors import TesselConfigError


class Dataflow(enum.Enum):
    """What stays in the PEs of the matrix engine while operands stream through."""

    WEIGHT_STATIONARY = "WEIGHT_STATIONARY"
    OUTPUT_STATIONARY = "OUTPUT_STATIONARY"


class MemoryKind(enum.Enum):
    """Technology of an off-chip (off-NPU) memory; selects its per-byte energy."""

    LPDDR = "LPDDR"
    SYS_SRAM = "SYS_SRAM"
    FLASH = "FLASH"


@dataclass(frozen=True)
class MatrixEngine:
    """R x C systolic array of int8 x int8 -> int32 MACs.

    ``fold_pipelining``: the next fold's weight load (WS) or the previous fold's drain (OS)
    overlaps the current stream (true), or folds run back to back as in SCALE-Sim (false).

    Operand path (docs/architecture.md, "Operand delivery"): the array reads its operands from
    an input window buffer and a weight buffer, filled from the SRAM through a port of its own,
    ``feed_bytes_per_cycle`` wide (not the SRAM ports that DMA and the vector engine use). A
    tile's input (halo included) is read once when it fits ``input_buffer_bytes``, else once per
    column fold; OS weights are read once when the tile's weights fit ``weight_buffer_bytes``,
    else once per row fold (WS weights are preloaded into the array once per fold anyway).
    """

    rows: int
    cols: int
    dataflow: Dataflow
    fold_pipelining: bool = True
    feed_bytes_per_cycle: int = 64  # bytes/cycle, SRAM -> operand buffers
    input_buffer_bytes: int = 32768  # bytes, input window (line) buffer
    weight_buffer_bytes: int = 16384  # bytes, weight buffer


@dataclass(frozen=True)
class VectorEngine:
    """L-lane integer vector unit (requantise, element-wise, LUT, pool, depthwise, reduce)."""

    lanes: int
    pipeline_latency_cycles: int


@dataclass(frozen=True)
class OnChipMemory:
    """The NPU's private memories: banked scratchpad SRAM, int32 accumulator SRAM, LUT."""

    sram_bytes: int
    sram_banks: int
    sram_bank_width_bytes: int
    acc_bytes: int
    lut_entries: int


@dataclass(frozen=True)
class OffChipMemory:
    """One memory outside the NPU, reached by the DMA engines (index = position in the list)."""

    name: str
    kind: MemoryKind
    size_bytes: int
    bytes_per_cycle: int
    latency_cycles: int


@dataclass(frozen=True)
class Energy:
    """Per-event energies in picojoules, and static (leakage) power in milliwatts."""

    mac_int8_pj: float
    sram_read_byte_pj: float
    sram_write_byte_pj: float
    acc_access_pj: float
    lpddr_byte_pj: float
    sys_sram_byte_pj: float
    flash_byte_pj: float
    vector_lane_op_pj: float
    lut_lookup_pj: float
    static_power_mw: float
    operand_buffer_byte_pj: float = 0.0  # one byte read from the matrix operand buffers

    def offchip_byte_pj(self, kind: MemoryKind) -> float:
        """Energy of moving one byte to or from an off-chip memory of ``kind``."""
        return {
            MemoryKind.LPDDR: self.lpddr_byte_pj,
            MemoryKind.SYS_SRAM: self.sys_sram_byte_pj,
            MemoryKind.FLASH: self.flash_byte_pj,
        }[kind]


@dataclass(frozen=True)
class Area:
    """Silicon area model in mm^2 (summed into ``Derived.area_mm2``)."""

    mac_mm2: float
    sram_kib_mm2: float
    vector_lane_mm2: float
    fixed_mm2: float


@dataclass(frozen=True)
class Derived:
    """Figures computed from the parameters (once, in ``NpuArch.__post_init__``)."""

    peak_macs_per_cycle: int
    peak_tops: float
    sram_bytes_per_cycle: int
    acc_entries: int
    weights_memory_index: int
    activations_memory_index: int
    area_mm2: float


# Optional figures a preset may declare under [derived]; each is checked against the computed one.
DECLARABLE = ("peak_macs_per_cycle", "peak_tops", "sram_bytes_per_cycle", "area_mm2")
_REL_TOL = 1e-3  # declared floats are written with ~3 significant figures


@dataclass(frozen=True)
class NpuArch:
    """A Tessel NPU design point: passed explicitly (``arch``) to every stage that needs it."""

    name: str
    description: str
    process_node_nm: int
    clock_hz: int
    matrix: MatrixEngine
    vector: VectorEngine
    onchip: OnChipMemory
    offchip: tuple[OffChipMemory, ...]
    weights_memory: str
    activations_memory: str
    dma_channels: int
    energy: Energy
    area: Area
    derived: Derived = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        from tessel.arch.validate import validate_arch

        validate_arch(self)
        object.__setattr__(self, "derived", _derive(self))

    def check_declared(self, declared: dict[str, float]) -> None:
        """Raise unless every figure a preset declares under [derived] equals the computed one."""
        for key, value in declared.items():
            _check_declared(self, key, value)

    @classmethod
    def from_toml(cls, path: Any) -> NpuArch:
        """Read and validate a preset file (see docs/architecture.md for its keys)."""
        from tessel.arch.loader import arch_from_toml

        return arch_from_toml(path)

    def with_param(self, name: str, value: Any) -> NpuArch:
        """This arch with one parameter (dotted TOML name, e.g. ``"matrix.rows"``) set and
        re-validated; the names are those of ``tessel.arch.params``."""
        from tessel.arch.params import with_params

        return with_params(self, {name: value})

    def with_params(self, values: dict[str, Any], name: str | None = None) -> NpuArch:
        """This arch with several parameters set (and optionally renamed), validated once."""
        from tessel.arch.params import with_params

        return with_params(self, values, name)

    def param(self, name: str) -> Any:
        """The value of one parameter by its dotted name."""
        from tessel.arch.params import get_param

        return get_param(self, name)

    # -- conveniences ------------------------------------------------------------------------
    @property
    def peak_macs_per_cycle(self) -> int:
        return self.derived.peak_macs_per_cycle

    @property
    def peak_tops(self) -> float:
        return self.derived.peak_tops

    def memory_index(self, name: str) -> int:
        """Index of the off-chip memory ``name`` (DMA instructions name memories by index)."""
        for i, mem in enumerate(self.offchip):
            if mem.name == name:
                return i
        raise TesselConfigError(f"{self.name}: no off-chip memory named {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form of the parameters (enums by name), without derived figures."""
        return _plain({f.name: getattr(self, f.name) for f in fields(self) if f.init})

    def to_toml_dict(self) -> dict[str, Any]:
        """The parameters in the TOML preset's layout: `arch_from_dict` reads it back equal
        (how a .tsl file carries a custom target)."""
        d = self.to_dict()
        d["memory"] = {"weights": d.pop("weights_memory"),
                       "activations": d.pop("activations_memory")}
        d["dma"] = {"channels": d.pop("dma_channels")}
        return d

    @property
    def arch_hash(self) -> str:
        """sha256 (hex, 64 chars) of the canonical parameters: equal iff the hardware is equal.

        ``description`` is left out (prose, not hardware).
        """
        content = self.to_dict()
        content.pop("description")
        text = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def arch_hash_bytes(self) -> bytes:
        """``arch_hash`` as its 32 raw bytes (what the .tsl header stores)."""
        return bytes.fromhex(self.arch_hash)

    def summary(self) -> dict[str, Any]:
        """Key figures for ``tessel targets``."""
        d = self.derived
        return {
            "name": self.name,
            "node_nm": self.process_node_nm,
            "clock_mhz": self.clock_hz / 1e6,
            "array": f"{self.matrix.rows}x{self.matrix.cols}",
            "dataflow": self.matrix.dataflow.name,
            "fold_pipelining": self.matrix.fold_pipelining,
            "feed_bytes_per_cycle": self.matrix.feed_bytes_per_cycle,
            "input_buffer_kib": self.matrix.input_buffer_bytes / 1024,
            "weight_buffer_kib": self.matrix.weight_buffer_bytes / 1024,
            "peak_macs_per_cycle": d.peak_macs_per_cycle,
            "peak_tops": round(d.peak_tops, 4),
            "vector_lanes": self.vector.lanes,
            "sram_kib": self.onchip.sram_bytes // 1024,
            "sram_bytes_per_cycle": d.sram_bytes_per_cycle,
            "acc_kib": self.onchip.acc_bytes // 1024,
            "offchip": [
                {
                    "name": m.name,
                    "kind": m.kind.name,
                    "size_mib": m.size_bytes / 2**20,
                    "bytes_per_cycle": m.bytes_per_cycle,
                    "latency_cycles": m.latency_cycles,
                }
                for m in self.offchip
            ],
            "weights_memory": self.weights_memory,
            "activations_memory": self.activations_memory,
            "area_mm2": round(d.area_mm2, 4),
            "static_power_mw": self.energy.static_power_mw,
        }


def _derive(arch: NpuArch) -> Derived:
    macs = arch.matrix.rows * arch.matrix.cols
    names = [m.name for m in arch.offchip]
    area = arch.area
    total_area = (
        macs * area.mac_mm2
        + (arch.onchip.sram_bytes + arch.onchip.acc_bytes + arch.matrix.input_buffer_bytes
           + arch.matrix.weight_buffer_bytes) / 1024 * area.sram_kib_mm2
        + arch.vector.lanes * area.vector_lane_mm2
        + area.fixed_mm2
    )
    return Derived(
        peak_macs_per_cycle=macs,
        peak_tops=2 * macs * arch.clock_hz / 1e12,
        sram_bytes_per_cycle=arch.onchip.sram_banks * arch.onchip.sram_bank_width_bytes,
        acc_entries=arch.onchip.acc_bytes // 4,
        weights_memory_index=names.index(arch.weights_memory),
        activations_memory_index=names.index(arch.activations_memory),
        area_mm2=total_area,
    )


def _check_declared(arch: NpuArch, key: str, value: float) -> None:
    if key not in DECLARABLE:
        raise TesselConfigError(f"derived.{key} is not a derived figure; use one of {DECLARABLE}")
    actual = getattr(arch.derived, key)
    if not math.isclose(actual, value, rel_tol=_REL_TOL):
        raise TesselConfigError(
            f"derived.{key} is declared as {value} but the parameters give {actual:.6g}"
        )


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.init}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
