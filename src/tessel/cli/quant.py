"""CLI: `tessel accuracy MODEL [--calibration N] [--samples M] [--target PRESET] [--json]
[--layer-precision PATTERN[:OP]=TYPE] [--per-layer [--advise K] [--cycles-budget PCT]]`."""

from __future__ import annotations

import argparse
import json
import math

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.cli.backend import add_precision_argument
from tessel.errors import TesselConfigError

ADVISE_LAYERS = 5  # --per-layer: the worst layers whose precision changes are measured


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accuracy", help="quantise a model and compare the golden (integer) "
                       "model with float PyTorch: SQNR, top-1, accuracy, cosine, host ops; "
                       "--per-layer: where precision goes and what a change would give")
    p.add_argument("model", help="zoo name (see `tessel models`), path/to/file.py:factory, "
                   "model.pt2, model.onnx or model.tflite (a .tosa graph has no float model)")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIBRATION_SAMPLES})")
    p.add_argument("--samples", type=int, default=16, metavar="M",
                   help="evaluation inputs for models without a test set (default 16)")
    p.add_argument("--target", metavar="PRESET", help="also compile for this preset (or .toml) "
                   "and simulate every evaluation input, batched: how many are bit-exact "
                   "with the golden model")
    add_precision_argument(p)
    p.add_argument("--per-layer", action="store_true",
                   help="SQNR of every quantised activation, the layers that lose the most, "
                   "and for the worst ones the precision changes measured (whole-model SQNR "
                   "gain, cycles on --target or tnpu-s) with the option that applies each")
    p.add_argument("--advise", type=int, default=ADVISE_LAYERS, metavar="K",
                   help=f"with --per-layer: measure changes for the K worst layers (default "
                   f"{ADVISE_LAYERS}; 0: none)")
    p.add_argument("--cycles-budget", type=float, default=10.0, metavar="PCT",
                   help="with --per-layer: the combined change may cost at most PCT %% more "
                   "cycles (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_accuracy)


def _finite(value: object) -> object:
    """JSON has no inf / nan: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def cmd_accuracy(args: argparse.Namespace) -> int:
    from tessel.analysis.accuracy import evaluate
    from tessel.models import resolve
    from tessel.quant.config import default_config, parse_layer_precision, with_precision_choices

    if args.calibration < 1 or args.samples < 1 or args.advise < 0:
        raise TesselConfigError("--calibration and --samples must be >= 1, --advise >= 0")
    if args.model.lower().endswith(".tosa"):
        raise TesselConfigError(
            f"{args.model} is an integer TOSA graph: there is no float model to compare with "
            "(`tessel compile` it and `tessel run --check` for bit-exactness)")
    config = with_precision_choices(default_config(resolve(args.model).name), [
        parse_layer_precision(t) for t in args.layer_precision])
    report = evaluate(args.model, calibration=args.calibration, eval_samples=args.samples,
                      quant_config=config, target=getattr(args, "target", None))
    advice = None
    if args.per_layer:
        from tessel.analysis.precision_advice import advise_model

        advice = advise_model(args.model, args.calibration, args.samples, config,
                              target=args.target or "tnpu-s", layers=args.advise,
                              cycles_budget=args.cycles_budget)
    if args.json:
        out = {k: _finite(v) for k, v in report.to_json().items()}
        if advice is not None:
            out["per_layer"] = _finite(advice.to_json())
        print(json.dumps(out))
        return 0
    print(report.text())
    if advice is not None:
        from tessel.cli.backend import table_width

        print()
        print(advice.text(table_width(args)))
    return 0
