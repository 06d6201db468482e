"""The Tessel NPU hardware model: one frozen, typed object (``NpuArch``) and its parts.

Everything a design-space exploration varies lives here; how the compiler behaves lives in
``tessel.arch.options.CompileOptions``. Each parameter is declared once, on its field
(``param(...)``, tessel.arch.decl): type, unit, default, checks, what it affects, how explore
and advise use it; loader, validator, tools and docs derive from those declarations
(``tessel.arch.params.PARAMS``). Derived figures (peak MACs, TOPS, area, ...) are computed
once in ``NpuArch.__post_init__`` and never stored in two places.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from tessel.arch.checks import (
    MAX_ACC_ENTRIES,
    MAX_LUT_ENTRIES,
    MAX_OFFCHIP_BYTES,
    MAX_SRAM_BYTES,
    MIN_LUT_ENTRIES,
    Between,
    Divides,
    Finite,
    IntIn,
    MultipleOf,
    Name,
    NamesMemory,
    Pow2,
    Unique,
)
from tessel.arch.decl import (
    AdviseKnob,
    Affects,
    Explore,
    Limit,
    Memories,
    NameFormat,
    Relax,
    param,
)
from tessel.errors import TesselConfigError

COSTS, NONE = Affects.COSTS, Affects.NONE
POINTS = "operating_point"  # the NpuArch field (and TOML list of tables) of the operating points
VOLTAGE = Between(0.3, 2.0)


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

    int4 weights (docs/isa.md, ``w_type`` / ``b_type`` I4) travel packed, two per byte, as far
    as the weight buffer; a decoder between it and the array unpacks ``int4_decode_per_cycle``
    of them per cycle into the int8 they equal. Without it (``int4_weights`` false) layers with
    int4 weights are refused.

    int16 activations (docs/isa.md, ``in_type`` I16) take ``int16_pass_factor`` times an int8
    pass's cycles through the array and accumulate into wide (48-bit) accumulator entries.
    """

    rows: int = param(doc="`R`, the rows of the systolic array", checks=(Pow2(512),),
                      affects=COSTS, candidates=True, explore=Explore("r", group=3),
                      knob=AdviseKnob(Limit.MAC_ARRAY), area_term=True, summary=True)
    cols: int = param(doc="`C`, the columns of the systolic array", checks=(Pow2(512),),
                      affects=COSTS, candidates=True, explore=Explore("c", group=1),
                      knob=AdviseKnob(Limit.MAC_ARRAY), area_term=True, summary=True)
    dataflow: Dataflow = param(doc="what stays in the PEs", affects=COSTS,
                               explore=Explore("", NameFormat.INITIALS), summary=True)
    fold_pipelining: bool = param(
        True, doc="consecutive folds overlap (`false`: SCALE-Sim v3's back-to-back folds)",
        affects=COSTS, summary=True)
    feed_bytes_per_cycle: int = param(
        64, doc="operand port SRAM -> the array's buffers (\"Operand delivery\")",
        unit="bytes/cycle", checks=(IntIn(1, 4096),), affects=COSTS, explore=Explore("fb"),
        knob=AdviseKnob(Limit.OPERAND_PATH), summary=True)
    input_buffer_bytes: int = param(
        32768, doc="input window (line) buffer", unit="bytes", checks=(IntIn(0, MAX_SRAM_BYTES),),
        explore=Explore("ib"), knob=AdviseKnob(Limit.OPERAND_PATH), area_term=True, summary=True)
    weight_buffer_bytes: int = param(
        16384, doc="weight buffer (OS re-reads weights per row fold when they do not fit)",
        unit="bytes", checks=(IntIn(0, MAX_SRAM_BYTES),), explore=Explore("wb"),
        area_term=True, summary=True)
    int4_weights: bool = param(
        True, doc="the weight path has the int4 decoder (`false`: int4 layers are refused)",
        since=2, area_term=True, summary=True)
    int4_decode_per_cycle: int = param(
        128, doc="int4 weights the decoder unpacks per cycle (assumption: two per byte of a "
        "64-byte operand port)", unit="weights/cycle", checks=(IntIn(1, 65536),), affects=COSTS,
        since=2, area_term=True)
    int16_pass_factor: int = param(
        2, doc="cycles of a MAC pass with int16 activations (docs/isa.md `in_type` I16) per "
        "cycle of an int8 pass (assumption: Ethos-U runs 16-bit activations at half its 8-bit "
        "MAC rate, Arm Ethos-U55 TRM)", unit="x", checks=(IntIn(1, 16),), affects=COSTS, since=3)


