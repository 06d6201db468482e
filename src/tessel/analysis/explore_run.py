"""Evaluating design points: one point = build the NpuArch, run the compiler's estimate
(partitioning, mapping search, fusion, cost model) on every model's integer graph.

Executors: in-process (workers=0), local worker processes (the graphs are shipped once per
worker through the pool's initializer) or Ray actors, one per CPU of the cluster (the graphs
are put in the object store once, each actor fetches them once). Each worker or actor keeps a
search cache, and gets its own run of similar points (`affinity_queues`: the points that
share the most of it), taking from the others' runs once its own is done where that ends
the sweep sooner (`Runs`).
"""

from __future__ import annotations

import enum
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

# the compile path a point runs, imported here rather than in the first point: a local worker
# is forked from this process and inherits it (once, not once per worker and sweep)
from tessel.analysis.estimate import estimate_graph
from tessel.analysis.explore_space import GROUPED, build_arch, point_key
from tessel.analysis.explore_store import ModelFigures, PointResult
from tessel.analysis.reaper import start_reaper
from tessel.arch import NpuArch, arch_from_dict
from tessel.errors import TesselCompileError, TesselConfigError, TesselUnsupportedOpError
from tessel.ir import Graph
from tessel.schedule import estimate as step_estimate
from tessel.schedule.search import SearchCache, program_key, pruning
from tessel.schedule.search import use as use_search_cache

# set (to anything but "" / "0") in the environment of the processes that evaluate points: the
# reference search (no pruning, no search cache), for measuring what they save
REFERENCE_ENV = "TESSEL_SEARCH_REFERENCE"
Graphs = Mapping[str, Graph]  # model name -> quantised integer graph (insertion order = models)
_STATE: dict[str, Any] = {}  # per process: "graphs", "base", "context", "search_cache", ...


def search_cache() -> SearchCache:
    """This process's cache of mapping searches (tessel.schedule.search): design points
    that share the fields a step depends on reuse its search, events and constant sizes."""
    cache = _STATE.get("search_cache")
    if cache is None:
        cache = _STATE["search_cache"] = SearchCache()
    return cache


def evaluate_point(point: Mapping[str, Any], graphs: Graphs, base: NpuArch,
                   context: str = "", *, cache: bool = True, ahead: int = 0) -> PointResult:
    """Estimate every model on the design point (never raises for a point that does not fit);
    ``context``: the study context its key records (``explore_space.study_context``);
    ``cache``: reuse this process's search cache (the figures are the same without it);
    ``ahead``: the points this process will evaluate after this one (a worker's run): the
    programs this point timed, that many times over, tell the step timing's tier whether to
    run compiled from now on (schedule.estimate.expect_programs; before the first point, the
    run's length: expect_run; the figures are the same either way)."""
    timed = step_estimate.programs_run()
    if timed == 0:  # this process's first point: its run's length tells the tier
        step_estimate.expect_run(ahead + 1)
        timed = step_estimate.programs_run()
    if os.environ.get(REFERENCE_ENV, "") not in ("", "0"):
        with use_search_cache(None), pruning(False):
            result = _evaluate(point, graphs, base, context)
    else:
        with use_search_cache(search_cache() if cache else None):
            result = _evaluate(point, graphs, base, context)
    if ahead > 0:
        step_estimate.expect_programs(ahead * (step_estimate.programs_run() - timed))
    return result


