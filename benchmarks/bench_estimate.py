"""Estimation fidelity per layer: the analytical estimate the mapping search used vs the
simulated cycles of the same layer (docs/figures.md, "Estimation fidelity"), for every zoo model
on every preset, plus the simulated whole-model cycles and the backend compile time.

Run: ``python -m benchmarks.bench_estimate [MODEL ...] [--presets a,b] [--calibration N]
[--cache DIR] [--json FILE]``; prints one markdown table. Quantisation accuracy is irrelevant
here, so the calibration count is small (default 2) and each model's quantised graph is
quantised once and reused for every preset (and, with ``--cache``, across runs: the graph is
pickled there, keyed by model name and calibration count).

Per layer: err = |estimate - simulated| / simulated over the layers of `cm.profile`; p50, p90
(nearest rank) and max, the worst layer's name; whole model = (sum of the layer estimates -
simulated total) / simulated total. The goal (the "goal" column; also a target of `make
bench`): p90 <= 5 %, max <= 15 %, whole model <= 2 %.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.models import resolve
from tessel.quant.api import quantize
from tessel.quant.config import default_config

MODELS = ["mobilenet_v2", "resnet18", "ds_cnn", "vit_small", "minilm", "digits_cnn"]
PRESETS = ["tnpu-xs", "tnpu-s", "tnpu-m", "u55-256", "u65-512"]
GOAL_P90, GOAL_MAX, GOAL_WHOLE = 5.0, 15.0, 2.0


def quantised_graph(name: str, calibration: int, cache: Path | None):
    path = cache / f"{name}-cal{calibration}.pkl" if cache is not None else None
    if path is not None and path.exists():
        return pickle.loads(path.read_bytes())
    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(calibration),
                  quant_config=default_config(name), calibration_samples=calibration)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(qm.graph))
    return qm.graph


def _quantile(errs: list[float], q: float) -> float:
    return errs[min(len(errs) - 1, int(q * len(errs)))]


def measure(graph, name: str, preset: str) -> dict:
    arch = load_preset(preset)
    t0 = time.perf_counter()
    try:
        cm = compile_graph(graph, arch, name=name)
    except Exception as exc:  # noqa: BLE001 - a table cell, e.g. does not fit
        return {"model": name, "preset": preset, "error": f"{type(exc).__name__}: {exc}"}
    backend_s = time.perf_counter() - t0
    prof = cm.profile
    rows = [(abs(lay.estimated_cycles - lay.cycles) / lay.cycles, lay)
            for lay in prof.layers if lay.cycles]
    # the worst layer: the largest relative error, then the largest absolute one
    rows.sort(key=lambda r: (r[0], abs(r[1].estimated_cycles - r[1].cycles)))
    errs = [100 * e for e, _ in rows]
    worst = rows[-1][1]
    est = sum(lay.estimated_cycles for lay in prof.layers)
    return {"model": name, "preset": preset, "cycles": prof.cycles, "estimate": est,
            "whole": 100 * (est - prof.cycles) / prof.cycles, "p50": _quantile(errs, 0.5),
            "p90": _quantile(errs, 0.9), "max": errs[-1], "layers": len(errs),
            "worst": f"{worst.name} ({worst.op}, est {worst.estimated_cycles:,} / sim "
                     f"{worst.cycles:,})" if errs[-1] else "- (every layer exact)",
            "backend_s": backend_s}


def _verdict(r: dict) -> str:
    ok = r["p90"] <= GOAL_P90 and r["max"] <= GOAL_MAX and abs(r["whole"]) <= GOAL_WHOLE
    return "met" if ok else "not met"


def table(results: list[dict]) -> str:
    lines = ["| model | preset | simulated cycles | whole model | per layer p50 | p90 | max | "
             "worst layer | backend s | goal |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['preset']} | does not fit: {r['error'][:90]} "
                         "| | | | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['preset']} | {r['cycles']:,} | {r['whole']:+.1f} % | "
                     f"{r['p50']:.1f} % | {r['p90']:.1f} % | {r['max']:.1f} % | {r['worst']} | "
                     f"{r['backend_s']:.2f} | {_verdict(r)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=None,
                    help="directory for the quantised graphs (reused across runs)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0)
    results = []
    with threadpool_limits(1):
        for name in args.models:
            graph = quantised_graph(name, args.calibration, args.cache)
            for p in args.presets.split(","):
                results.append(measure(graph, name, p))
                print(f"done {name} {p}", flush=True)
                if args.json is not None:
                    args.json.write_text(json.dumps(results, indent=1))
    print()
    print(table(results))


if __name__ == "__main__":
    main()
