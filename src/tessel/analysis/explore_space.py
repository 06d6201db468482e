"""The design space of `tessel explore`: parameters (name -> candidate values), constraints and
how a design point (one value per parameter) becomes an ``NpuArch``. A space may vary the
parameters declared with ``explore`` (tessel.arch.decl; docs/analysis.md lists them); each
value must pass the parameter's declared checks, and the base preset must accept it.

space.toml::

    [params]                                  # or nested tables: [matrix] rows = [8, 16]
    "matrix.rows" = [8, 16, 32]
    "matrix.cols" = {from = 8, to = 32, factor = 2}   # 8, 16, 32 (geometric, inclusive)
    "matrix.dataflow" = ["WEIGHT_STATIONARY", "OUTPUT_STATIONARY"]
    "matrix.feed_bytes_per_cycle" = {from = 16, to = 64, step = 16}  # 16, 32, 48, 64 (inclusive)
    "onchip.sram_bytes" = [262144, 524288]
    dram_bytes_per_cycle = [8, 16]           # the weights and activations memories
    clock_hz = [500_000_000, 1_000_000_000]
    operating_point = ["half", "nominal"]     # the preset's points (names), tessel.arch.operating

    [constraints]
    max_area_mm2 = 1.0
    max_power_mw = 20.0     # average power at `fps` (default 30)
    fps = 30
    max_latency_ms = 10.0   # of the latency objective

    [objectives]
    latency = "sum"         # or "max": over the models (energy is always the sum)
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools
import json
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessel.arch import NpuArch
from tessel.arch.decl import NameFormat
from tessel.arch.params import explore_params
from tessel.arch.validate import check_value
from tessel.errors import TesselConfigError

# the parameters a space may vary (declared with `explore`, tessel.arch.decl), by the dotted
# names of tessel.arch.params (NpuArch.with_param), the same names `tessel advise` uses
EXPLORABLE = {p.key: p for p in explore_params()}
PARAMS = tuple(EXPLORABLE)
# the parameters explore's workers group points by (explore_run.affinity_key), in order
GROUPED = tuple(p.key for p in sorted((p for p in EXPLORABLE.values() if p.explore.group),
                                      key=lambda p: p.explore.group))
CONSTRAINTS = ("max_area_mm2", "max_power_mw", "fps", "max_latency_ms")
MAX_POINTS = 10_000_000


class LatencyAgg(enum.Enum):
    """How the latency objective combines the models' latencies."""

    SUM = "sum"
    MAX = "max"


@dataclass(frozen=True)
class Constraints:
    max_area_mm2: float | None = None
    max_power_mw: float | None = None
    fps: float = 30.0
    max_latency_ms: float | None = None


@dataclass(frozen=True)
class Space:
    """Parameters in a canonical order (sorted by name), each with its candidate values."""

    params: tuple[tuple[str, tuple[Any, ...]], ...]
    constraints: Constraints = Constraints()
    latency: LatencyAgg = LatencyAgg.SUM

    @property
    def size(self) -> int:
        n = 1
        for _, values in self.params:
            n *= len(values)
        return n

    def points(self) -> Iterator[dict[str, Any]]:
        """Every design point, in a fixed order (the exhaustive search)."""
        names = [k for k, _ in self.params]
        for combo in itertools.product(*(v for _, v in self.params)):
            yield dict(zip(names, combo, strict=True))


def point_key(point: Mapping[str, Any], models: tuple[str, ...], context: str = "") -> str:
    """The study key of a point: its canonical parameter dict, the model list and the study
    context (``study_context``: a hash of everything else that determines the result)."""
    return json.dumps({"params": dict(sorted(point.items())), "models": list(models),
                       "context": context}, sort_keys=True, separators=(",", ":"))


def key_context(key: str) -> str | None:
    """The context hash inside a study key (None for keys of older studies, which had none)."""
    try:
        value = json.loads(key).get("context")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def study_context(graph_texts: Mapping[str, str], base: NpuArch, version: str) -> str:
    """sha256 of what, besides the parameters, determines a design point's figures: each
    model's quantised graph (so its source, weights and calibration), the base target and the
    Tessel version. A study recorded under another context is never reused."""
    h = hashlib.sha256()
    for name, text in graph_texts.items():
        h.update(f"model {name} {hashlib.sha256(text.encode()).hexdigest()}\n".encode())
    h.update(json.dumps(base.to_toml_dict(), sort_keys=True, default=str).encode())
    h.update(f"\ntessel {version}".encode())
    return h.hexdigest()[:32]