def _evaluate(point: Mapping[str, Any], graphs: Graphs, base: NpuArch,
              context: str) -> PointResult:
    t0 = time.perf_counter()
    models = tuple(graphs)
    key = point_key(point, models, context)
    try:
        arch = build_arch(base, point)
    except TesselConfigError as exc:
        return _infeasible(key, point, models, "-", str(exc), t0)
    per: dict[str, ModelFigures] = {}
    for name, graph in graphs.items():
        try:
            rep = estimate_graph(graph, arch, name=name)
        except (TesselCompileError, TesselUnsupportedOpError) as exc:
            return _infeasible(key, point, models, arch.name, f"{name}: {exc}", t0,
                               arch.derived.area_mm2, arch.energy.static_power_mw)
        per[name] = ModelFigures(rep.latency_ms, rep.energy_uj,
                                 rep.energy_pj.get("static", 0.0) / 1e6)
    return PointResult(key, dict(point), models, arch.name, True, None, arch.derived.area_mm2,
                       arch.energy.static_power_mw, per, time.perf_counter() - t0)


def _infeasible(key: str, point: Mapping[str, Any], models: tuple[str, ...], name: str,
                reason: str, t0: float, area: float = 0.0, static: float = 0.0) -> PointResult:
    return PointResult(key, dict(point), models, name, False, reason, area, static, {},
                       time.perf_counter() - t0)


# -- local worker processes --------------------------------------------------------------------
def worker_context() -> multiprocessing.context.BaseContext:
    """How local workers start: forked (a worker inherits this process's imports of the
    compile path and the graphs, and pays no start), whatever this process's default start
    method is: spawn in a process that multiprocessing itself spawned, forkserver on newer
    Pythons, each of which starts every worker as a new interpreter that imports the compiler
    and unpickles the graphs again. The platform's default on macOS (spawn: fork is unsafe with
    its system frameworks) and where there is no fork."""
    if sys.platform != "darwin" and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _init_worker(graphs: Graphs, base_dict: dict[str, Any], context: str, parent: int) -> None:
    _die_with_parent(parent)
    _STATE["graphs"] = graphs
    _STATE["base"] = arch_from_dict(base_dict)
    _STATE["context"] = context


