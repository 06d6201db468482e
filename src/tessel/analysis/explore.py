"""Design-space exploration (`tessel explore`, ``tessel.analysis.explore.explore``): vary NpuArch
parameters, estimate every model on every design point with the compiler in the loop, keep the
Pareto front of latency, energy per inference and area.

Models are quantised once (and cached in the output folder); every finished point is appended
to the study file, so a re-run with the same output folder resumes. Search: exhaustive when the
space has at most ``trials`` points, else optuna (NSGA-II or TPE) with a fixed seed and a fixed
batch size, so results do not depend on the number of workers.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessel.analysis.explore_output import write_outputs
from tessel.analysis.explore_space import (
    Space,
    build_arch,
    check_against,
    key_context,
    load_space,
    parse_space,
    point_key,
    study_context,
)
from tessel.analysis.explore_store import PointResult, Study, pareto_front
from tessel.arch import NpuArch, load_target
from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.display import Table, short_repr, summary_html
from tessel.errors import TesselConfigError
from tessel.ir import Graph
from tessel.progress import LOGGER, task

BATCH = 8  # optuna points asked per round (fixed: results independent of the worker count)


class Search(enum.Enum):
    AUTO = "auto"
    EXHAUSTIVE = "exhaustive"
    NSGA2 = "nsga2"
    TPE = "tpe"


@dataclass(frozen=True)
class ExploreResult:
    """All points of the study for these models (this run's and earlier ones) and the front."""

    models: tuple[str, ...]
    base: str
    space: Space
    search: Search
    points: tuple[PointResult, ...]
    front: tuple[PointResult, ...]
    evaluated: int  # points computed by this run (the others came from the study file)
    seconds: float
    files: tuple[Path, ...] = field(default=())

    def front_rows(self) -> list[dict[str, Any]]:
        """One dict per front point: arch name, parameters, objectives, power at the fps."""
        c, agg = self.space.constraints, self.space.latency
        return [{"arch": p.arch, **p.params, "latency_ms": p.latency_ms(agg),
                 "energy_uj": p.energy_uj, "area_mm2": p.area_mm2,
                 "power_mw": p.power_mw(c.fps)} for p in self.front]

    def summary(self) -> str:
        feasible = sum(p.feasible for p in self.points)
        return (f"explored {len(self.points)} design points of {self.space.size} "
                f"({self.evaluated} computed now, {feasible} feasible) for "
                f"{', '.join(self.models)} from {self.base} ({self.search.value}); "
                f"Pareto front: {len(self.front)} points (latency = "
                f"{self.space.latency.value} over the models)")

    def front_table(self) -> Table:
        """The Pareto front: one row per design point, its parameters and objectives."""
        rows = self.front_rows()
        cols = list(rows[0]) if rows else ["arch", "latency_ms", "energy_uj", "area_mm2"]
        return Table(cols, [[_fmt(r[k]) for k in cols] for r in rows],
                     numeric=[k != "arch" for k in cols],
                     title=f"Pareto front: {len(rows)} points")

    def __repr__(self) -> str:
        return short_repr("ExploreResult", [
            ("models", list(self.models)), ("base", repr(self.base)),
            ("search", self.search.value), ("points", len(self.points)),
            ("front", len(self.front)), ("evaluated", self.evaluated),
            ("seconds", f"{self.seconds:.1f}")])

    def _repr_html_(self) -> str:
        return summary_html("ExploreResult", [self.summary()], [self.front_table()])

    def _repr_markdown_(self) -> str:
        return self.summary() + "\n\n" + self.front_table().markdown()


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def explore(models: Sequence[str] | Mapping[str, Graph], space: Space | str | Path | Mapping,
            *, target: str | NpuArch = "tnpu-s", out: str | Path | None = None,
            workers: int = 1, ray: str | None = None, search: Search | str = Search.AUTO,
            trials: int = 200, seed: int = 0, calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES,
            progress: bool | Callable[[str], None] = False) -> ExploreResult:
    """Explore ``space`` around ``target`` for ``models`` (zoo names / path.py:factory, or
    name -> quantised integer graph). Writes the study, CSV, plot and presets into ``out``."""
    t0 = time.perf_counter()
    space = _as_space(space)
    base = target if isinstance(target, NpuArch) else load_target(target)
    check_against(space, base)
    search = _as_search(search, space, trials)
    out_dir = Path(out) if out is not None else None
    graphs = quantised_graphs(models, calibration_samples, out_dir)
    study = Study(out_dir) if out_dir is not None else Study(None)
    log = _logger(progress)
    from tessel.analysis.explore_run import make_runner
    from tessel.ir import print_graph
    from tessel.version import __version__

    context = study_context({k: print_graph(g) for k, g in graphs.items()}, base, __version__)
    _say_stale(study, context, log)
    runner = make_runner(graphs, base, workers, ray, context)
    names = tuple(graphs)
    try:
        driver = _Driver(study, runner, names, space, log, context)
        with task("explore: design points", None) as driver.bar:
            if search is Search.EXHAUSTIVE:
                driver.exhaustive()
            else:
                driver.optuna(search, trials, seed)
    finally:
        runner.close()
        study.close()
    points = tuple(sorted((p for p in study.points.values() if driver.owns(p)),
                          key=lambda p: p.key))
    front = tuple(pareto_front(points, space.constraints, space.latency))
    result = ExploreResult(names, base.name, space, search, points, front, driver.evaluated,
                           time.perf_counter() - t0)
    if out_dir is not None:
        files = write_outputs(result, out_dir, {p.key: build_arch(base, p.params)
                                                for p in front})
        result = dataclasses.replace(result, files=tuple(files))
    return result


def _say_stale(study: Study, context: str, log: Callable[[str], None] | None) -> None:
    """Say when the study file holds points of another model source, calibration, base target
    or Tessel version: they are kept in the file but never reused."""
    stale = sum(key_context(k) != context for k in study.points)
    if stale and log is not None:
        log(f"{stale} point(s) in the study were computed for another model, calibration, base "
            "target or Tessel version; they are not reused (recomputing)")


def _as_space(space: Space | str | Path | Mapping) -> Space:
    if isinstance(space, Space):
        return space
    if isinstance(space, (str, Path)):
        return load_space(space)
    return parse_space(space)


def _as_search(search: Search | str, space: Space, trials: int) -> Search:
    if isinstance(search, str):
        try:
            search = Search(search)
        except ValueError:
            raise TesselConfigError(f"--search must be one of "
                                    f"{', '.join(s.value for s in Search)}, got {search!r}") from None
    if trials < 1:
        raise TesselConfigError(f"--trials must be >= 1, got {trials}")
    if search is Search.AUTO:
        return Search.EXHAUSTIVE if space.size <= trials else Search.NSGA2
    return search


def quantised_graphs(models: Sequence[str] | Mapping[str, Graph], samples: int,
                     cache_dir: Path | None) -> dict[str, Graph]:
    """Quantise each model once (cached as Graph IR text in ``cache_dir/graphs``)."""
    if isinstance(models, Mapping):
        return dict(models)
    if not models:
        raise TesselConfigError("explore needs at least one model")
    if len(set(models)) != len(models):
        raise TesselConfigError(f"a model is named twice: {list(models)}")
    return {m: _quantised(m, samples, cache_dir) for m in models}


def _quantised(model: str, samples: int, cache_dir: Path | None) -> Graph:
    """The model's integer graph through the graph cache (tessel.quant.cache: keyed by the
    model's source and weights, the calibration samples, the config and Tessel's sources),
    kept in ``cache_dir/graphs`` when an output folder is given, else the user's cache."""
    from tessel.models import resolve
    from tessel.quant.cache import cached_graph
    from tessel.quant.config import default_config

    spec = resolve(model)
    net, inputs = spec.factory()
    return cached_graph(model, net, inputs, spec.calibration_data(samples),
                        default_config(spec.name), samples,
                        cache_dir / "graphs" if cache_dir is not None else None)


def _logger(progress: bool | Callable[[str], None]) -> Callable[[str], None] | None:
    """A callable gets one line per point; True: a progress bar when the CLI configured
    tessel.progress, the per-point lines at debug level (``tessel -v``)."""
    if callable(progress):
        return progress
    return LOGGER.debug if progress else None


class _NoBar:
    def advance(self, n: int = 1) -> None:
        pass

    def set_total(self, total: int) -> None:
        pass


class _Driver:
    """Runs the search: asks the runner for points not in the study, records each result."""

    def __init__(self, study: Study, runner: Any, models: tuple[str, ...], space: Space,
                 log: Callable[[str], None] | None, context: str = ""):
        self.study, self.runner, self.models, self.space, self.log = \
            study, runner, models, space, log
        self.context = context
        self.evaluated, self.total, self.t0 = 0, 0, time.perf_counter()
        self.best = float("inf")
        self.bar: Any = _NoBar()

    def key(self, point: Mapping[str, Any]) -> str:
        return point_key(point, self.models, self.context)

    def owns(self, res: PointResult) -> bool:
        """True for study points of this run's models and context (reusable)."""
        return res.models == self.models and key_context(res.key) == self.context

    def known(self, point: Mapping[str, Any]) -> PointResult | None:
        return self.study.points.get(self.key(point))

    def run(self, points: list[dict[str, Any]]) -> None:
        todo = list({self.key(p): p for p in points
                     if self.known(p) is None}.values())  # each new point once
        for res in self.runner.run(todo):
            self.study.append(res)
            self.evaluated += 1
            self._progress(res)

    def exhaustive(self) -> None:
        points = list(self.space.points())
        self.total = sum(self.known(p) is None for p in points)
        self.bar.set_total(self.total)
        self.run(points)

    def optuna(self, search: Search, trials: int, seed: int) -> None:
        from tessel.analysis.explore_optuna import optuna_search

        self.total = max(0, trials - sum(self.owns(p) for p in self.study.points.values()))
        self.bar.set_total(self.total)
        optuna_search(self, search.value, trials, seed, BATCH)

    def _progress(self, res: PointResult) -> None:
        c, agg = self.space.constraints, self.space.latency
        if not res.violations(c, agg):
            self.best = min(self.best, res.latency_ms(agg))
        self.bar.advance()
        if self.log is None:
            return
        n, total = self.evaluated, max(self.total, self.evaluated)
        rate = n / max(time.perf_counter() - self.t0, 1e-9)
        eta = (total - n) / rate if rate > 0 else 0.0
        status = (f"{res.latency_ms(agg):.4g} ms {res.energy_uj:.4g} uJ {res.area_mm2:.4g} mm2"
                  if res.feasible else f"infeasible ({(res.reason or '')[:60]})")
        self.log(f"[{n}/{total}] {res.arch}: {status}; best {self.best:.4g} ms; "
                 f"{rate:.2f} points/s; ETA {eta:.0f} s")