def load_space(path: str | Path) -> Space:
    """Read a space file; every error names the key."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TesselConfigError(f"space file {p} does not exist") from None
    except IsADirectoryError:
        raise TesselConfigError(f"space file {p} is a directory; give a .toml file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TesselConfigError(f"space file {p} cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TesselConfigError(f"{p}: not valid TOML: {exc}") from None
    try:
        return parse_space(data)
    except TesselConfigError as exc:
        raise TesselConfigError(f"{p}: {exc}") from None


def parse_space(data: Mapping[str, Any]) -> Space:
    """A Space from the TOML layout (see the module docstring)."""
    data = dict(data)
    constraints = _constraints(data.pop("constraints", {}))
    latency = _objectives(data.pop("objectives", {}))
    raw = dict(_flatten(data.pop("params", {}), ""))
    for key, value in _flatten(data, ""):
        if key in raw:
            raise TesselConfigError(f"parameter {key!r} is given twice")
        raw[key] = value
    if not raw:
        raise TesselConfigError(f"the space names no parameter; use some of {', '.join(PARAMS)}")
    params = tuple((k, _values(k, raw[k])) for k in sorted(raw))
    space = Space(params, constraints, latency)
    if space.size > MAX_POINTS:
        raise TesselConfigError(f"the space has {space.size} points (at most {MAX_POINTS})")
    return space


def _flatten(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if not isinstance(data, dict):
        raise TesselConfigError(f"{prefix or 'params'} must be a table")
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in PARAMS and not _is_range(v):
            yield from _flatten(v, key + ".")
        else:
            if key not in PARAMS:
                raise TesselConfigError(f"unknown parameter {key!r}; use one of "
                                        f"{', '.join(PARAMS)}")
            yield key, v


def _is_range(v: dict) -> bool:
    return "from" in v or "to" in v


def _values(key: str, spec: Any) -> tuple[Any, ...]:
    if isinstance(spec, dict):
        values = _range(key, spec)
    elif isinstance(spec, list):
        values = list(spec)
    else:
        values = [spec]
    if not values:
        raise TesselConfigError(f"{key}: no value")
    out = [_value(key, v) for v in values]
    if len(set(out)) != len(out):
        raise TesselConfigError(f"{key}: values repeat: {values}")
    return tuple(out)


def _value(key: str, v: Any) -> Any:
    """``v`` if it has the parameter's type and passes its checks of a value alone (an enum
    by its member's name)."""
    p = EXPLORABLE[key]
    if isinstance(p.type, type) and issubclass(p.type, enum.Enum):
        if not isinstance(v, str) or v not in p.type.__members__:
            raise TesselConfigError(f"{key} must be one of {', '.join(p.type.__members__)}, "
                                    f"got {v!r}")
        return v
    check_value(p, key, v, None)
    return v


def _range(key: str, spec: dict) -> list[int]:
    unknown = sorted(set(spec) - {"from", "to", "step", "factor"})
    if unknown:
        raise TesselConfigError(f"{key}.{unknown[0]}: a range has from, to and step or factor")
    try:
        lo, hi = spec["from"], spec["to"]
    except KeyError as exc:
        raise TesselConfigError(f"{key}: a range needs {exc.args[0]!r}") from None
    step, factor = spec.get("step"), spec.get("factor")
    for name, v in (("from", lo), ("to", hi), ("step", step), ("factor", factor)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise TesselConfigError(f"{key}.{name} must be a positive integer, got {v!r}")
    if (step is None) == (factor is None) or hi < lo or (factor is not None and factor < 2):
        raise TesselConfigError(f"{key}: a range needs from <= to and exactly one of step "
                                "or factor (>= 2)")
    out, v = [], lo
    while v <= hi and len(out) <= 10_000:
        out.append(v)
        v = v + step if step is not None else v * factor
    return out


def _constraints(data: Any) -> Constraints:
    if not isinstance(data, dict):
        raise TesselConfigError("constraints must be a table")
    for k, v in data.items():
        if k not in CONSTRAINTS:
            raise TesselConfigError(f"unknown constraint constraints.{k}; use one of "
                                    f"{', '.join(CONSTRAINTS)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise TesselConfigError(f"constraints.{k} must be a positive number, got {v!r}")
    return Constraints(**{k: float(v) for k, v in data.items()})


def _objectives(data: Any) -> LatencyAgg:
    if not isinstance(data, dict):
        raise TesselConfigError("objectives must be a table")
    for k in data:
        if k != "latency":
            raise TesselConfigError(f"unknown key objectives.{k}; only objectives.latency")
    v = data.get("latency", "sum")
    try:
        return LatencyAgg(v)
    except ValueError:
        raise TesselConfigError(f"objectives.latency must be 'sum' or 'max', got {v!r}") from None


def check_against(space: Space, base: NpuArch) -> None:
    """Each value alone must give a valid NpuArch from ``base`` (errors name the key)."""
    for key, values in space.params:
        for v in values:
            try:
                build_arch(base, {key: v})
            except TesselConfigError as exc:
                raise TesselConfigError(f"{key} = {v!r} is not valid on {base.name}: {exc}") \
                    from None


def arch_name(base: NpuArch, point: Mapping[str, Any]) -> str:
    """A preset name derived from the values, e.g. ``tnpu-s-r16-c8-ws-v32``."""
    return "-".join([base.name, *(_name_part(k, point[k]) for k in sorted(point))])


def _name_part(key: str, v: Any) -> str:
    e = EXPLORABLE[key].explore
    assert e is not None
    if isinstance(v, bool):  # wd1: with the weight decoder
        return f"{e.short}{int(v)}"
    if e.name is NameFormat.INITIALS:
        return e.short + "".join(w[0] for w in str(v).split("_")).lower()
    if e.name is NameFormat.KIB and v % 1024 == 0:
        return f"{e.short}{v // 1024}k"
    if e.name is NameFormat.MHZ and v % 1_000_000 == 0:
        return f"{e.short}{v // 1_000_000}m"
    return f"{e.short}{v}"


def build_arch(base: NpuArch, point: Mapping[str, Any]) -> NpuArch:
    """``base`` with the point's values replaced (re-validated). Static power is scaled with
    the area (the presets model leakage as power per mm^2)."""
    p = dict(point)
    arch = dataclasses.replace(
        base.with_params(p, name=arch_name(base, p)),
        description=f"design point of `tessel explore` from {base.name}: "
        + ", ".join(f"{k}={v}" for k, v in sorted(p.items())))
    scale = arch.derived.area_mm2 / base.derived.area_mm2
    energy = dataclasses.replace(arch.energy,  # (at its operating point: tessel.arch.operating)
                                 static_power_mw=arch.energy.static_power_mw * scale)
    return dataclasses.replace(arch, energy=energy)