def _die_with_parent(parent: int, period_s: float = 0.2) -> None:
    """Exit this worker as soon as the process that started it is gone (even killed with
    SIGKILL, when no cleanup of the parent runs): a daemon thread watches the parent pid."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="tessel-parent-watch", daemon=True).start()


def _eval_in_worker(point: dict[str, Any], ahead: int) -> PointResult:
    return evaluate_point(point, _STATE["graphs"], _STATE["base"], _STATE["context"],
                          ahead=ahead)


# point parameters that decide most of what a worker's search cache shares between points,
# after the program key (search.candidate_key): those declared with an explore group
# (tessel.arch.decl.Explore.group), in group order
_AFFINITY = GROUPED


def affinity_key(point: dict[str, Any], base: NpuArch) -> tuple:
    """The order of `affinity_queues`: the program key (search.program_key, "" for a
    point that is not a valid NPU), the `_AFFINITY` parameters, then the others."""
    try:
        program = program_key(build_arch(base, point))
    except TesselConfigError:
        program = ""
    return (program, *(repr(point.get(k)) for k in _AFFINITY),
            *sorted((k, repr(v)) for k, v in point.items() if k not in _AFFINITY))


def affinity_queues(points: Sequence[dict[str, Any]], n: int, base: NpuArch,
                    keys: Mapping[int, tuple] | None = None) -> list[deque[dict[str, Any]]]:
    """`points` in `n` queues of about equal length, one per worker, so that a worker's points
    share what its search cache keeps (tessel.schedule.search): sorted by
    `affinity_key` (`keys`: id(point) -> its key, when the caller has them), cut into
    consecutive runs."""
    if keys is None:
        keys = {id(p): affinity_key(p, base) for p in points}
    ordered = sorted(points, key=lambda p: keys[id(p)])
    cuts = [len(ordered) * i // n for i in range(n + 1)]
    return [deque(ordered[cuts[i]:cuts[i + 1]]) for i in range(n)]


class Warmth(enum.Enum):
    """What a worker's search cache already holds for a point (`Runs`): a point of a program
    key it has not seen pays the candidates' programs (on MobileNetV2 several times what a
    point alike in everything but the DRAM costs)."""

    WARM = "warm"  # a point of the same group (program key and `_AFFINITY` parameters) seen
    PROGRAMS = "programs"  # the program key seen, not the group
    COLD = "cold"  # the program key not seen


class Runs:
    """Who evaluates which point next: each worker its own run of similar points
    (`affinity_queues`), in order; a worker done with its run takes the last point of the
    longest other run, unless the points finished so far say the other worker would finish its
    whole run sooner than the thief that point (`steals`): at the end of a sweep, a point
    taken from another worker's run is often cold for the thief (another program key) and
    warm for its owner."""

    def __init__(self, points: Sequence[dict[str, Any]], n: int, base: NpuArch):
        keys = {id(p): affinity_key(p, base) for p in points}  # (each builds its NpuArch)
        self.queues = affinity_queues(points, n, base, keys)
        # id(point) -> (its program key, its group: the program key and `_AFFINITY` values)
        self._keys = {i: (k[:1], k[:1 + len(_AFFINITY)]) for i, k in keys.items()}
        self._seen: list[set[tuple]] = [set() for _ in range(n)]  # program keys and groups
        self._warmth: dict[int, Warmth] = {}  # id(point) -> its warmth where it was sent
        self._seconds: dict[Warmth, list[float]] = {w: [] for w in Warmth}

    def warmth(self, i: int, point: dict[str, Any]) -> Warmth:
        program, group = self._keys[id(point)]
        if group in self._seen[i]:
            return Warmth.WARM
        return Warmth.PROGRAMS if program in self._seen[i] else Warmth.COLD

    def next(self, i: int) -> dict[str, Any] | None:
        """Worker i's next point (None: nothing for it now; each run's own worker still takes
        every point left in it)."""
        if self.queues[i]:
            return self._send(i, self.queues[i].popleft())
        v = max(range(len(self.queues)), key=lambda k: len(self.queues[k]))
        if not self.queues[v] or not self.steals(i, v):
            return None
        return self._send(i, self.queues[v].pop())

    def steals(self, i: int, v: int) -> bool:
        """Whether worker i (done) should take the last point of worker v's run: it does unless
        the median seconds of the points finished so far, by warmth, say it would take that
        point longer than v takes all of its run (v's point in flight not counted)."""
        est = {w: statistics.median(s) for w, s in self._seconds.items() if s}
        queue = self.queues[v]
        thief = self.warmth(i, queue[-1])
        owner = [self.warmth(v, p) for p in queue]
        if not {thief, *owner} <= est.keys():
            return True  # not measured yet
        return est[thief] <= sum(est[w] for w in owner)

    def done(self, point: dict[str, Any], seconds: float) -> None:
        """Record a finished point's evaluation seconds (PointResult.eval_s)."""
        w = self._warmth.pop(id(point), None)
        if w is not None:
            self._seconds[w].append(seconds)

    def _send(self, i: int, point: dict[str, Any]) -> dict[str, Any]:
        self._warmth[id(point)] = self.warmth(i, point)
        self._seen[i].update(self._keys[id(point)])
        return point


class LocalRunner:
    """Points evaluated in ``workers`` processes (0: in this process), one pool of one process
    per worker, each given its run of similar points (`Runs`: a worker whose run is done takes
    the last point of the longest other run when that is worth it), so each worker's search
    cache serves points alike."""

    def __init__(self, graphs: Graphs, base: NpuArch, workers: int, context: str = ""):
        self.graphs, self.base, self.workers, self.context = graphs, base, workers, context
        args = (dict(graphs), base.to_toml_dict(), context, os.getpid())
        self.pools = [ProcessPoolExecutor(1, mp_context=worker_context(),
                                          initializer=_init_worker, initargs=args)
                      for _ in range(max(workers, 0))]

    def run(self, points: Sequence[dict[str, Any]]) -> Iterator[PointResult]:
        """Results as they finish (any order)."""
        if not self.pools:
            for k, p in enumerate(points):
                yield evaluate_point(p, self.graphs, self.base, self.context,
                                     ahead=len(points) - 1 - k)
            return
        runs = Runs(points, len(self.pools), self.base)
        running: dict[Future, tuple[int, dict[str, Any]]] = {}

        def feed(i: int) -> None:
            point = runs.next(i)
            if point is not None:
                ahead = len(runs.queues[i])
                running[self.pools[i].submit(_eval_in_worker, point, ahead)] = (i, point)

        for i in range(len(self.pools)):
            feed(i)
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    i, point = running.pop(f)
                    res = f.result()
                    runs.done(point, res.eval_s)
                    feed(i)
                    yield res
        finally:
            for f in running:
                f.cancel()

    def close(self) -> None:
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)


