"""How an NPU parameter is declared: one ``param(...)`` on its dataclass field says everything
the tools need to know about it.

    feed_bytes_per_cycle: int = param(64, doc="operand port width", unit="bytes/cycle",
                                      checks=(IntIn(1, 4096),), affects=Affects.COSTS,
                                      explore=Explore("fb"), knob=AdviseKnob(Limit.OPERAND_PATH))

The loader (defaults, missing and unknown keys), the validator, ``NpuArch.with_param``,
``NpuArch.summary``, `tessel explore` (which parameters, how a design point is named),
`tessel advise` (its knobs), the search cache's sharing rule (``affects``, ``candidates``) and
the parameter tables of docs/architecture.md and docs/analysis.md are derived from these
declarations (``tessel.arch.params.PARAMS``); a new parameter is one declaration.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from tessel.arch.checks import Check


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of a parameter every preset must give


class Affects(enum.Enum):
    """What a parameter's value can change, which decides what NPUs differing in it share.

    PROGRAMS is the safe default: a parameter nobody classified keeps programs apart."""

    PROGRAMS = "programs"  # instruction selection or placement reads it (search.program_key)
    COSTS = "costs"  # only instruction costs and timing read it, never a step's instructions
    NONE = "none"  # no cycle count either: seconds, joules, mm^2, prose (not in the timing key)


class Limit(enum.Enum):
    """A hardware limit a layer or model can be bound by (`tessel advise`)."""

    MAC_ARRAY = "MAC array"
    OPERAND_PATH = "operand path"
    VECTOR_LANES = "vector lanes"
    DRAM_BANDWIDTH = "DRAM bandwidth"
    SRAM_CAPACITY = "SRAM capacity"
    ACC_CAPACITY = "accumulator capacity"
    DMA_LATENCY = "DMA latency"
    DMA_CHANNELS = "DMA channels"


class Relax(enum.Enum):
    """Which way `tessel advise` moves a knob to relax its limit."""

    DOUBLE = "x2"
    HALVE = "/ 2"


class Memories(enum.Enum):
    """Which off-chip memories one relaxation of a per-memory knob changes."""

    EACH_BUS = "each"  # one relaxation per memory holding weights or activations
    ALL = "all"  # one relaxation of every memory at once


class NameFormat(enum.Enum):
    """How a value is written in the name of a design point (`tessel explore`)."""

    NUMBER = "number"  # short + value: r16
    KIB = "kib"  # short + KiB when a whole number of KiB: s512k
    MHZ = "mhz"  # short + MHz when a whole number of MHz: f1000m
    INITIALS = "initials"  # the enum member's initials: WEIGHT_STATIONARY -> ws
    NAME = "name"  # short + the name itself: ophalf


@dataclass(frozen=True)
class Explore:
    """`tessel explore` may vary the parameter; ``short`` starts its part of a point's name.
    ``group`` > 0: explore's workers group design points by this parameter, in increasing
    ``group`` order, after the program key (a search cache serves points alike in them; only
    for ``candidates`` parameters, whose values decide the candidate lists)."""

    short: str
    name: NameFormat = NameFormat.NUMBER
    group: int = 0


@dataclass(frozen=True)
class AdviseKnob:
    """`tessel advise` relaxes the parameter (by 2x) to measure what ``limit`` costs."""

    limit: Limit
    relax: Relax = Relax.DOUBLE
    memories: Memories = Memories.EACH_BUS  # per-memory parameters only


@dataclass(frozen=True)
class Param:
    """One NPU parameter. Declared with ``param(...)`` on a field of a part of ``NpuArch``
    (or, for a parameter no field holds, in ``tessel.arch.params.VIRTUAL``); ``key``, ``path``,
    ``type`` and ``entries`` are filled in from where it is declared."""

    doc: str  # what it is, one line (the "meaning" column of docs/architecture.md)
    unit: str = ""
    default: Any = REQUIRED  # the value when a preset leaves the key out
    since: int = 1  # the preset schema that introduced it
    checks: tuple[Check, ...] = ()
    affects: Affects = Affects.PROGRAMS
    candidates: bool = False  # emitters list their candidate mappings by it (COSTS only)
    settable: bool = True  # NpuArch.with_param may set it
    hashed: bool = True  # part of arch_hash (False: prose)
    explore: Explore | None = None
    knob: AdviseKnob | None = None
    area_term: bool = False  # the area model (Derived.area_mm2) has a term for it
    summary: bool = False  # in NpuArch.summary() (`tessel targets`)
    key: str = ""  # dotted TOML key; "" = the table and the field's name
    path: tuple[str, ...] = ()  # attribute path on NpuArch (per-memory: ("offchip", field))
    type: Any = None  # int, float, bool, str or an Enum class
    entries: str = ""  # a key of a list of tables ([[offchip]], [[operating_point]]): its name
    writes: str = ""  # a virtual parameter: the per-memory key it sets on the bus memories
    runs_at: bool = False  # the virtual parameter naming the operating point the NPU runs at

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def per_memory(self) -> bool:
        """One value per ``[[offchip]]`` table (per off-chip memory)."""
        return self.entries == "offchip"

    @property
    def per_entry(self) -> bool:
        """One value per table of a list of tables (``[[offchip]]``, ``[[operating_point]]``)."""
        return bool(self.entries)

    @property
    def table(self) -> str:
        """The TOML table holding the key ("" for a top-level key)."""
        return self.key.rpartition(".")[0]

    @property
    def field(self) -> str:
        """The key's last part (its name inside its table)."""
        return self.key.rpartition(".")[2]


def param(default: Any = REQUIRED, kw_only: bool = False, **declaration: Any) -> Any:
    """A dataclass field holding an NPU parameter (see ``Param`` for the declaration).
    ``kw_only``: a keyword-only field, so that a parameter with a default may sit among
    required ones (fields keep their declaration order)."""
    decl = Param(default=default, **declaration)
    meta = {"param": decl}
    if default is REQUIRED:
        return dataclasses.field(metadata=meta, kw_only=kw_only)
    return dataclasses.field(default=default, metadata=meta, kw_only=kw_only)