@dataclass(frozen=True)
class VectorEngine:
    """L-lane integer vector unit (requantise, element-wise, LUT, pool, depthwise, reduce)."""

    lanes: int = param(doc="`L`, the lanes of the vector engine", checks=(Pow2(1024),),
                       affects=COSTS, candidates=True, explore=Explore("v", group=2),
                       knob=AdviseKnob(Limit.VECTOR_LANES), area_term=True, summary=True)
    pipeline_latency_cycles: int = param(
        doc="fixed latency of every vector instruction", unit="cycles",
        checks=(IntIn(0, 1000),), affects=COSTS)


@dataclass(frozen=True)
class OnChipMemory:
    """The NPU's private memories: banked scratchpad SRAM, int32 accumulator SRAM, LUT."""

    sram_bytes: int = param(
        doc="scratchpad size", unit="bytes",
        checks=(IntIn(1024, MAX_SRAM_BYTES), MultipleOf(1024)), explore=Explore("s", NameFormat.KIB),
        knob=AdviseKnob(Limit.SRAM_CAPACITY), area_term=True, summary=True)
    sram_banks: int = param(doc="SRAM banks", checks=(Pow2(256), Divides("onchip.sram_bytes")))
    sram_bank_width_bytes: int = param(doc="bytes per bank per cycle", unit="bytes",
                                       checks=(Pow2(256),))
    acc_bytes: int = param(
        doc="accumulator (int32 entries = bytes / 4)", unit="bytes",
        checks=(IntIn(4, 4 * MAX_ACC_ENTRIES), MultipleOf(4, "int32 entries")),
        explore=Explore("a"), knob=AdviseKnob(Limit.ACC_CAPACITY), area_term=True, summary=True)
    lut_entries: int = param(doc="LUT memory, int16 entries",
                             checks=(IntIn(MIN_LUT_ENTRIES, MAX_LUT_ENTRIES),))


@dataclass(frozen=True)
class OffChipMemory:
    """One memory outside the NPU, reached by the DMA engines (index = position in the list)."""

    name: str = param(doc="the memory's name (`offchip.<name>.*` parameters, `memory.*`)",
                      checks=(Name(), Unique("name")), settable=False, summary=True)
    kind: MemoryKind = param(doc="selects the per-byte energy", summary=True)
    size_bytes: int = param(doc="capacity", unit="bytes", checks=(IntIn(1, MAX_OFFCHIP_BYTES),),
                            summary=True)
    bytes_per_cycle: int = param(
        doc="bandwidth at the NPU clock", unit="bytes/cycle", checks=(IntIn(1, 4096),),
        affects=COSTS, candidates=True, knob=AdviseKnob(Limit.DRAM_BANDWIDTH), summary=True)
    latency_cycles: int = param(
        doc="fixed latency of every transfer", unit="cycles", checks=(IntIn(0, 100_000),),
        affects=COSTS, summary=True,
        knob=AdviseKnob(Limit.DMA_LATENCY, Relax.HALVE, Memories.ALL))


def _figure(doc: str, default: Any = None, unit: str = "pJ", **kw: Any) -> Any:
    extra = {} if default is None else {"default": default}
    return param(**extra, doc=doc, unit=unit, checks=(Finite(),), affects=NONE, **kw)


