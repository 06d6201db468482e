"""Reading NpuArch from TOML: presets by name, custom files by path; unknown keys are rejected.

The file layout (one table per part of the hardware) is documented in docs/architecture.md;
the presets in ``tessel/arch/presets/`` are the examples. Every error names the file and key.
"""

from __future__ import annotations

import enum
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from tessel.arch.types import (
    Area,
    Dataflow,
    Energy,
    MatrixEngine,
    MemoryKind,
    NpuArch,
    OffChipMemory,
    OnChipMemory,
    VectorEngine,
)
from tessel.errors import TesselConfigError, did_you_mean

_TOP_KEYS = ("name", "description", "process_node_nm", "clock_hz")
_TABLES = ("matrix", "vector", "onchip", "offchip", "memory", "dma", "energy", "area", "derived")


class _Table:
    """One TOML table being read: typed getters, and a check that no key was left unread."""

    def __init__(self, data: Any, key: str):
        if not isinstance(data, dict):
            raise TesselConfigError(f"{key} must be a table, got {type(data).__name__}")
        self.data, self.key, self.seen = data, key, set()

    def _name(self, k: str) -> str:
        return f"{self.key}.{k}" if self.key else k

    def get(self, k: str, types: tuple[type, ...], what: str) -> Any:
        self.seen.add(k)
        if k not in self.data:
            raise TesselConfigError(f"{self._name(k)} is missing")
        v = self.data[k]
        if isinstance(v, bool) or not isinstance(v, types):
            raise TesselConfigError(f"{self._name(k)} must be {what}, got {v!r}")
        return v

    def int(self, k: str) -> int:
        return self.get(k, (int,), "an integer")

    def num(self, k: str) -> float:
        return float(self.get(k, (int, float), "a number"))

    def bool(self, k: str) -> bool:
        self.seen.add(k)
        if k not in self.data:
            raise TesselConfigError(f"{self._name(k)} is missing")
        v = self.data[k]
        if not isinstance(v, bool):
            raise TesselConfigError(f"{self._name(k)} must be true or false, got {v!r}")
        return v

    def str(self, k: str) -> str:
        return self.get(k, (str,), "a string")

    def enum(self, k: str, cls: type[enum.Enum]) -> Any:
        v = self.str(k)
        try:
            return cls[v]
        except KeyError:
            allowed = ", ".join(m.name for m in cls)
            msg = f"{self._name(k)} must be one of {allowed}, got {v!r}"
            raise TesselConfigError(msg) from None

    def sub(self, k: str) -> _Table:
        self.seen.add(k)
        if k not in self.data:
            raise TesselConfigError(f"[{self._name(k)}] table is missing")
        return _Table(self.data[k], self._name(k))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise TesselConfigError(f"unknown key {self._name(unknown[0])!r}")


def arch_from_dict(data: dict[str, Any]) -> NpuArch:
    """Build and validate an NpuArch from the parsed TOML document."""
    top = _Table(data, "")
    name, description = top.str("name"), top.str("description")
    node, clock = top.int("process_node_nm"), top.int("clock_hz")
    m = top.sub("matrix")
    matrix = MatrixEngine(
        rows=m.int("rows"), cols=m.int("cols"), dataflow=m.enum("dataflow", Dataflow),
        fold_pipelining=m.bool("fold_pipelining"),
        feed_bytes_per_cycle=m.int("feed_bytes_per_cycle"),
        input_buffer_bytes=m.int("input_buffer_bytes"),
        weight_buffer_bytes=m.int("weight_buffer_bytes"),
    )
    m.finish()
    v = top.sub("vector")
    vector = VectorEngine(
        lanes=v.int("lanes"), pipeline_latency_cycles=v.int("pipeline_latency_cycles")
    )
    v.finish()
    o = top.sub("onchip")
    onchip = OnChipMemory(**{k: o.int(k) for k in OnChipMemory.__dataclass_fields__})
    o.finish()
    offchip = _offchip(top)
    mem = top.sub("memory")
    weights, activations = mem.str("weights"), mem.str("activations")
    mem.finish()
    d = top.sub("dma")
    channels = d.int("channels")
    d.finish()
    e = top.sub("energy")
    energy = Energy(**{k: e.num(k) for k in Energy.__dataclass_fields__})
    e.finish()
    a = top.sub("area")
    area = Area(**{k: a.num(k) for k in Area.__dataclass_fields__})
    a.finish()
    declared: dict[str, float] = {}
    if "derived" in data:
        dt = top.sub("derived")
        declared = {k: dt.num(k) for k in sorted(dt.data)}
    top.finish()
    arch = NpuArch(
        name=name, description=description, process_node_nm=node, clock_hz=clock,
        matrix=matrix, vector=vector, onchip=onchip, offchip=offchip,
        weights_memory=weights, activations_memory=activations, dma_channels=channels,
        energy=energy, area=area,
    )
    arch.check_declared(declared)
    return arch


def _offchip(top: _Table) -> tuple[OffChipMemory, ...]:
    top.seen.add("offchip")
    raw = top.data.get("offchip")
    if not isinstance(raw, list) or not raw:
        raise TesselConfigError("[[offchip]] must list at least one memory")
    mems = []
    for i, entry in enumerate(raw):
        t = _Table(entry, f"offchip[{i}]")
        mems.append(OffChipMemory(
            name=t.str("name"), kind=t.enum("kind", MemoryKind), size_bytes=t.int("size_bytes"),
            bytes_per_cycle=t.int("bytes_per_cycle"), latency_cycles=t.int("latency_cycles"),
        ))
        t.finish()
    return tuple(mems)


def arch_from_toml(path: str | Path, label: str | None = None) -> NpuArch:
    """Parse and validate the TOML file at ``path``; errors start with ``label`` or the path."""
    where = label or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TesselConfigError(f"{where}: cannot read target file ({exc.strerror})") from None
    return arch_from_text(text, where)


def arch_from_text(text: str, where: str = "<toml>") -> NpuArch:
    """Parse and validate TOML text; ``where`` prefixes every error message."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TesselConfigError(f"{where}: invalid TOML: {exc}") from None
    try:
        return arch_from_dict(data)
    except TesselConfigError as exc:
        raise TesselConfigError(f"{where}: {exc}") from None


def list_presets() -> list[str]:
    """Names of the shipped presets, sorted."""
    folder = resources.files("tessel.arch") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> NpuArch:
    """The shipped preset called ``name`` (e.g. ``"tnpu-s"``)."""
    names = list_presets()
    if name not in names:
        raise TesselConfigError(f"unknown target {name!r}{did_you_mean(name, names)}; presets "
                                f"are: {', '.join(names)}")
    res = resources.files("tessel.arch") / "presets" / f"{name}.toml"
    return arch_from_text(res.read_text(encoding="utf-8"), f"presets/{name}.toml")


def load_target(name_or_path: str | Path) -> NpuArch:
    """``--target`` value: a preset name, or a path to a .toml file (anything ending in .toml)."""
    text = str(name_or_path)
    if text.endswith(".toml") or Path(text).is_file():
        return arch_from_toml(text)
    return load_preset(text)
