"""One vocabulary of hardware parameters: the dotted names of the TOML preset keys.

``NpuArch.with_param("matrix.feed_bytes_per_cycle", 64)`` and ``with_params({...})`` return a new,
re-validated NpuArch; `tessel advise` and `tessel explore` name every parameter they vary with
these names, so a figure in one tool means the same parameter in the other.

Names: ``clock_hz``; ``<table>.<key>`` for the tables matrix, vector, onchip (and
``dma.channels``); ``offchip.<memory>.<key>`` for one off-chip memory; and
``dram_bytes_per_cycle``, the bandwidth of the memories that hold weights and activations.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tessel.errors import TesselConfigError

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch

_TABLES = ("matrix", "vector", "onchip")
BUS_BANDWIDTH = "dram_bytes_per_cycle"


def param_names(arch: NpuArch) -> tuple[str, ...]:
    """Every parameter name ``with_param`` accepts on ``arch`` (sorted)."""
    names = ["clock_hz", "dma.channels", BUS_BANDWIDTH]
    for table in _TABLES:
        names += [f"{table}.{f.name}" for f in dataclasses.fields(getattr(arch, table))]
    for mem in arch.offchip:
        names += [f"offchip.{mem.name}.{k}" for k in ("bytes_per_cycle", "latency_cycles",
                                                      "size_bytes")]
    return tuple(sorted(names))


def get_param(arch: NpuArch, name: str) -> Any:
    """The value of parameter ``name`` (enums as the enum member)."""
    parts = name.split(".")
    if name == "clock_hz":
        return arch.clock_hz
    if name == "dma.channels":
        return arch.dma_channels
    if name == BUS_BANDWIDTH:
        return min(m.bytes_per_cycle for m in arch.offchip if m.name in _bus(arch))
    if len(parts) == 2 and parts[0] in _TABLES:
        part = getattr(arch, parts[0])
        if parts[1] in {f.name for f in dataclasses.fields(part)}:
            return getattr(part, parts[1])
    if len(parts) == 3 and parts[0] == "offchip":
        return getattr(_memory(arch, parts[1]), parts[2])
    raise _unknown(arch, name)


def with_params(arch: NpuArch, values: Mapping[str, Any], name: str | None = None) -> NpuArch:
    """``arch`` with each named parameter set (validated once, at the end)."""
    kwargs: dict[str, Any] = {}
    for key in sorted(values):
        _set(arch, kwargs, key, values[key])
    if name is not None:
        kwargs["name"] = name
    return dataclasses.replace(arch, **kwargs)


def _set(arch: NpuArch, kwargs: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    if key in ("clock_hz", "dma.channels"):
        kwargs["clock_hz" if key == "clock_hz" else "dma_channels"] = value
        return
    if key == BUS_BANDWIDTH or (len(parts) == 3 and parts[0] == "offchip"):
        mems = kwargs.get("offchip", arch.offchip)
        names = _bus(arch) if key == BUS_BANDWIDTH else {_memory(arch, parts[1]).name}
        field = "bytes_per_cycle" if key == BUS_BANDWIDTH else parts[2]
        if field not in ("bytes_per_cycle", "latency_cycles", "size_bytes"):
            raise _unknown(arch, key)
        kwargs["offchip"] = tuple(dataclasses.replace(m, **{field: value}) if m.name in names
                                  else m for m in mems)
        return
    if len(parts) != 2 or parts[0] not in _TABLES:
        raise _unknown(arch, key)
    part = kwargs.get(parts[0], getattr(arch, parts[0]))
    types = {f.name: f for f in dataclasses.fields(part)}
    if parts[1] not in types:
        raise _unknown(arch, key)
    kwargs[parts[0]] = dataclasses.replace(part, **{parts[1]: _coerce(key, part, parts[1], value)})


def _coerce(key: str, part: Any, field: str, value: Any) -> Any:
    """Enum parameters accept the member or its name (as TOML writes it)."""
    current = getattr(part, field)
    if isinstance(current, enum.Enum) and isinstance(value, str):
        try:
            return type(current)[value]
        except KeyError:
            allowed = ", ".join(type(current).__members__)
            raise TesselConfigError(f"{key} must be one of {allowed}, got {value!r}") from None
    return value


def _bus(arch: NpuArch) -> set[str]:
    return {arch.weights_memory, arch.activations_memory}


def _memory(arch: NpuArch, name: str) -> Any:
    for mem in arch.offchip:
        if mem.name == name:
            return mem
    raise TesselConfigError(f"{arch.name}: no off-chip memory named {name!r}")


def _unknown(arch: NpuArch, name: str) -> TesselConfigError:
    return TesselConfigError(f"unknown hardware parameter {name!r}; parameters are: "
                             + ", ".join(param_names(arch)))
