"""A scenario: the models one NPU runs at once, each at its rate, with deadlines, dependencies
and priorities, read from a TOML file (docs/analysis.md, "Scenarios").

    name = "xr_glasses"                 # optional; default: the file's name
    description = "..."                 # optional
    [[model]]
    name = "gaze"                       # unique in the scenario
    model = "gaze"                      # zoo name, path/to/file.py:factory, .pt2, .onnx, .tflite
    rate_hz = 60                        # releases per second
    deadline_ms = 16.7                  # optional; default: the period (1000 / rate_hz)
    priority = 1                        # optional, 1 = most urgent; default: rate monotonic
    after = ["eye_seg"]                 # optional; runs once these finished the same frame
    inputs = "gaze_inputs.npz"          # optional; default: the model's example inputs
    offset_ms = 0                       # optional release offset in the period
    jitter_ms = 0                       # optional release jitter bound

Every error names the file, the line and the field (``xr.toml:14: [[model]] 'gaze': rate_hz
must be > 0, got 0``); unknown keys get a did-you-mean. Checking resolves each model's name
(a zoo entry, or that the file exists) but runs no model code.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

from tessel.errors import TesselConfigError, did_you_mean

MAX_RATE_HZ = 10_000.0
MAX_MODELS = 64
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_TOP_KEYS = ("name", "description", "model")
_MODEL_KEYS = ("name", "model", "rate_hz", "deadline_ms", "priority", "after", "inputs",
               "offset_ms", "jitter_ms")


@dataclass(frozen=True)
class ScenarioModel:
    """One model of a scenario; times in seconds."""

    name: str
    model: str  # as `tessel compile` takes it (a path made absolute against the file)
    rate_hz: float
    deadline_s: float
    priority: int  # 1 = most urgent; unique in the scenario
    after: tuple[str, ...]
    inputs: Path | None
    offset_s: float
    jitter_s: float
    line: int  # the line of its [[model]] header

    @property
    def period_s(self) -> float:
        return 1.0 / self.rate_hz


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    models: tuple[ScenarioModel, ...]
    path: Path | None

    def model(self, name: str) -> ScenarioModel:
        return next(m for m in self.models if m.name == name)

    @property
    def hyperperiod_s(self) -> float:
        """The least common multiple of the periods (rates read as exact decimals)."""
        periods = [1 / Fraction(str(m.rate_hz)) for m in self.models]
        num = math.lcm(*(p.numerator for p in periods))
        den = math.gcd(*(p.denominator for p in periods))
        return float(Fraction(num, den))

    def chains(self) -> list[tuple[str, ...]]:
        """Every dependency chain from a model nothing waits for back to a source, in order."""
        waiting = {d for m in self.models for d in m.after}
        out = []

        def walk(name: str, tail: tuple[str, ...]) -> None:
            deps = self.model(name).after
            if not deps:
                out.append((name,) + tail)
            for d in deps:
                walk(d, (name,) + tail)
        for m in self.models:
            if m.after and m.name not in waiting:
                walk(m.name, ())
        return out

    def summary(self) -> str:
        from tessel.display import Table, plural

        rows = [(m.name, m.model if len(m.model) < 40 else "..." + m.model[-37:],
                 f"{m.rate_hz:g}", f"{1e3 * m.period_s:.2f}", f"{1e3 * m.deadline_s:.2f}",
                 str(m.priority), ", ".join(m.after) or "-") for m in self.models]
        table = Table(("name", "model", "rate Hz", "period ms", "deadline ms", "priority",
                       "after"), rows, numeric=(False, False, True, True, True, True, False))
        chains = "; ".join(" -> ".join(c) for c in self.chains()) or "none"
        return (f"scenario {self.name}: {plural(len(self.models), 'model')}, hyperperiod "
                f"{1e3 * self.hyperperiod_s:.2f} ms, chains: {chains}\n" + table.text())


def shipped() -> list[str]:
    """The scenarios that ship with Tessel (`tessel scenario check NAME`)."""
    folder = resources.files("tessel.scenario") / "scenarios"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_scenario(path_or_name: str | Path) -> Scenario:
    """A scenario from a TOML file, or a shipped one by name (`shipped()`)."""
    path = Path(path_or_name)
    if not path.suffix and str(path_or_name) in shipped():
        res = resources.files("tessel.scenario") / "scenarios" / f"{path_or_name}.toml"
        return parse_scenario(res.read_text(encoding="utf-8"), f"{path_or_name}.toml", None)
    if not path.is_file():
        hint = did_you_mean(str(path_or_name), shipped()) if not path.suffix else ""
        raise TesselConfigError(f"scenario {str(path_or_name)!r}: no such file{hint} (shipped "
                                f"scenarios: {', '.join(shipped())})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TesselConfigError(f"{path}: cannot read the scenario: {exc}") from None
    return parse_scenario(text, str(path), path.parent)


def parse_scenario(text: str, where: str, base: Path | None) -> Scenario:
    """Validate and read scenario TOML ``text`` (``where`` names it in errors; relative model
    and input paths are read against ``base``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TesselConfigError(f"{where}: not valid TOML: {exc}") from None
    lines = _Lines(text, where)
    for key in data:
        if key not in _TOP_KEYS:
            lines.fail(None, key, f"unknown key{did_you_mean(key, _TOP_KEYS)} (a scenario has "
                                  f"{', '.join(_TOP_KEYS)})")
    tables = data.get("model")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict)
                                                             for t in tables):
        lines.fail(None, "model", "a scenario needs at least one [[model]] table")
    if len(tables) > MAX_MODELS:
        lines.fail(None, "model", f"at most {MAX_MODELS} models, got {len(tables)}")
    name = _text(lines, None, "name", data.get("name", Path(where).stem))
    description = _text(lines, None, "description", data.get("description", ""))
    raw = [_model(lines, i, t, base) for i, t in enumerate(tables)]
    names = [m["name"] for m in raw]
    for i, n in enumerate(names):
        if n in names[:i]:
            lines.fail(i, "name", f"model name {n!r} is used twice")
    models = _with_priorities(lines, raw)
    _check_after(lines, models)
    return Scenario(name, description, tuple(models), None if base is None else Path(where))