@dataclass(frozen=True)
class Energy:
    """Per-event energies in picojoules, and static (leakage) power in milliwatts."""

    mac_int8_pj: float = _figure("one int8 x int8 -> int32 MAC")
    sram_read_byte_pj: float = _figure("one byte read from the scratchpad")
    sram_write_byte_pj: float = _figure("one byte written to the scratchpad")
    acc_access_pj: float = _figure("one int32 accumulator read or write")
    lpddr_byte_pj: float = _figure("one byte moved to or from an LPDDR memory")
    sys_sram_byte_pj: float = _figure("one byte moved to or from a system SRAM")
    flash_byte_pj: float = _figure("one byte moved to or from a flash memory")
    vector_lane_op_pj: float = _figure("one element through a vector lane")
    lut_lookup_pj: float = _figure("one LUT-memory access")
    static_power_mw: float = _figure("leakage power", unit="mW", summary=True)
    operand_buffer_byte_pj: float = _figure("one byte the array reads from its operand buffers",
                                            0.0)
    int4_decode_pj: float = _figure(
        "one int4 weight unpacked to int8 (assumption: a nibble select and sign extension, "
        "a tenth of an 8-bit add; tessel.arch.sources)", 0.003, since=2)

    def offchip_byte_pj(self, kind: MemoryKind) -> float:
        """Energy of moving one byte to or from an off-chip memory of ``kind``."""
        return getattr(self, OFFCHIP_FIGURE[kind])


# the figure each kind of off-chip memory is charged (their supplies are not the NPU's: an
# operating point leaves them unchanged, tessel.arch.operating)
OFFCHIP_FIGURE = {MemoryKind.LPDDR: "lpddr_byte_pj", MemoryKind.SYS_SRAM: "sys_sram_byte_pj",
                  MemoryKind.FLASH: "flash_byte_pj"}


def offchip_figures() -> frozenset[str]:
    """The ``Energy`` fields of the off-chip memories."""
    return frozenset(OFFCHIP_FIGURE.values())


@dataclass(frozen=True)
class Area:
    """Silicon area model in mm^2 (summed into ``Derived.area_mm2``)."""

    mac_mm2: float = _figure("one MAC of the array", unit="mm^2")
    sram_kib_mm2: float = _figure("one KiB of scratchpad, accumulator and operand buffers",
                                  unit="mm^2")
    vector_lane_mm2: float = _figure("one vector lane", unit="mm^2")
    fixed_mm2: float = _figure("control, DMA, interconnect", unit="mm^2")
    int4_decode_lane_mm2: float = _figure(
        "the int4 decoder, per weight unpacked per cycle (assumption: a quarter of an 8-bit "
        "adder; tessel.arch.sources)", 9e-6, unit="mm^2", since=2)


@dataclass(frozen=True)
class WeightDecoder:
    """The weight decoder in the DMA path (docs/isa.md, ``DMA_LOAD_W``): it reads a weight
    stream (tessel.isa.weight_codec) off chip through an input buffer and writes the bytes it
    codes to the SRAM, ``bytes_per_cycle`` of them per cycle. Without it (``enabled`` false)
    code generation stores every weight raw."""

    enabled: bool = param(
        False, doc="the DMA path has the weight decoder (`true`: layers whose weight stream "
        "pays in bytes and cycles are stored compressed)", since=3, area_term=True,
        summary=True, explore=Explore("wd"))
    bytes_per_cycle: int = param(
        16, doc="decoded bytes the decoder writes per cycle (assumption: 16 Rice symbols a "
        "cycle, the unary and remainder sections read in parallel)", unit="bytes/cycle",
        checks=(IntIn(1, 4096),), affects=COSTS, since=3, area_term=True,
        explore=Explore("wdb"))
    buffer_bytes: int = param(
        512, doc="the decoder's input buffer (assumption: holds the off-chip latency's bytes "
        "in flight)", unit="bytes", checks=(IntIn(0, MAX_SRAM_BYTES),), affects=NONE, since=3,
        area_term=True)
    decode_byte_pj: float = param(
        0.01, doc="one byte decoded (assumption at 45 nm: a third of an 8-bit add's energy; "
        "tessel.arch.sources.weight_decoder_figures)", unit="pJ", checks=(Finite(),),
        affects=NONE, since=3)
    lane_mm2: float = param(
        3.6e-5, doc="the decoder's logic per byte decoded per cycle (assumption at 45 nm: an "
        "8-bit adder's area; tessel.arch.sources.weight_decoder_figures)", unit="mm^2",
        checks=(Finite(),), affects=NONE, since=3, area_term=True)


