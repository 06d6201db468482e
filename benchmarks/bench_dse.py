"""Design-space exploration throughput (docs/figures.md): design points fully evaluated per
second per worker for MobileNetV2 with the compiler in the loop (mapping search, fusion,
memory planning decisions, cost model), excluding the one-off quantisation; scaling from 1
to 2 workers of one executor (local processes; a local Ray cluster of 1 then 2 CPUs, one actor
per CPU), and Ray's throughput against local workers', measured in one run: the rounds of
every configuration interleaved, each figure the median round (`--rounds`, 3 by default).
A Ray cluster is started, and left to finish starting its agents, before its clock starts,
and stopped, its processes waited for, before the next sweep starts. Per worker is read off
the CPU seconds of the 1-worker sweep (this process's and its worker's): on a shared machine
its wall seconds also count the time the other tenants held the CPUs; the scaling figures
are wall seconds, which is what a second worker saves.

The mapping search prunes candidates with closed-form bounds and each worker keeps a cache of
searched steps (tessel.schedule.search); ``--reference`` measures the search without
either (the figures are identical, only the time differs).

Sweeps: rows x cols x lanes around tnpu-s (16 points, the default); ``--points 32`` / ``64``
add the SRAM size and the DRAM bandwidth. Each worker pays a start whatever a point costs
(the graphs received, a Ray actor's import of the compiler, which a local worker inherits
from this process, its first point searched with every cache cold): a large part of a
16-point run on two workers, so the scaling figure is read off the 64-point sweep (`make
bench` runs both).

Run: ``python -m benchmarks.bench_dse [--points N] [--rounds R] [--models a,b] [--no-ray]
[--reference]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from benchmarks.report import Section
from tessel.analysis.explore import explore, quantised_graphs
from tessel.analysis.explore_run import REFERENCE_ENV


def _space(points: int) -> dict:
    """rows x cols x lanes (up to 16 points); beyond 16, SRAM size and DRAM bandwidth too (up
    to 64)."""
    lanes = [16, 32, 64, 128][: max(1, min(points, 16) // 4)]
    space: dict = {"matrix": {"rows": [8, 16], "cols": [8, 16]}, "vector": {"lanes": lanes}}
    if points > 16:
        space["onchip"] = {"sram_bytes": [262_144, 524_288]}
    if points > 32:
        space["dram_bytes_per_cycle"] = [8, 16]
    return space


def _quiet(timeout_s: float = 20.0, window_s: float = 0.5, share: float = 0.05) -> None:
    """Wait until the processes this one started (Ray's daemons and agents) use under `share`
    of a CPU over `window_s`: `ray.init` returns while its agents are still starting, which a
    sweep on a running cluster does not pay."""
    import psutil

    me = psutil.Process()

    def used() -> float:
        total = 0.0
        for p in me.children(recursive=True):
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    end, last = time.monotonic() + timeout_s, used()
    while time.monotonic() < end:
        time.sleep(window_s)
        now = used()
        if now - last < share * window_s:
            return
        last = now


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sweep(graphs, space: dict, workers: int, ray_run: str | None):
    """(wall seconds, CPU seconds or None, explore's result) of one sweep: `workers` local
    processes, or (`ray_run`) a local Ray cluster of `workers` CPUs (one actor each,
    explore_run.RayRunner) started and quiet before the clock starts. CPU seconds (local
    workers only): this process's and its worker processes' (ended with the sweep: explore
    closes its pool), the time the sweep ran on a CPU whatever the machine's other load."""
    if ray_run:
        import ray
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        _quiet()
    c0, k0, t0 = time.process_time(), _children_cpu(), time.perf_counter()
    try:
        result = explore(graphs, space, target="tnpu-s",
                         **({"ray": "auto"} if ray_run else {"workers": workers}))
        dt = time.perf_counter() - t0
        cpu = None if ray_run else time.process_time() - c0 + _children_cpu() - k0
    finally:
        if ray_run:  # started here, so stopped off the clock, as its start is
            _shutdown_ray()
    return dt, cpu, result


def _shutdown_ray(timeout_s: float = 30.0) -> None:
    """Stop the local Ray cluster and wait until its processes have exited, so that none of
    them runs on into the next sweep."""
    import psutil
    import ray

    started = psutil.Process().children(recursive=True)
    ray.shutdown()
    _, alive = psutil.wait_procs(started, timeout=timeout_s)
    if alive:
        raise RuntimeError(f"Ray processes still running {timeout_s:.0f} s after its shutdown: "
                           + ", ".join(f"{p.pid}" for p in alive))


def _rounds(graphs, space: dict, runs: list, rounds: int) -> list[tuple]:
    """Rows (label, workers, points, median wall s, points/s, per worker, front, every round's
    wall s, median CPU s or None), the rounds of every configuration interleaved (the machine
    is shared and noisy)."""
    seconds: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    cpus: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    done: dict[str, tuple[int, int]] = {}  # label -> (points evaluated, front size)
    for _ in range(rounds):
        for label, workers, ray_run in runs:
            dt, cpu, result = _sweep(graphs, space, workers, ray_run)
            seconds[label].append(dt)
            if cpu is not None:
                cpus[label].append(cpu)
            done[label] = (result.evaluated, len(result.front))
    rows = []
    for label, workers, _ in runs:
        n, front = done[label]
        dt = statistics.median(seconds[label])
        cpu = statistics.median(cpus[label]) if cpus[label] else None
        rows.append((label, workers, n, dt, n / dt, n / dt / workers, front, seconds[label],
                     cpu))
    return rows


def run(points: int = 16, rounds: int = 3, models: str = "mobilenet_v2", ray: bool = True,
        reference: bool = False) -> Section:
    """The sweep's table; figures ``dse_per_worker/POINTS`` (1 local worker) and
    ``dse_scaling_local/POINTS``, ``dse_scaling_ray/POINTS``."""
    if reference:
        os.environ[REFERENCE_ENV] = "1"  # read by every worker process (explore_run)
    graphs = quantised_graphs(models.split(","), 8, None)
    runs = [("1 local worker", 1, None), ("2 local workers", 2, None)]
    if ray:
        runs += [("local Ray (1 CPU)", 1, "ray"), ("local Ray (2 CPUs)", 2, "ray")]
    rows = _rounds(graphs, _space(points), runs, rounds)
    lines = [f"Models {models}, {points} points"
             + (" (reference search: no pruning, no cache)" if reference else "")
             + f"; {rounds} interleaved round(s) of each run, the median kept. CPU s: this "
             "process's and the local workers' CPU seconds over the sweep (what the sweep ran "
             "on a CPU, whatever else the shared machine ran).\n",
             "| run | points | seconds | points/s | points/s per worker | CPU s | "
             "points per CPU s | front | every round, s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        every = " / ".join(f"{x:.1f}" for x in r[7])
        cpu = f"{r[8]:.1f} | {r[2] / r[8]:.2f}" if r[8] else "- | -"
        lines.append(f"| {r[0]} | {r[2]} | {r[3]:.1f} | {r[4]:.2f} | {r[5]:.2f} | {cpu} | "
                     f"{r[6]} | {every} |")
    # per worker: one local worker's points per CPU second of the sweep (its process and
    # this one), the figure a worker reaches with a CPU of its own; scaling (docs/figures.md):
    # throughput with 2 workers / (2 x throughput with 1), one executor, wall seconds
    figures = {f"dse_per_worker/{points}": rows[0][2] / rows[0][8],
               f"dse_scaling_local/{points}": rows[1][4] / (2 * rows[0][4])}
    lines.append(f"\nPer worker: {figures[f'dse_per_worker/{points}']:.2f} points per CPU "
                 "second of the 1-worker sweep.")
    lines.append(f"\nScaling, 2 local workers: {figures[f'dse_scaling_local/{points}']:.2f} "
                 "(= throughput / (2 x 1 local worker)).")
    if ray:
        figures[f"dse_scaling_ray/{points}"] = rows[3][4] / (2 * rows[2][4])
        lines.append(f"\nScaling, local Ray (2 CPUs): {figures[f'dse_scaling_ray/{points}']:.2f} "
                     f"(= throughput / (2 x Ray with 1 CPU)); against 2 local workers: "
                     f"{rows[3][4] / rows[1][4]:.2f} (the actors' own start and Ray's threads).")
    command = "python -m benchmarks.bench_dse" + (f" --points {points}" if points != 16 else "")
    command += (f" --rounds {rounds}" if rounds != 3 else "") + ("" if ray else " --no-ray")
    command += (f" --models {models}" if models != "mobilenet_v2" else "")
    command += " --reference" if reference else ""
    return Section(f"Design-space exploration, {points} points", command, "\n".join(lines),
                   figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=16)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each sweep (median kept)")
    ap.add_argument("--models", default="mobilenet_v2", help="comma-separated zoo models")
    ap.add_argument("--reference", action="store_true",
                    help="no pruning and no search cache (the plain search, for comparison)")
    args = ap.parse_args()
    print(run(args.points, args.rounds, args.models, not args.no_ray, args.reference).markdown)


if __name__ == "__main__":
    main()