class _Lines:
    """Line numbers of [[model]] headers and keys, for messages (tomllib keeps none)."""

    def __init__(self, text: str, where: str) -> None:
        self.where = where
        self.text = text.splitlines()
        self.headers = [i for i, s in enumerate(self.text) if re.match(r"\s*\[\[\s*model\s*\]\]",
                                                                         s)]

    def line(self, table: int | None, key: str) -> int:
        start = self.headers[table] if table is not None and table < len(self.headers) else -1
        end = len(self.text)
        for i in range(start + 1, len(self.text)):
            if re.match(r"\s*\[", self.text[i]):
                end = i
                break
        if table is None and self.headers:
            end = min(end, self.headers[0])
        for i in range(start + 1, end):
            if re.match(rf"\s*{re.escape(key)}\s*=", self.text[i]):
                return i + 1
        return start + 1 if start >= 0 else 1

    def fail(self, table: int | None, key: str, what: str, model: str | None = None) -> None:
        who = "" if table is None else f"[[model]] {model!r}: " if model else \
            f"[[model]] #{table + 1}: "
        raise TesselConfigError(f"{self.where}:{self.line(table, key)}: {who}{key}: {what}")


def _text(lines: _Lines, table: int | None, key: str, value: Any, model: str | None = None
          ) -> str:
    if not isinstance(value, str):
        lines.fail(table, key, f"must be a string, got {value!r}", model)
    return value


def _number(lines: _Lines, i: int, t: dict, key: str, default: float | None, lo: float,
            hi: float, model: str, lo_open: bool = True) -> float:
    value = t.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        lines.fail(i, key, f"must be a number, got {value!r}", model)
    bad = not math.isfinite(value) or value > hi or (value <= lo if lo_open else value < lo)
    if bad:
        rule = f"> {lo:g}" if lo_open else f">= {lo:g}"
        lines.fail(i, key, f"must be {rule} and <= {hi:g}, got {value!r}", model)
    return float(value)


