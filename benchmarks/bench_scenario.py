"""Scenario power: a shipped scenario scheduled on each preset (`tessel scenario run`), per
scheduling policy, and with fixed priority and constants kept on chip (`--resident-constants
auto`): deadline misses, NPU busy share, worst latency, preemptions, average power and its
largest component, the constants kept on chip, and the scenario's run time (profiling every
model included).

    PYTHONPATH=src python -m benchmarks.bench_scenario [xr_glasses] [--presets a,b]
"""

from __future__ import annotations

import argparse
import time

from benchmarks.report import Section
from tessel.arch import list_presets, load_preset
from tessel.display import plural
from tessel.scenario import load_scenario
from tessel.scenario.run import Reserve, run_scenario
from tessel.scenario.scheduler import Policy

HEAD = ("| preset | policy | constants on chip | misses | NPU busy % | worst latency / deadline "
        "| preemptions | average mW | largest component | run s |\n"
        "|---|---|---|---:|---:|---|---:|---:|---|---:|")


def one(name: str, preset: str, policy: Policy,
        resident: bool = False) -> tuple[str, dict[str, float]]:
    t0 = time.perf_counter()
    r = run_scenario(load_scenario(name), load_preset(preset), policy=policy,
                     resident_constants=Reserve.AUTO if resident else 0)
    seconds = time.perf_counter() - t0
    worst = max(r.models, key=lambda m: m.max_ms / m.deadline_ms)
    top, top_pj = max(r.energy_pj.items(), key=lambda kv: kv[1])
    share = 100 * top_pj / sum(r.energy_pj.values())
    c = r.constants
    kept = (f"{plural(len(c.resident), 'model')}, {c.resident_bytes / 1024:.0f} of "
            f"{c.reserve // 1024} KiB" if c.resident else "none")
    row = (f"| {preset} | {policy.value} | {kept} | {r.misses} | {100 * r.busy:.1f} | {worst.name} "
           f"{worst.max_ms:.2f} / {worst.deadline_ms:.2f} ms | "
           f"{sum(m.preemptions for m in r.models)} | {r.power_mw:.2f} | {top} {share:.0f} % | "
           f"{seconds:.1f} |")
    key = f"{name}/{preset}/{policy.value}" + ("/resident" if resident else "")
    return row, {f"scenario_mw/{key}": r.power_mw, f"scenario_misses/{key}": r.misses}


def run(name: str = "xr_glasses", presets: list[str] | None = None) -> Section:
    presets = presets or list_presets()
    rows, figures = [], {}
    for preset in presets:
        for policy, resident in [(p, False) for p in Policy] + [(Policy.FIXED, True)]:
            row, f = one(name, preset, policy, resident)
            rows.append(row)
            figures.update(f)
    command = "python -m benchmarks.bench_scenario" + (
        "" if name == "xr_glasses" else f" {name}") + (
        "" if presets == list_presets() else f" --presets {','.join(presets)}")
    return Section(f"Scenario {name}: deadlines and power per preset", command,
                   "Each preset at its one operating point, over the scenario's hyperperiod, "
                   "preemption at step boundaries, no idle power gating; constants on chip: "
                   "`--resident-constants auto` (the SRAM reserve of lowest power, the resident "
                   "models scheduled with it as their weights memory; the one-time preload is "
                   "not in the figures).\n\n" + HEAD + "\n"
                   + "\n".join(rows), figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default="xr_glasses")
    ap.add_argument("--presets", default=None)
    args = ap.parse_args()
    print(run(args.scenario, args.presets.split(",") if args.presets else None).markdown)


if __name__ == "__main__":
    main()
