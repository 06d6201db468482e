"""Weight precision: int8, int4 and the per-layer choice under an accuracy budget
(`--weights auto`, tessel.analysis.precision), per model: constants bytes, simulated cycles
on a target, and the accuracy figure the budget is measured in (held-out inputs).

Run: ``python -m benchmarks.bench_precision [MODEL ...] [--target PRESET]``; prints one
markdown table. Figures: ``auto_bytes_saved/MODEL`` (fraction of int8's constants bytes) and
``auto_vs_int8_cycles/MODEL``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from benchmarks.report import Section
from tessel.analysis.accuracy import eval_set
from tessel.analysis.precision import (
    AccuracyBudget,
    Metric,
    choose_weights,
    float_outputs,
    golden_evaluator,
    golden_outputs,
    measure,
)
from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.models import load, resolve
from tessel.quant.api import quantize
from tessel.quant.config import WeightDtype, default_config

MODELS = {"resnet18": "sqnr=1", "minilm": "cosine=0.01"}
CALIBRATION = 32  # min/max ranges: 16 samples leave some held-out ResNet-18 inputs clipped
HELD_OUT = 8
HEAD = ("| model | weights | constants bytes | cycles | metric (held-out) | int4 layers |\n"
        "|---|---|---:|---:|---:|---:|")


def _row(name: str, what: str, graph_bytes: int, cycles: int, value: float, metric: Metric,
         layers: str) -> str:
    unit = " dB" if metric is Metric.SQNR else ""
    return (f"| {name} | {what} | {graph_bytes:,} | {cycles:,} | {metric.value} {value:.4f}{unit}"
            f" | {layers} |")


def one(name: str, budget_text: str, target: str) -> tuple[list[str], dict[str, float]]:
    spec = resolve(name)
    model, example = load(name)
    calibration = list(spec.calibration_data(CALIBRATION))
    held_out = eval_set(spec, CALIBRATION, HELD_OUT, example)[0][:HELD_OUT]
    budget = AccuracyBudget.parse(budget_text)
    evaluate = golden_evaluator(model, example, calibration, held_out, CALIBRATION)
    base = default_config(spec.name)
    plan = choose_weights(model, evaluate, held_out, budget, base, name)
    arch = load_target(target)
    rows, results = [], {}
    configs = (("int8", base, "0"), ("int4", replace(base, weights=WeightDtype.INT4), "all"),
               (f"auto ({budget})", plan.config, f"{len(plan.int4_layers)} of {len(plan.layers)}"))
    floats = float_outputs(model, held_out)
    for what, config, layers in configs:
        qm = quantize(model, example, calibration, config, calibration_samples=CALIBRATION)
        cm = compile_graph(qm.graph, arch, name=name)
        value = measure(budget.metric, floats, golden_outputs(qm, held_out))
        nbytes = len(cm.program.constants)
        results[what.split()[0]] = (nbytes, cm.profile.cycles)
        rows.append(_row(name, what, nbytes, cm.profile.cycles, value, budget.metric, layers))
        print(rows[-1], file=sys.stderr, flush=True)
    (b8, c8), (ba, ca) = results["int8"], results["auto"]
    return rows, {f"auto_bytes_saved/{name}": 1 - ba / b8,
                  f"auto_vs_int8_cycles/{name}": ca / c8}


def run(models: dict[str, str], target: str = "u55-256") -> Section:
    rows, figures = [], {}
    for name, budget in models.items():
        r, f = one(name, budget, target)
        rows += r
        figures.update(f)
    command = "python -m benchmarks.bench_precision" + (
        "" if models == MODELS else " " + " ".join(models)) + (
        f" --target {target}" if target != "u55-256" else "")
    return Section(f"Weight precision: int8, int4 and auto on {target}", command,
                   f"Calibration {CALIBRATION} samples, {HELD_OUT} held-out inputs (as `tessel "
                   "accuracy` picks them); auto: the budget in the weights column, against "
                   "all-int8.\n\n" + HEAD + "\n" + "\n".join(rows), figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--target", default="u55-256")
    ap.add_argument("--budget", default=None, help="METRIC=LOSS for every model given")
    args = ap.parse_args()
    models = {m: args.budget or MODELS.get(m, "sqnr=1") for m in args.models}
    print(run(models, args.target).markdown)


if __name__ == "__main__":
    main()
