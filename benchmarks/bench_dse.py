"""Design-space exploration throughput (BENCHMARKS.md): design points fully evaluated per
second per worker for MobileNetV2 with the compiler in the loop (mapping search, fusion,
memory planning decisions, cost model), excluding the one-off quantisation; scaling from 1
to 2 local workers and on a local Ray cluster, measured in one run.

The mapping search prunes candidates with closed-form bounds and each worker keeps a cache of
searched steps (tessel.schedule.search_cache); ``--reference`` measures the search without
either (the figures are identical, only the time differs).

Sweeps: rows x cols x lanes around tnpu-s (16 points, the default); ``--points 32`` / ``64``
add the SRAM size and the DRAM bandwidth. Each worker starts by importing the compiler and
receiving the graphs (~0.4 s on this machine): in a 16-point sweep that is about a fifth of a
2-worker run, so the scaling figure is read off the 64-point sweep (`make bench` runs both).

Run: ``python -m benchmarks.bench_dse [--points N] [--models a,b] [--no-ray] [--reference]``.
"""

from __future__ import annotations

import argparse
import os
import time

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
    of a CPU over `window_s`: `ray.init` returns while its agents are still starting (about a
    second of CPU on this machine), which a sweep on a running cluster does not pay."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=16)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--models", default="mobilenet_v2", help="comma-separated zoo models")
    ap.add_argument("--reference", action="store_true",
                    help="no pruning and no search cache (the search as before them)")
    args = ap.parse_args()
    if args.reference:
        os.environ[REFERENCE_ENV] = "1"  # read by every worker process (explore_run)
    graphs = quantised_graphs(args.models.split(","), 8, None)
    space = _space(args.points)
    rows = []
    runs = [("1 local worker", {"workers": 1}), ("2 local workers", {"workers": 2})]
    if not args.no_ray:
        runs.append(("local Ray (2 CPUs)", {"ray": "local"}))
    for label, kw in runs:
        if kw.get("ray") == "local":
            import ray
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            _quiet()
            kw = {"ray": "auto"}
        t0 = time.perf_counter()
        try:
            result = explore(graphs, space, target="tnpu-s", **kw)
        finally:
            if kw.get("ray"):  # (started here: `make bench` runs this sweep twice)
                import ray
                ray.shutdown()
        dt = time.perf_counter() - t0
        n = result.evaluated
        per_worker = n / dt / (1 if kw.get("workers", 2) == 1 else 2)
        rows.append((label, n, dt, n / dt, per_worker, len(result.front)))
    print(f"models {args.models}"
          + (" (reference search: no pruning, no cache)" if args.reference else ""))
    print("| run | points | seconds | points/s | points/s per worker | front |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]} |")
    base = rows[0][3]
    for r in rows[1:]:
        print(f"\nscaling {r[0]}: {r[3] / (2 * base):.2f} (= throughput / (2 x 1-worker))")


if __name__ == "__main__":
    main()
