"""Reading NpuArch from TOML: presets by name, custom files by path.

The file layout (one table per part of the hardware) is documented in docs/architecture.md;
the presets in ``tessel/arch/presets/`` are the examples. The keys are those of the parameter
declarations (``tessel.arch.params.PARAMS``): a key with a documented default may be left out,
every missing key without one is reported at once with what it is for, and an unknown key is
rejected. ``schema`` (1 when absent) is the layout version the file was written for; one
newer than this code reads is an error. Every error names the file and key.
"""

from __future__ import annotations

import enum
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from tessel.arch.checks import members, value_error
from tessel.arch.decl import Param
from tessel.arch.params import ENTRIES, FIELDS, OFFCHIP, SCHEMA, assemble, plain
from tessel.arch.types import NpuArch
from tessel.errors import TesselConfigError, did_you_mean

_DERIVED = "derived"  # optional table of declared derived figures (NpuArch.check_declared)
_SCHEMA = "schema"


class _Reader:
    """One TOML document being read: every problem is collected, then reported at once."""

    def __init__(self, data: Any):
        if not isinstance(data, dict):
            raise TesselConfigError(f"a preset must be a table, got {type(data).__name__}")
        self.data = data
        self.schema = _schema(data)
        self.problems: list[str] = []
        self.defaulted: list[tuple[str, Any]] = []  # (key, default) of keys left out

    def table(self, name: str) -> dict[str, Any]:
        """The table ``name`` ({} when absent; a problem when not a table)."""
        if not name:
            return self.data
        value = self.data.get(name, {})
        if isinstance(value, dict):
            return value
        self._problem(f"{name} must be a table, got {type(value).__name__}")
        return {}

    def read(self, p: Param, table: dict[str, Any], label: str) -> Any:
        """The value of ``p`` in ``table`` (its default when absent); ``label``: its key."""
        if p.field not in table:
            if p.required:
                self._problem(_missing(p, label, self.schema))
            else:
                self.defaulted.append((label, p.default))
            return p.default
        v = table[p.field]
        if isinstance(p.type, type) and issubclass(p.type, enum.Enum) and isinstance(v, str):
            if v in p.type.__members__:
                return p.type[v]
            self._problem(f"{label} must be one of {members(p.type)}, got {v!r}")
            return None
        err = value_error(p.type, v)
        if err is not None:
            self._problem(f"{label} {err}, got {v!r}")
            return None
        return float(v) if p.type is float else v

    def entries(self, name: str) -> list[dict[str, Any]]:
        """The tables of the list ``[[name]]`` (``offchip``: at least one; the others may be
        left out)."""
        raw = self.data.get(name, [] if name != OFFCHIP else None)
        if name == OFFCHIP and (not isinstance(raw, list) or not raw):
            self._problem("[[offchip]] must list at least one memory")
            return []
        if not isinstance(raw, list):
            self._problem(f"{name} must be a list of tables ([[{name}]]), got "
                          f"{type(raw).__name__}")
            return []
        fields = [p for p in FIELDS if p.entries == name]
        since = min(p.since for p in fields)
        if raw and since > self.schema:
            self._problem(f"[[{name}]] tables need schema {since} (this file is schema "
                          f"{self.schema})")
            return []
        out = []
        for i, entry in enumerate(raw):
            label = f"{name}[{i}]"
            if not isinstance(entry, dict):
                self._problem(f"{label} must be a table, got {type(entry).__name__}")
                continue
            out.append({p.field: self.read(p, entry, f"{label}.{p.field}") for p in fields})
            self.unknown(entry, {p.field for p in fields}, label)
        return out

    def derived(self) -> dict[str, float]:
        table = self.table(_DERIVED)
        out = {}
        for k, v in sorted(table.items()):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                self._problem(f"{_DERIVED}.{k} must be a number, got {v!r}")
            else:
                out[k] = float(v)
        return out

    def unknown(self, table: dict[str, Any], known: set[str], prefix: str) -> None:
        for k in table:
            if k not in known:
                key = f"{prefix}.{k}" if prefix else k
                self._problem(f"unknown key {key!r}{did_you_mean(k, sorted(known))}")

    def _problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def finish(self) -> None:
        if len(self.problems) == 1:
            raise TesselConfigError(self.problems[0])
        if self.problems:
            raise TesselConfigError(f"{len(self.problems)} problems:\n  "
                                    + "\n  ".join(self.problems))


def _schema(data: dict[str, Any]) -> int:
    v = data.get(_SCHEMA, 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise TesselConfigError(f"{_SCHEMA} must be a positive integer, got {v!r}")
    if v > SCHEMA:
        raise TesselConfigError(f"{_SCHEMA} = {v}: the file is written for a newer tessel "
                                f"(this one reads schemas 1 to {SCHEMA})")
    return v


def _missing(p: Param, label: str, schema: int) -> str:
    what = f"{label} is missing ({p.doc}{', ' + p.unit if p.unit else ''})"
    if p.since > schema:
        return (f"{what}: schema {p.since} added it without a default and this file is schema "
                f"{schema}; add it")
    return f"{what}: it has no default; add it"


def arch_from_dict(data: dict[str, Any]) -> NpuArch:
    """Build and validate an NpuArch from the parsed TOML document."""
    r = _Reader(data)
    values: dict[tuple[str, ...], Any] = {}
    known: dict[str, set[str]] = {"": {_SCHEMA, *ENTRIES, _DERIVED}}  # table -> its keys
    for p in FIELDS:
        if not p.per_entry:
            values[p.path] = r.read(p, r.table(p.table), p.key)
            known.setdefault(p.table, set()).add(p.field)
            known[""].add(p.table or p.field)
    tables = {name: r.entries(name) for name in ENTRIES}
    declared = r.derived()
    for table, names in known.items():
        r.unknown(r.table(table), names, table)
    r.finish()
    arch = assemble(values, tables)
    try:
        arch.check_declared(declared)
    except TesselConfigError as exc:
        if not r.defaulted:
            raise
        left = ", ".join(f"{k} = {plain(v)}" for k, v in r.defaulted)
        raise TesselConfigError(f"{exc} (the file leaves out {left}: their documented "
                                "defaults are used)") from None
    return arch


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