# -- Ray ---------------------------------------------------------------------------------------
class RayRunner:
    """Points evaluated by Ray actors, one per CPU of the cluster (each a process with its own
    search cache, given its run of similar points as LocalRunner's workers are); ``address``
    "auto" connects to a running cluster or starts a local one (a Ray already initialised in
    this process is reused). The graphs are put in the object store once."""

    def __init__(self, graphs: Graphs, base: NpuArch, address: str, context: str = ""):
        try:
            import ray
        except ImportError as exc:
            raise TesselConfigError(f"--ray needs the 'ray' package ({exc})") from None
        self.ray = ray
        self.base = base
        self._owns = not ray.is_initialized()
        self._reaper = None
        if self._owns:
            # a local cluster is started as children of this process: the reaper kills those
            # Ray leaves behind if this process is SIGKILLed (tessel.analysis.reaper)
            self._reaper = start_reaper() if address == "auto" else None
            ray.init(address=None if address == "auto" else address,
                     log_to_driver=False, include_dashboard=False)
        graphs_ref = ray.put(dict(graphs))
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        actor = ray.remote(num_cpus=1)(_RayEvaluator)
        self.actors = [actor.remote([graphs_ref], base.to_toml_dict(), context)
                       for _ in range(cpus)]

    def run(self, points: Sequence[dict[str, Any]]) -> Iterator[PointResult]:
        ray = self.ray
        runs = Runs(points, len(self.actors), self.base)
        running: dict[Any, tuple[int, dict[str, Any]]] = {}

        def feed(i: int) -> None:
            point = runs.next(i)
            if point is not None:
                ahead = len(runs.queues[i])
                running[self.actors[i].evaluate.remote(point, ahead)] = (i, point)

        for i in range(len(self.actors)):
            feed(i)
        try:
            while running:
                done, _ = ray.wait(list(running), num_returns=1)
                for r in done:
                    i, point = running.pop(r)
                    res = ray.get(r)
                    runs.done(point, res.eval_s)
                    feed(i)
                    yield res
        finally:
            for r in running:
                ray.cancel(r)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        if self._owns:
            self.ray.shutdown()
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper.wait()


class _RayEvaluator:
    """A Ray actor evaluating points (its process keeps its search cache between points)."""

    def __init__(self, graphs_box: list, base_dict: dict[str, Any], context: str = ""):
        import ray

        self.graphs = ray.get(graphs_box[0])  # (boxed: fetched here, once)
        self.base = arch_from_dict(base_dict)
        self.context = context

    def evaluate(self, point: dict[str, Any], ahead: int = 0) -> PointResult:
        return evaluate_point(point, self.graphs, self.base, self.context, ahead=ahead)


def make_runner(graphs: Graphs, base: NpuArch, workers: int,
                ray_address: str | None, context: str = "") -> LocalRunner | RayRunner:
    if ray_address:
        return RayRunner(graphs, base, ray_address, context)
    if workers < 0:
        raise TesselConfigError(f"--workers must be >= 0, got {workers}")
    return LocalRunner(graphs, base, workers, context)

