"""Every NPU parameter (``PARAMS``), read from the declarations on NpuArch's fields, and one
vocabulary of names for them: the dotted TOML keys.

``NpuArch.with_param("matrix.feed_bytes_per_cycle", 64)`` and ``with_params({...})`` return a
new, re-validated NpuArch; `tessel advise` and `tessel explore` name every parameter they vary
with these names, so a figure in one tool means the same parameter in the other.

Names: ``<key>`` for a key of the preset file (``clock_hz``, ``matrix.rows``, ``dma.channels``,
``energy.mac_int8_pj``, ...); ``offchip.<memory>.<key>`` for a key of one ``[[offchip]]``
table and ``operating_point.<point>.<key>`` for one of an ``[[operating_point]]`` table (the
tables of a list are named by their ``name``); and the virtual ones (``VIRTUAL``):
``dram_bytes_per_cycle``, the bandwidth of the memories that hold weights and activations, and
``operating_point``, the point the NPU runs at (read: its nominal one; set: the NPU at another
point, ``tessel.arch.operating.at_point``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import tomllib
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tessel.arch.checks import NamesPoint
from tessel.arch.decl import Affects, Explore, NameFormat, Param
from tessel.arch.operating import at_point
from tessel.arch.types import DECLARABLE, POINTS, NpuArch
from tessel.errors import TesselConfigError, did_you_mean

if TYPE_CHECKING:
    from tessel.arch.checks import Check

OFFCHIP = "offchip"  # the list of [[offchip]] tables (NpuArch.offchip)
ENTRIES = (OFFCHIP, POINTS)  # the lists of tables, by their NpuArch field and TOML key


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _walk(cls: type, prefix: str, path: tuple[str, ...], entries: str) -> Iterator[Param]:
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            yield from _walk(t, f"{f.name}.", (*path, f.name), "")
            continue
        if typing.get_origin(t) is tuple and dataclasses.is_dataclass(typing.get_args(t)[0]):
            assert f.name in ENTRIES, f"{f.name}: a list of tables ENTRIES does not name"
            yield from _walk(typing.get_args(t)[0], f"{f.name}.", (f.name,), f.name)
            continue
        decl = f.metadata.get("param")
        if decl is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no param(...) declaration")
        yield dataclasses.replace(decl, key=decl.key or prefix + f.name, path=(*path, f.name),
                                  type=t, entries=entries)


def _virtual(decl: Param, writes: Param) -> Param:
    """A parameter no field holds: it sets ``writes`` on the memories holding weights and
    activations (its checks, what it affects and the candidate flag are that parameter's)."""
    return dataclasses.replace(decl, writes=writes.key, type=writes.type, unit=writes.unit,
                               checks=writes.checks, affects=writes.affects,
                               candidates=writes.candidates, path=writes.path)


FIELDS: tuple[Param, ...] = tuple(_walk(NpuArch, "", (), ""))  # one per dataclass field
_BY_KEY = {p.key: p for p in FIELDS}
BUS_BANDWIDTH = "dram_bytes_per_cycle"
RUNS_AT = POINTS  # the virtual parameter naming the point the NPU runs at
VIRTUAL: tuple[Param, ...] = (
    _virtual(Param(key=BUS_BANDWIDTH, explore=Explore("d"),
                   doc="bandwidth of the memories holding weights and activations (read: the "
                       "smallest)"),
             _BY_KEY["offchip.bytes_per_cycle"]),
    Param(key=RUNS_AT, type=str, runs_at=True, affects=Affects.NONE, checks=(NamesPoint(),),
          explore=Explore("op", NameFormat.NAME), path=(RUNS_AT,),
          doc="the operating point the NPU runs at (read: the nominal one; set: the NPU at that "
              "point, its clock, voltage and energy figures the point's)"),
)
PARAMS: tuple[Param, ...] = FIELDS + VIRTUAL  # every parameter, in declaration order
_BY_KEY.update((p.key, p) for p in VIRTUAL)
assert len(_BY_KEY) == len(PARAMS), "two parameters with one key"
SCHEMA = max(p.since for p in PARAMS)  # the newest preset schema this code reads


def param_info(key: str) -> Param:
    """The declaration of the parameter with dotted ``key`` (per-memory: ``offchip.<key>``)."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise TesselConfigError(f"no NPU parameter {key!r}"
                                f"{did_you_mean(key, list(_BY_KEY))}") from None


def param_names(arch: NpuArch) -> tuple[str, ...]:
    """Every parameter name ``with_param`` accepts on ``arch`` (sorted)."""
    names = [p.key for p in PARAMS if p.settable and not p.per_entry]
    names += [f"{p.entries}.{e.name}.{p.field}" for p in FIELDS if p.per_entry and p.settable
              for e in getattr(arch, p.entries)]
    return tuple(sorted(names))


def value_of(arch: NpuArch, p: Param) -> Any:
    """``p``'s value on ``arch``: parameters of a list of tables as a tuple (one per table:
    memory, operating point), the virtual ones as read by ``get_param``."""
    if p.writes or p.runs_at:
        return get_param(arch, p.key)
    if p.per_entry:
        return tuple(getattr(m, p.field) for m in getattr(arch, p.entries))
    value: Any = arch
    for name in p.path:
        value = getattr(value, name)
    return value


def get_param(arch: NpuArch, name: str) -> Any:
    """The value of parameter ``name`` (enums as the enum member)."""
    p, entry = _lookup(arch, name)
    if p.runs_at:
        return arch.nominal_point.name
    if p.writes:
        return min(getattr(m, p.path[-1]) for m in arch.offchip if m.name in _bus(arch))
    if entry is not None:
        return getattr(getattr(arch, p.entries)[entry], p.field)
    return value_of(arch, p)


def with_params(arch: NpuArch, values: Mapping[str, Any], name: str | None = None) -> NpuArch:
    """``arch`` with each named parameter set (validated once, at the end)."""
    changes: dict[tuple[str, ...], Any] = {}  # attribute path -> value
    # list of tables -> index of a table -> field -> value
    tables: dict[str, dict[int, dict[str, Any]]] = {e: {} for e in ENTRIES}
    point = None
    for key in sorted(values):
        p, entry = _lookup(arch, key)
        if not p.settable:
            raise TesselConfigError(f"{key} cannot be set with with_param")
        value = _coerce(key, p, values[key])
        if p.runs_at:
            point = value
        elif p.writes:
            for i in [arch.memory_index(n) for n in sorted(_bus(arch))]:
                tables[OFFCHIP].setdefault(i, {})[p.path[-1]] = value
        elif entry is not None:
            tables[p.entries].setdefault(entry, {})[p.field] = value
        else:
            changes[p.path] = value
    kwargs: dict[str, Any] = {}
    for path, value in changes.items():
        if len(path) == 1:
            kwargs[path[0]] = value
        else:
            part = kwargs.get(path[0], getattr(arch, path[0]))
            kwargs[path[0]] = dataclasses.replace(part, **{path[1]: value})
    if arch.operating_point and not tables[POINTS]:
        tables[POINTS] = _rescaled_points(arch, changes)
    for entries, changed in tables.items():
        if changed:
            kwargs[entries] = tuple(dataclasses.replace(m, **changed.get(i, {}))
                                    for i, m in enumerate(getattr(arch, entries)))
    if name is not None:
        kwargs["name"] = name
    new = dataclasses.replace(arch, **kwargs)
    return new if point is None else at_point(new, point)


def _lookup(arch: NpuArch, name: str) -> tuple[Param, int | None]:
    """The parameter ``name`` names, and the index of its table in its list of tables (the
    names ``offchip.<memory>.<key>``, ``operating_point.<point>.<key>``)."""
    p = _BY_KEY.get(name)
    if p is not None and not p.per_entry:
        return p, None
    parts = name.split(".")
    if len(parts) == 3 and parts[0] in ENTRIES:
        p = _BY_KEY.get(f"{parts[0]}.{parts[2]}")
        if p is not None and p.per_entry:
            return p, _entry_index(arch, parts[0], parts[1])
    known = param_names(arch)
    raise TesselConfigError(f"unknown hardware parameter {name!r}{did_you_mean(name, known)}; "
                            "parameters are: " + ", ".join(known))


def _rescaled_points(arch: NpuArch, changes: Mapping[tuple[str, ...], Any]
                     ) -> dict[int, dict[str, Any]]:
    """A new ``clock_hz`` or ``voltage_v`` set alone moves the declared operating points with
    the nominal one: their clocks and voltages keep their ratios to it."""
    clock = changes.get(("clock_hz",), arch.clock_hz)
    volt = changes.get(("voltage_v",), arch.voltage_v)
    if clock == arch.clock_hz and volt == arch.voltage_v:
        return {}
    out = {}
    for i, p in enumerate(arch.operating_point):
        nominal = p.clock_hz == arch.clock_hz
        out[i] = {"clock_hz": clock if nominal else round(p.clock_hz * clock / arch.clock_hz),
                  "voltage_v": volt if nominal else p.voltage_v * volt / arch.voltage_v}
    return out


def parse_settings(items: Iterable[str], arch: NpuArch) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``--set``) as ``with_params`` takes them: VALUE is read as a TOML
    value (``160``, ``0.55``, ``true``, ``"lpddr"``), a bare word as a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key or not text:
            raise TesselConfigError(f"--set takes KEY=VALUE, got {item!r}")
        _lookup(arch, key)  # an unknown name is reported with the vocabulary
        try:
            out[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = text
    return out


def _entry_index(arch: NpuArch, entries: str, name: str) -> int:
    if entries == OFFCHIP:
        return arch.memory_index(name)
    for i, e in enumerate(getattr(arch, entries)):
        if e.name == name:
            return i
    names = [e.name for e in getattr(arch, entries)]
    raise TesselConfigError(f"{arch.name}: no {entries} named {name!r}; "
                            f"{entries} names: {', '.join(names) or 'none declared'}")


def _coerce(key: str, p: Param, value: Any) -> Any:
    """Enum parameters accept the member or its name (as TOML writes it)."""
    if isinstance(p.type, type) and issubclass(p.type, enum.Enum) and isinstance(value, str):
        try:
            return p.type[value]
        except KeyError:
            allowed = ", ".join(p.type.__members__)
            raise TesselConfigError(f"{key} must be one of {allowed}, got {value!r}") from None
    return value


def _bus(arch: NpuArch) -> set[str]:
    return {arch.weights_memory, arch.activations_memory}


def plain(value: Any) -> Any:
    """A value as TOML and JSON write it (enums by name, tuples as lists)."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def key_values(arch: NpuArch, keep: Callable[[Param], bool]) -> dict[str, Any]:
    """The plain values of the field parameters ``keep`` selects, by dotted key (a per-memory
    parameter: the list of its memories' values)."""
    return {p.key: plain(value_of(arch, p)) for p in FIELDS if keep(p)}


