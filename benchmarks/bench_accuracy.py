"""Quantisation accuracy of the zoo: the golden (integer) model against float PyTorch, the
figures of `tessel accuracy` (definitions: docs/figures.md, "Quantisation";
`tessel.analysis.accuracy`).

Run: ``python -m benchmarks.bench_accuracy [MODEL ...] [--calibration N] [--samples N]``;
prints one markdown table: per model the SQNR out of sample (the headline figure: held-out
inputs), in sample (the calibration inputs), the golden model against PyTorch's own
fake-quantised (QDQ) model (which separates the integer lowering's error from the
quantisation's), top-1 agreement with float, and the task's own figure (accuracy where labels
exist, cosine for embeddings).
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.report import Section
from tessel.analysis.accuracy import evaluate

MODELS = ["digits_cnn", "ds_cnn", "mobilenet_v2", "resnet18", "vit_small", "minilm"]
HEAD = ("| model | calibration | evaluation inputs | SQNR out of sample (dB) | in sample (dB) | "
        "golden vs QDQ (dB) | top-1 agreement out (in) | other |\n"
        "|---|---:|---|---:|---:|---:|---|---|")


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f} %"


def _row(r) -> str:
    sq = lambda xs: " / ".join(f"{x:.1f}" for x in xs)  # noqa: E731
    top1 = ("" if r.top1_agreement is None else
            f"{_pct(r.top1_agreement)} ({_pct(r.in_sample_top1_agreement)})")
    other = []
    if r.float_accuracy is not None:
        other.append(f"accuracy float / int8 {_pct(r.float_accuracy)} / {_pct(r.int_accuracy)}")
    if r.cosine_mean is not None:
        other.append(f"cosine mean {r.cosine_mean:.4f}, min {r.cosine_min:.4f}")
    if r.host_ops:
        other.append(f"{len(r.host_ops)} host ops")
    return (f"| {r.model} | {r.calibration_samples} | {r.eval_samples} ({r.eval_inputs}) | "
            f"{sq(r.sqnr_db)} | {sq(r.in_sample_sqnr_db)} | {sq(r.qdq_sqnr_db)} | {top1} | "
            f"{'; '.join(other)} |")


def run(models: list[str], calibration: int = 16, samples: int = 8) -> Section:
    rows = []
    for name in models:
        rows.append(_row(evaluate(name, calibration=calibration, eval_samples=samples)))
        print(f"done {name}", file=sys.stderr, flush=True)
    command = "python -m benchmarks.bench_accuracy" + (
        "" if models == MODELS else " " + " ".join(models)) + (
        f" --calibration {calibration}" if calibration != 16 else "") + (
        f" --samples {samples}" if samples != 8 else "")
    return Section("Quantisation accuracy (golden model vs float PyTorch)", command,
                   "The zoo's calibration generator; evaluation inputs held out (digits: its "
                   "test split; MiniLM: the sentences not used for calibration).\n\n"
                   + HEAD + "\n" + "\n".join(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--calibration", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8, help="evaluation inputs (digits: all)")
    args = ap.parse_args()
    print(run(args.models, args.calibration, args.samples).markdown)


if __name__ == "__main__":
    main()