@dataclass(frozen=True)
class Sparsity:
    """2:4 structured sparsity in the matrix engine (docs/isa.md, CONV ``w_type`` I8_2_4 /
    I4_2_4; the format of NVIDIA Ampere's sparse tensor cores and Arm Ethos-U85): weights are
    stored as the two non-zeros of every four input channels plus a 2-bit index each; the
    weight path decodes ``index_decode_per_cycle`` indices per cycle, a 4:1 select in front of
    each MAC picks the activations they name, and the array runs half the reduction. Without it
    (``enabled`` false) code generation stores every weight dense."""

    enabled: bool = param(
        False, doc="the matrix engine runs 2:4 sparse weights (`true`: convs and linear "
        "layers whose weights are exactly 2:4 are stored sparse where that pays in bytes and "
        "cycles)", since=4,
        area_term=True, summary=True)
    index_decode_per_cycle: int = param(
        64, doc="2:4 indices (one per group of four weights) the weight path decodes per cycle "
        "(assumption: the groups of the 128 values the int4 decoder delivers a cycle)",
        unit="indices/cycle", checks=(IntIn(1, 65536),), affects=COSTS, since=4,
        area_term=True)
    index_decode_pj: float = param(
        0.006, doc="one index decoded (assumption at 45 nm: a fifth of an 8-bit add's energy; "
        "tessel.arch.sources.sparsity_figures)", unit="pJ", checks=(Finite(),), affects=NONE,
        since=4)
    index_lane_mm2: float = param(
        9e-6, doc="the index decoder per index decoded per cycle (assumption at 45 nm: a "
        "quarter of an 8-bit adder; tessel.arch.sources.sparsity_figures)", unit="mm^2",
        checks=(Finite(),), affects=NONE, since=4, area_term=True)
    mux_mac_mm2: float = param(
        1.8e-5, doc="the activation select in front of one MAC (assumption at 45 nm: an 8-bit "
        "4:1 multiplexer, half an 8-bit adder; tessel.arch.sources.sparsity_figures)",
        unit="mm^2", checks=(Finite(),), affects=NONE, since=4, area_term=True)


@dataclass(frozen=True)
class OperatingPoint:
    """One (clock, supply voltage) pair the NPU can run at (DVFS). Cycle counts do not depend
    on it; at a point, on-chip dynamic energy scales with ``(V / Vnom)^2`` and leakage power
    with ``V / Vnom`` (``tessel.arch.operating``; Vnom: ``NpuArch.voltage_v``)."""

    name: str = param(doc="the point's name (`--operating-point`)",
                      checks=(Name(), Unique("name", POINTS)), affects=NONE, settable=False,
                      since=3)
    clock_hz: int = param(doc="clock of every engine at this point", unit="Hz",
                          checks=(IntIn(1_000, 10**10), Unique("clock_hz", POINTS)),
                          affects=NONE, since=3)
    voltage_v: float = param(doc="supply voltage at this point", unit="V", checks=(VOLTAGE,),
                             affects=NONE, since=3)


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
NOMINAL = "nominal"  # the name of the nominal point of a preset that declares no points
DECLARABLE = ("peak_macs_per_cycle", "peak_tops", "sram_bytes_per_cycle", "area_mm2")
_REL_TOL = 1e-3  # declared floats are written with ~3 significant figures


