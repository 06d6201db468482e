"""tessel.arch: the NPU hardware model (``NpuArch``, TOML presets) and ``CompileOptions``."""

from tessel.arch.loader import (
    arch_from_dict,
    arch_from_text,
    arch_from_toml,
    list_presets,
    load_preset,
    load_target,
)
from tessel.arch.options import CompileOptions
from tessel.arch.types import (
    Area,
    Dataflow,
    Derived,
    Energy,
    MatrixEngine,
    MemoryKind,
    NpuArch,
    OffChipMemory,
    OnChipMemory,
    Sparsity,
    VectorEngine,
    WeightDecoder,
)

__all__ = [
    "Area",
    "CompileOptions",
    "Dataflow",
    "Derived",
    "Energy",
    "MatrixEngine",
    "MemoryKind",
    "NpuArch",
    "OffChipMemory",
    "OnChipMemory",
    "Sparsity",
    "VectorEngine",
    "WeightDecoder",
    "arch_from_dict",
    "arch_from_text",
    "arch_from_toml",
    "list_presets",
    "load_preset",
    "load_target",
]
