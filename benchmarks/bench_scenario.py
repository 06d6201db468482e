"""Scenario power: a shipped scenario scheduled on each preset (`tessel scenario run`), per
scheduling policy: deadline misses, NPU busy share, worst latency, preemptions, average power
and its largest component, and the scenario's run time (profiling every model included).

    PYTHONPATH=src python -m benchmarks.bench_scenario [xr_glasses] [--presets a,b]
"""

from __future__ import annotations

import argparse
import time

from benchmarks.report import Section
from tessel.arch import list_presets, load_preset
from tessel.scenario import load_scenario
from tessel.scenario.run import run_scenario
from tessel.scenario.scheduler import Policy

HEAD = ("| preset | policy | misses | NPU busy % | worst latency / deadline | preemptions | "
        "average mW | largest component | run s |\n|---|---|---:|---:|---|---:|---:|---|---:|")


def one(name: str, preset: str, policy: Policy) -> tuple[str, dict[str, float]]:
    t0 = time.perf_counter()
    r = run_scenario(load_scenario(name), load_preset(preset), policy=policy)
    seconds = time.perf_counter() - t0
    worst = max(r.models, key=lambda m: m.max_ms / m.deadline_ms)
    top, top_pj = max(r.energy_pj.items(), key=lambda kv: kv[1])
    share = 100 * top_pj / sum(r.energy_pj.values())
    row = (f"| {preset} | {policy.value} | {r.misses} | {100 * r.busy:.1f} | {worst.name} "
           f"{worst.max_ms:.2f} / {worst.deadline_ms:.2f} ms | "
           f"{sum(m.preemptions for m in r.models)} | {r.power_mw:.2f} | {top} {share:.0f} % | "
           f"{seconds:.1f} |")
    key = f"{name}/{preset}/{policy.value}"
    return row, {f"scenario_mw/{key}": r.power_mw, f"scenario_misses/{key}": r.misses}


def run(name: str = "xr_glasses", presets: list[str] | None = None) -> Section:
    presets = presets or list_presets()
    rows, figures = [], {}
    for preset in presets:
        for policy in Policy:
            row, f = one(name, preset, policy)
            rows.append(row)
            figures.update(f)
    command = "python -m benchmarks.bench_scenario" + (
        "" if name == "xr_glasses" else f" {name}") + (
        "" if presets == list_presets() else f" --presets {','.join(presets)}")
    return Section(f"Scenario {name}: deadlines and power per preset", command,
                   "Each preset at its one operating point, over the scenario's hyperperiod, "
                   "preemption at step boundaries, no idle power gating.\n\n" + HEAD + "\n"
                   + "\n".join(rows), figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default="xr_glasses")
    ap.add_argument("--presets", default=None)
    args = ap.parse_args()
    print(run(args.scenario, args.presets.split(",") if args.presets else None).markdown)


if __name__ == "__main__":
    main()