def candidate_values(arch: NpuArch, leave_out: frozenset[str] = frozenset()) -> tuple:
    """The values of the ``candidates`` parameters (by key, but those in ``leave_out``)."""
    return tuple(value_of(arch, p) for p in FIELDS if p.candidates and p.key not in leave_out)


def checks_alone(p: Param) -> tuple[Check, ...]:
    """The checks of ``p`` that a value alone can be checked against (no other parameter)."""
    return tuple(c for c in p.checks if not c.reads_arch)


def toml_layout(d: dict[str, Any]) -> dict[str, Any]:
    """``NpuArch.to_dict()``'s content in the preset file's layout: the fields declared under
    another key (``memory.weights``, ``dma.channels``) moved to their tables, and ``schema``
    first when a key needs a schema after 1."""
    out = dict(d)
    for p in FIELDS:
        if len(p.path) == 1 and p.key != p.path[0] and p.path[0] in out:
            out.setdefault(p.table, {})[p.field] = out.pop(p.path[0])
    needs = max((p.since for p in FIELDS if _present(d, p)), default=1)
    return {"schema": needs, **out} if needs > 1 else out


def _present(d: dict[str, Any], p: Param) -> bool:
    if p.per_entry:
        return any(p.field in m for m in d.get(p.entries, ()))
    for name in p.path[:-1]:
        d = d.get(name, {})
    return p.path[-1] in d