@dataclass(frozen=True)
class NpuArch:
    """A Tessel NPU design point: passed explicitly (``arch``) to every stage that needs it."""

    name: str = param(doc="preset name", checks=(Name(),), affects=NONE, settable=False,
                      summary=True)
    description: str = param(doc="prose (not part of `arch_hash`)", affects=NONE,
                             settable=False, hashed=False)
    process_node_nm: int = param(doc="process node the energy / area numbers are for",
                                 unit="nm", checks=(IntIn(2, 180),), affects=NONE, summary=True)
    clock_hz: int = param(doc="clock of every engine", unit="Hz",
                          checks=(IntIn(1_000, 10**10),), affects=NONE,
                          explore=Explore("f", NameFormat.MHZ), summary=True)
    voltage_v: float = param(
        0.8, kw_only=True, doc="supply voltage at `clock_hz`, the one every energy figure is "
        "for (the nominal operating point; only ratios to it enter the energy)", unit="V",
        checks=(VOLTAGE,), affects=NONE, since=3, summary=True)
    matrix: MatrixEngine
    vector: VectorEngine
    onchip: OnChipMemory
    offchip: tuple[OffChipMemory, ...]
    weights_memory: str = param(
        key="memory.weights", checks=(NamesMemory(),), summary=True,
        doc="where constants (weights, bias, requant tables, LUTs) live")
    activations_memory: str = param(
        key="memory.activations", checks=(NamesMemory(),), summary=True,
        doc="where inputs, outputs and spilled activations live")
    dma_channels: int = param(key="dma.channels", doc="transfers each DMA engine may have in "
                              "flight", checks=(IntIn(1, 16),), affects=COSTS,
                              knob=AdviseKnob(Limit.DMA_CHANNELS))
    energy: Energy
    area: Area
    wdecoder: WeightDecoder = field(default_factory=WeightDecoder)
    sparse: Sparsity = field(default_factory=Sparsity)
    # [[operating_point]] tables, by increasing clock; () = the nominal point only
    operating_point: tuple[OperatingPoint, ...] = field(default=(), kw_only=True,
                                                        metadata={"since": 3})
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

    @property
    def nominal_point(self) -> OperatingPoint:
        """The point the energy figures are for: (``clock_hz``, ``voltage_v``)."""
        for p in self.operating_point:
            if p.clock_hz == self.clock_hz:
                return p
        return OperatingPoint(NOMINAL, self.clock_hz, self.voltage_v)

    @property
    def operating_points(self) -> tuple[OperatingPoint, ...]:
        """The points the NPU can run at, by increasing clock (the nominal one alone when the
        preset declares none)."""
        return self.operating_point or (self.nominal_point,)

    def point(self, which: str | int) -> OperatingPoint:
        """An operating point by name, or by index in ``operating_points`` (0: slowest)."""
        from tessel.arch.operating import find_point

        return find_point(self, which)

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
        """Plain JSON-able form of the parameters (enums by name), without derived figures.

        A parameter added after schema 1 is left out while it equals its documented default,
        so an arch that schema 1 can describe keeps its hash, and its binaries stay valid."""
        return _plain(self)

    def to_toml_dict(self) -> dict[str, Any]:
        """The parameters in the TOML preset's layout: `arch_from_dict` reads it back equal
        (how a .tsl file carries a custom target). ``schema`` is written when a parameter
        needs a schema after 1."""
        from tessel.arch.params import toml_layout

        return toml_layout(self.to_dict())

    @property
    def arch_hash(self) -> str:
        """sha256 (hex, 64 chars) of the canonical parameters: equal iff the hardware is equal.

        Parameters declared ``hashed=False`` (the description: prose, not hardware) are left
        out, and so are those ``to_dict`` leaves out.
        """
        content = _plain(self, hashed_only=True)
        text = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def arch_hash_bytes(self) -> bytes:
        """``arch_hash`` as its 32 raw bytes (what the .tsl header stores)."""
        return bytes.fromhex(self.arch_hash)

    def summary(self) -> dict[str, Any]:
        """Key figures for ``tessel targets``: the parameters declared ``summary`` by dotted
        name (``offchip``: one dict per memory) and the declarable derived figures."""
        from tessel.arch.params import summary

        return summary(self)


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
        + (arch.matrix.int4_decode_per_cycle * area.int4_decode_lane_mm2
           if arch.matrix.int4_weights else 0.0)
        + (arch.wdecoder.bytes_per_cycle * arch.wdecoder.lane_mm2
           + arch.wdecoder.buffer_bytes / 1024 * area.sram_kib_mm2
           if arch.wdecoder.enabled else 0.0)
        + (arch.sparse.index_decode_per_cycle * arch.sparse.index_lane_mm2
           + macs * arch.sparse.mux_mac_mm2 if arch.sparse.enabled else 0.0)
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


def _plain(value: Any, hashed_only: bool = False) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            v = getattr(value, f.name)
            decl = f.metadata.get("param")
            if not f.init or decl is not None and hashed_only and not decl.hashed:
                continue
            since = decl.since if decl is not None else f.metadata.get("since", 1)
            default = decl.default if decl is not None else f.default
            if since > 1 and (decl is None or not decl.required) and v == default:
                continue
            plain = _plain(v, hashed_only)
            if plain == {} and is_dataclass(v):  # a group all at its defaults (since > 1)
                continue
            out[f.name] = plain
        return out
    if isinstance(value, dict):
        return {k: _plain(v, hashed_only) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, hashed_only) for v in value]
    return value