def _model(lines: _Lines, i: int, t: dict, base: Path | None) -> dict[str, Any]:
    for key in t:
        if key not in _MODEL_KEYS:
            lines.fail(i, key, f"unknown key{did_you_mean(key, _MODEL_KEYS)} (a [[model]] has "
                               f"{', '.join(_MODEL_KEYS)})", t.get("name") if isinstance(
                                   t.get("name"), str) else None)
    if "name" not in t:
        lines.fail(i, "name", "missing: every [[model]] needs a name")
    name = _text(lines, i, "name", t["name"])
    if not _NAME.match(name):
        lines.fail(i, "name", f"{name!r} is not a name (letters, digits, _ . -; up to 64)")
    if "model" not in t:
        lines.fail(i, "model", "missing: a zoo name or path/to/file.py:factory", name)
    model = _resolved(lines, i, _text(lines, i, "model", t["model"], name), base, name)
    if "rate_hz" not in t:
        lines.fail(i, "rate_hz", "missing: how many times per second the model runs", name)
    rate = _number(lines, i, t, "rate_hz", None, 0.0, MAX_RATE_HZ, name)
    period_ms = 1e3 / rate
    deadline = _number(lines, i, t, "deadline_ms", period_ms, 0.0, period_ms, name)
    offset = _number(lines, i, t, "offset_ms", 0.0, 0.0, period_ms, name, lo_open=False)
    if offset >= period_ms:
        lines.fail(i, "offset_ms", f"must be < the period ({period_ms:.3g} ms)", name)
    jitter = _number(lines, i, t, "jitter_ms", 0.0, 0.0, period_ms, name, lo_open=False)
    after = t.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        lines.fail(i, "after", f"must be a list of model names, got {after!r}", name)
    priority = t.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                 or not 1 <= priority <= 1000):
        lines.fail(i, "priority", f"must be an integer in [1, 1000], got {priority!r}", name)
    inputs = t.get("inputs")
    if inputs is not None:
        inputs = Path(_text(lines, i, "inputs", inputs, name))
        inputs = inputs if inputs.is_absolute() or base is None else base / inputs
        if not inputs.is_file():
            lines.fail(i, "inputs", f"no such file: {inputs}", name)
    return dict(name=name, model=model, rate_hz=rate, deadline_s=deadline / 1e3,
                priority=priority, after=tuple(after), inputs=inputs, offset_s=offset / 1e3,
                jitter_s=jitter / 1e3, line=lines.line(i, "name"), table=i)


def _resolved(lines: _Lines, i: int, model: str, base: Path | None, name: str) -> str:
    """The model as `tessel.models.resolve` takes it, checked without running its code."""
    from tessel.models import ZOO
    from tessel.models.loader import split_path_spec

    if model in ZOO:
        return model
    spec = split_path_spec(model)
    file = Path(spec[0] if spec is not None else model)
    if file.suffix not in (".py", ".pt2", ".onnx", ".tflite"):
        lines.fail(i, "model", f"unknown model {model!r}{did_you_mean(model, tuple(ZOO))} (a "
                               "zoo name, path/to/file.py:factory, .pt2, .onnx or .tflite)", name)
    if not file.is_absolute() and base is not None:
        file = base / file
    if not file.is_file():
        lines.fail(i, "model", f"no such file: {file}", name)
    return f"{file}:{spec[1]}" if spec is not None else str(file)


def _with_priorities(lines: _Lines, raw: list[dict[str, Any]]) -> list[ScenarioModel]:
    """Given priorities (all or none), else rate monotonic: higher rate first, then file
    order."""
    given = [m["priority"] is not None for m in raw]
    if any(given) and not all(given):
        m = raw[given.index(False)]
        lines.fail(m["table"], "priority", "give every model a priority or none (none: rate "
                                           "monotonic)", m["name"])
    if all(given):
        seen: dict[int, str] = {}
        for m in raw:
            if m["priority"] in seen:
                lines.fail(m["table"], "priority", f"{m['priority']} is also "
                                                   f"{seen[m['priority']]!r}'s", m["name"])
            seen[m["priority"]] = m["name"]
    else:
        order = sorted(range(len(raw)), key=lambda k: (-raw[k]["rate_hz"], k))
        for rank, k in enumerate(order, 1):
            raw[k]["priority"] = rank
    return [ScenarioModel(**{k: v for k, v in m.items() if k != "table"}) for m in raw]


def _check_after(lines: _Lines, models: list[ScenarioModel]) -> None:
    """Dependencies name models of the scenario, at the same rate, without a cycle."""
    by_name = {m.name: (i, m) for i, m in enumerate(models)}
    for i, m in enumerate(models):
        for d in m.after:
            if d not in by_name:
                lines.fail(i, "after", f"{d!r} is not a model of the scenario"
                                       f"{did_you_mean(d, tuple(by_name))}", m.name)
            if d == m.name:
                lines.fail(i, "after", "a model cannot wait for itself", m.name)
            if by_name[d][1].rate_hz != m.rate_hz:
                lines.fail(i, "after", f"{d!r} runs at {by_name[d][1].rate_hz:g} Hz, "
                                       f"{m.name!r} at {m.rate_hz:g} Hz: a chain runs once per "
                                       "frame, at one rate", m.name)
    state: dict[str, int] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name):] + (name,)
            i, m = by_name[cycle[-2]]
            lines.fail(i, "after", f"dependency cycle: {' -> '.join(cycle)}", m.name)
        state[name] = 1
        for d in by_name[name][1].after:
            visit(d, path + (name,))
        state[name] = 2
    for m in models:
        visit(m.name, ())