def summary(arch: NpuArch) -> dict[str, Any]:
    """``NpuArch.summary()``: the ``summary`` parameters by key, then the derived figures."""
    out: dict[str, Any] = {p.key: plain(value_of(arch, p)) for p in FIELDS
                           if p.summary and not p.per_entry}
    out[OFFCHIP] = [{p.field: plain(getattr(m, p.field)) for p in FIELDS
                     if p.summary and p.per_memory} for m in arch.offchip]
    out["operating_points"] = [dataclasses.asdict(pt) for pt in arch.operating_points]
    for k in DECLARABLE:
        v = getattr(arch.derived, k)
        out[k] = round(v, 4) if isinstance(v, float) else v
    return out


def knob_params() -> tuple[Param, ...]:
    """The parameters `tessel advise` relaxes, in declaration order."""
    return tuple(p for p in PARAMS if p.knob is not None)


def explore_params() -> tuple[Param, ...]:
    """The parameters `tessel explore` may vary, in declaration order."""
    return tuple(p for p in PARAMS if p.explore is not None and p.settable)


def assemble(values: Mapping[tuple[str, ...], Any],
             tables: Mapping[str, list[dict[str, Any]]]) -> NpuArch:
    """The NpuArch (validated) holding ``values`` (attribute path -> value of each field
    parameter) and ``tables`` (list of tables, ``offchip`` / ``operating_point`` -> one dict
    of field -> value per table)."""
    return _build(NpuArch, (), values, tables)


def _build(cls: type, path: tuple[str, ...], values: Mapping[tuple[str, ...], Any],
           tables: Mapping[str, list[dict[str, Any]]]) -> Any:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if not f.init:
            continue
        if dataclasses.is_dataclass(t):
            kwargs[f.name] = _build(t, (*path, f.name), values, tables)
        elif f.name in ENTRIES and not path:
            entry_cls = typing.get_args(t)[0]
            kwargs[f.name] = tuple(entry_cls(**m) for m in tables.get(f.name, ()))
        else:
            kwargs[f.name] = values[(*path, f.name)]
    return cls(**kwargs)
