"""Design-point records, the study file (JSON lines, one finished point per line, flushed and
fsynced as it arrives) and the Pareto front of latency, energy per inference and area.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tessel.analysis.explore_space import Constraints, LatencyAgg

STUDY_FILE = "study.jsonl"


@dataclass(frozen=True)
class ModelFigures:
    latency_ms: float
    energy_uj: float
    static_uj: float  # the part of energy_uj that is leakage during the inference


@dataclass(frozen=True)
class PointResult:
    """One evaluated design point (``feasible`` False: some model does not compile, ``reason``)."""

    key: str
    params: dict[str, Any]
    models: tuple[str, ...]
    arch: str
    feasible: bool
    reason: str | None
    area_mm2: float
    static_power_mw: float
    per_model: dict[str, ModelFigures]
    eval_s: float = 0.0

    def latency_ms(self, agg: LatencyAgg = LatencyAgg.SUM) -> float:
        values = [m.latency_ms for m in self.per_model.values()]
        if not self.feasible or not values:
            return float("inf")
        return max(values) if agg is LatencyAgg.MAX else sum(values)

    @property
    def energy_uj(self) -> float:
        """Energy of one inference of every model."""
        if not self.feasible:
            return float("inf")
        return sum(m.energy_uj for m in self.per_model.values())

    def power_mw(self, fps: float) -> float:
        """Average power running every model at ``fps`` (dynamic energy x fps + static power)."""
        dyn = sum(m.energy_uj - m.static_uj for m in self.per_model.values())
        return dyn * fps * 1e-3 + self.static_power_mw

    def violations(self, c: Constraints, agg: LatencyAgg) -> list[str]:
        """The constraints this point breaks (empty: it satisfies them all)."""
        if not self.feasible:
            return [f"infeasible: {self.reason}"]
        out = []
        lat = self.latency_ms(agg)
        if c.max_area_mm2 is not None and self.area_mm2 > c.max_area_mm2:
            out.append(f"area {self.area_mm2:.4g} mm2 > {c.max_area_mm2:g}")
        if c.max_latency_ms is not None and lat > c.max_latency_ms:
            out.append(f"latency {lat:.4g} ms > {c.max_latency_ms:g}")
        if c.max_power_mw is not None:
            frame_ms = 1e3 / c.fps
            busy = sum(m.latency_ms for m in self.per_model.values())
            if busy > frame_ms:
                out.append(f"cannot run at {c.fps:g} fps ({busy:.4g} ms per frame)")
            elif self.power_mw(c.fps) > c.max_power_mw:
                out.append(f"power {self.power_mw(c.fps):.4g} mW > {c.max_power_mw:g}")
        return out

    def objectives(self, agg: LatencyAgg) -> tuple[float, float, float]:
        return (self.latency_ms(agg), self.energy_uj, self.area_mm2)

    def to_json(self) -> str:
        d = asdict(self)
        d["models"] = list(self.models)
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PointResult:
        per = {k: ModelFigures(**v) for k, v in d["per_model"].items()}
        return PointResult(d["key"], dict(d["params"]), tuple(d["models"]), d["arch"],
                           bool(d["feasible"]), d["reason"], float(d["area_mm2"]),
                           float(d["static_power_mw"]), per, float(d.get("eval_s", 0.0)))


class Study:
    """The study file of an output folder: read what is there, append each new point durably."""

    def __init__(self, out_dir: Path | None):
        self.points: dict[str, PointResult] = {}
        self._file = None
        if out_dir is None:  # in memory only
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / STUDY_FILE
        self._read()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def _read(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        good_end = 0
        for line in raw.splitlines(keepends=True):
            try:
                rec = PointResult.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                break  # a line cut short by a kill: drop it and everything after
            if not line.endswith(b"\n"):
                break
            self.points.setdefault(rec.key, rec)
            good_end += len(line)
        if good_end != len(raw):
            with open(self.path, "r+b") as f:
                f.truncate(good_end)

    def append(self, result: PointResult) -> None:
        if result.key in self.points:
            return
        self.points[result.key] = result
        if self._file is None:
            return
        self._file.write(result.to_json() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def pareto_front(points: Iterable[PointResult], constraints: Constraints,
                 agg: LatencyAgg) -> list[PointResult]:
    """Feasible, constraint-satisfying points that no other such point dominates (<= in every
    objective, < in one); sorted by latency, energy, area, key (deterministic)."""
    ok = sorted((p for p in points if not p.violations(constraints, agg)),
                key=lambda p: (*p.objectives(agg), p.key))
    front: list[PointResult] = []
    for p in ok:  # sorted: a point can only be dominated by one earlier in the list
        obj = p.objectives(agg)
        if not any(_dominates(q.objectives(agg), obj) for q in front):
            front.append(p)
    return front


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
