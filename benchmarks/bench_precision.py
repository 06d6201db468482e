"""Weight precision: int8, int4 and the per-layer choice under an accuracy budget
(`--weights auto`, tessel.analysis.precision), per model: constants bytes, simulated cycles
on a target, energy on tnpu-s, and the accuracy figure the budget is measured in (held-out
inputs); then the auto choice for a target whose flash is smaller than the int8 constants
(MiniLM and ResNet-18, pruned 2:4, on tnpu-xs with its weight decoder and sparsity on),
compiled and run against the golden model.

Run: ``python -m benchmarks.bench_precision [MODEL ...] [--target PRESET] [--no-fit | --fit-only]``; prints
markdown tables. Figures: ``auto_bytes_saved/MODEL`` (fraction of int8's constants bytes),
``auto_vs_int8_cycles/MODEL``, ``auto_energy_saved/MODEL`` (fraction of int8's energy on
tnpu-s), ``auto_metric_loss/MODEL`` (int8's metric less auto's) and ``fit_vs_memory/MODEL``
(constants / flash bytes on the fit target; over 1 when even all-int4 does not fit),
``fit_exact/MODEL`` (1 when the fitted program ran bit-exact); ``int4_metric/MODEL/ROUNDING``
(all-int4, each ``Int4Rounding``; ``int8``: int8 weights) and ``quantise_cpu_s/MODEL/ROUNDING``
(CPU seconds of ``quantize``), ``pruned_float_metric/MODEL`` (the pruned float model against the
float model). The fit rows are of the models pruned 2:4 (`tessel.prune_2_4`, SparseGPT on the
calibration inputs; MiniLM then with a short fine-tune), on tnpu-xs with 2:4 sparsity and the
weight decoder.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from benchmarks.report import Section
from tessel.analysis.accuracy import eval_set
from tessel.analysis.precision import (
    AccuracyBudget,
    InputPrecision,
    Metric,
    choose_weights,
    float_outputs,
    golden_evaluator,
    golden_outputs,
    measure,
    memory_limit,
)
from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError
from tessel.models import load, resolve
from tessel.prune import PruneMethod, prune_2_4
from tessel.quant.api import quantize
from tessel.quant.config import Int4Rounding, WeightDtype, default_config

MODELS = {"resnet18": "sqnr=1", "minilm": "cosine=0.01"}
CALIBRATION = 32  # min/max ranges: 16 samples leave some held-out ResNet-18 inputs clipped
HELD_OUT = 8
ENERGY_TARGET = "tnpu-s"  # the energy column's preset (off-chip LPDDR dominates its energy)
FINETUNE_STEPS, FINETUNE_LR = 32, 0.01  # MiniLM's pruning fine-tune (tessel.prune_2_4)
# the 2:4 choice: SparseGPT on the calibration inputs (held-out pruned float vs float: MiniLM
# cosine 0.822, ResNet-18 SQNR 18.6 dB; magnitude: 0.657, -1.3 dB)
PRUNE_METHOD = PruneMethod.SPARSEGPT
# model -> target, its settings, whether the model is pruned 2:4 first (tessel.prune_2_4),
# and the fine-tune steps of the pruning (on the calibration inputs; 0: none)
_XS_SPARSE = {"wdecoder.enabled": True, "sparse.enabled": True}
FIT = {"minilm": ("tnpu-xs", _XS_SPARSE, True, FINETUNE_STEPS),
       "resnet18": ("tnpu-xs", _XS_SPARSE, True, 0)}
HEAD = ("| model | weights | constants bytes | cycles | energy mJ (tnpu-s) | metric (held-out) "
        "| int4 layers |\n|---|---|---:|---:|---:|---:|---:|")
ROUNDING_HEAD = ("| model | int4 rounding | metric, all int4 (held-out) | quantise CPU s |\n"
                 "|---|---|---:|---:|")
FIT_HEAD = ("| model | target | budget | pruned float vs float | constants bytes | flash bytes "
            "| int4 layers | metric (held-out) | budget met | bit-exact |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---|---|")


def _unit(metric: Metric) -> str:
    return " dB" if metric is Metric.SQNR else ""


def _row(name: str, what: str, graph_bytes: int, cycles: int, energy_uj: float, value: float,
         metric: Metric, layers: str) -> str:
    return (f"| {name} | {what} | {graph_bytes:,} | {cycles:,} | {energy_uj / 1e3:.3f} | "
            f"{metric.value} {value:.4f}{_unit(metric)} | {layers} |")


def _roundings(name: str, model, example, calibration, metric: Metric, floats, held_out,
               base) -> tuple[list[str], dict[str, float]]:
    """All-int4 accuracy and quantisation CPU time of each int4 rounding (int8's time first)."""
    rows, figures = [], {}
    for rounding in (None, *Int4Rounding):
        config = base if rounding is None else replace(base, weights=WeightDtype.INT4,
                                                       int4_rounding=rounding)
        start = time.process_time()
        qm = quantize(model, example, calibration, config, calibration_samples=CALIBRATION)
        seconds = time.process_time() - start
        value = measure(metric, floats, golden_outputs(qm, held_out))
        what = "(int8 weights)" if rounding is None else rounding.value
        rows.append(f"| {name} | {what} | {metric.value} {value:.4f}{_unit(metric)} | "
                    f"{seconds:.1f} |")
        figures[f"int4_metric/{name}/{what.strip('()').split()[0]}"] = value
        figures[f"quantise_cpu_s/{name}/{what.strip('()').split()[0]}"] = seconds
        print(rows[-1], file=sys.stderr, flush=True)
    return rows, figures


def one(name: str, budget_text: str, target: str, fit: bool = True, fit_only: bool = False
        ) -> tuple[list[str], list[str], list[str], dict[str, float]]:
    spec = resolve(name)
    model, example = load(name)
    calibration = list(spec.calibration_data(CALIBRATION))
    held_out = eval_set(spec, CALIBRATION, HELD_OUT, example)[0][:HELD_OUT]
    budget = AccuracyBudget.parse(budget_text)
    base = default_config(spec.name)
    floats = float_outputs(model, held_out)
    if fit_only:
        return [], [], *_fit_rows(name, model, example, calibration, held_out, budget, base,
                                  floats, {})
    evaluate = golden_evaluator(model, example, calibration, held_out, CALIBRATION)
    plan = choose_weights(model, evaluate, held_out, budget, base, name)
    plan16 = choose_weights(model, evaluate, held_out, budget, base, name, activations=InputPrecision.AUTO)
    inputs16 = len(plan16.int16_inputs)
    arch, energy_arch = load_target(target), load_target(ENERGY_TARGET)
    rows, results = [], {}
    configs = (("int8", base, "0"), ("int4", replace(base, weights=WeightDtype.INT4), "all"),
               (f"auto ({budget})", plan.config, f"{len(plan.int4_layers)} of {len(plan.layers)}"),
               (f"auto16 ({budget}, --activations auto: {inputs16} int16 inputs)", plan16.config,
                f"{len(plan16.int4_layers)} of {len(plan16.layers)}"))
    for what, config, layers in configs:
        qm = quantize(model, example, calibration, config, calibration_samples=CALIBRATION)
        cm = compile_graph(qm.graph, arch, name=name)
        energy = compile_graph(qm.graph, energy_arch, name=name).profile.energy_uj
        value = measure(budget.metric, floats, golden_outputs(qm, held_out))
        nbytes = len(cm.program.constants)
        results[what.split()[0]] = (nbytes, cm.profile.cycles, energy, value)
        rows.append(_row(name, what, nbytes, cm.profile.cycles, energy, value, budget.metric,
                         layers))
        print(rows[-1], file=sys.stderr, flush=True)
    (b8, c8, e8, v8), (ba, ca, ea, va) = results["int8"], results["auto"]
    figures = {f"auto_bytes_saved/{name}": 1 - ba / b8, f"auto_vs_int8_cycles/{name}": ca / c8,
               f"auto_energy_saved/{name}": 1 - ea / e8, f"auto_metric_loss/{name}": v8 - va}
    b16, c16, e16, v16 = results["auto16"]
    figures.update({f"auto16_bytes_saved/{name}": 1 - b16 / b8,
                    f"auto16_vs_int8_cycles/{name}": c16 / c8,
                    f"auto16_energy_saved/{name}": 1 - e16 / e8,
                    f"auto16_metric_loss/{name}": v8 - v16})
    rounding_rows, rounding_figures = _roundings(name, model, example, calibration,
                                                 budget.metric, floats, held_out, base)
    figures.update(rounding_figures)
    if not fit:
        return rows, rounding_rows, [], figures
    return rows, rounding_rows, *_fit_rows(name, model, example, calibration, held_out, budget,
                                           base, floats, figures)


def _fit_rows(name: str, model, example, calibration, held_out, budget: AccuracyBudget, base,
              floats, figures: dict[str, float]) -> tuple[list[str], dict[str, float]]:
    """FIT's row of the model (none when it has none), and `figures` with its figures."""
    if name not in FIT:
        return [], figures
    pruned = "-"
    if FIT[name][2]:  # pruned: the plan is measured against the pruned float model
        steps = FIT[name][3]
        model = prune_2_4(model, method=PRUNE_METHOD, calibration_data=calibration,
                          finetune_data=calibration if steps else None, steps=steps,
                          lr=FINETUNE_LR)[0]
        value = measure(budget.metric, floats, float_outputs(model, held_out))
        figures[f"pruned_float_metric/{name}"] = value
        pruned = f"{budget.metric.value} {value:.4f}{_unit(budget.metric)}"
        print(f"{name} pruned 2:4: {pruned} against the float model", file=sys.stderr,
              flush=True)
    evaluate = golden_evaluator(model, example, calibration, held_out, CALIBRATION)
    row, figures[f"fit_vs_memory/{name}"], exact = _fit_row(name, model, budget, evaluate,
                                                            held_out, base, pruned)
    if exact is not None:
        figures[f"fit_exact/{name}"] = float(exact)
    print(row, file=sys.stderr, flush=True)
    return [row], figures


def _fit_row(name: str, model, budget: AccuracyBudget, evaluate, held_out, base, vs_float: str
             ) -> tuple[str, float, bool | None]:
    """--weights auto for FIT's target: the plan, compiled and run on one held-out input
    (`vs_float`: the pruned float model's metric against the float model's)."""
    preset, settings, pruned, steps = FIT[name]
    arch = load_target(preset).with_params(settings)
    limit = memory_limit(arch, evaluate, name)
    where = preset + "".join(f", {k}={str(v).lower()}" for k, v in settings.items())
    name_2_4 = name + ((f" (2:4, {steps}-step fine-tune)" if steps else " (2:4)") if pruned
                       else "")
    try:
        plan = choose_weights(model, evaluate, held_out, budget, base, name, limit)
    except TesselCompileError as e:
        need = int(str(e).split("constants need ")[1].split()[0].replace(",", ""))
        return (f"| {name_2_4} | {where} | {budget} | {vs_float} | {need:,} (all int4) | "
                f"{limit.size:,} "
                "| all | - | - | does not fit |"), need / limit.size, None
    qm = evaluate.quantised(plan.config)
    cm = compile_graph(qm.graph, arch, name=name)
    got, want = cm.run(*held_out[0]), qm.run(*held_out[0])
    exact = all((g == w).all() for g, w in zip(got, want, strict=True))
    return (f"| {name_2_4} | {where} | {budget} | {vs_float} | {len(cm.program.constants):,} | "
            f"{limit.size:,} | {len(plan.int4_layers)} of {len(plan.layers)} | "
            f"{budget.metric.value} {plan.value:.4f}{_unit(budget.metric)} | "
            f"{'yes' if plan.budget_met else 'no'} | {'yes' if exact else 'NO'} |"
            ), len(cm.program.constants) / limit.size, exact


def run(models: dict[str, str], target: str = "u55-256", fit: bool = True,
        fit_only: bool = False) -> Section:
    rows, rounding_rows, fit_rows, figures = [], [], [], {}
    for name, budget in models.items():
        r, rr, f, figs = one(name, budget, target, fit, fit_only)
        rows += r
        rounding_rows += rr
        fit_rows += f
        figures.update(figs)
    command = "python -m benchmarks.bench_precision" + (
        "" if models == MODELS else " " + " ".join(models)) + (
        f" --target {target}" if target != "u55-256" else "") + ("" if fit else " --no-fit") + (
        " --fit-only" if fit_only else "")
    text = (f"Calibration {CALIBRATION} samples, {HELD_OUT} held-out inputs (as `tessel "
            "accuracy` picks them)")
    if not fit_only:
        text += ("; auto: the budget in the weights column, against all-int8; energy: the same "
                 f"model compiled for {ENERGY_TARGET}.\n\n" + HEAD + "\n" + "\n".join(rows))
        text += ("\n\nint4 rounding (`QuantConfig.int4_rounding`, docs/numerics.md): every layer's "
                 "weights int4, the metric on the held-out inputs, and the CPU time of "
                 f"`quantize` with {CALIBRATION} calibration samples.\n\n" + ROUNDING_HEAD
                 + "\n" + "\n".join(rounding_rows))
    else:
        text += "."
    if fit_rows:
        text += ("\n\nThe constants must fit the target's flash (`--weights auto` on it): "
                 "the fewest int4 layers of the order that fit when the budget's do not; "
                 "compiled for the target and run on one held-out input against the golden "
                 "model. A model marked 2:4 is pruned by `tessel.prune_2_4` first (method "
                 f"{PRUNE_METHOD.value} on the calibration inputs, then the "
                 "fine-tune it names, on the calibration inputs at learning rate "
                 f"{FINETUNE_LR}); its metric is against the pruned float model, the pruned "
                 "float model's against the float model's in its own column.\n\n" + FIT_HEAD + "\n"
                 + "\n".join(fit_rows))
    return Section(f"Weight precision: int8, int4 and auto on {target}", command, text, figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--target", default="u55-256")
    ap.add_argument("--budget", default=None, help="METRIC=LOSS for every model given")
    ap.add_argument("--no-fit", action="store_true", help="skip the fit-the-flash rows")
    ap.add_argument("--fit-only", action="store_true", help="only the fit-the-flash rows")
    args = ap.parse_args()
    models = {m: args.budget or MODELS.get(m, "sqnr=1") for m in args.models}
    section = run(models, args.target, not args.no_fit, args.fit_only)
    print(section.markdown)
    for key, value in sorted(section.figures.items()):
        print(f"{key}: {value:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
