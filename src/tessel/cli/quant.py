"""CLI: `tessel accuracy MODEL [--calibration N] [--samples M] [--target PRESET] [--json]`."""

from __future__ import annotations

import argparse
import json
import math

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.errors import TesselConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accuracy", help="quantise a model and compare the golden (integer) "
                       "model with float PyTorch: SQNR, top-1, accuracy, cosine, host ops")
    p.add_argument("model", help="zoo name (see `tessel models`) or path/to/file.py:factory")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIBRATION_SAMPLES})")
    p.add_argument("--samples", type=int, default=16, metavar="M",
                   help="evaluation inputs for models without a test set (default 16)")
    p.add_argument("--target", metavar="PRESET", help="also compile for this preset (or .toml) "
                   "and simulate every evaluation input, batched: how many are bit-exact "
                   "with the golden model")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_accuracy)


def _finite(value: object) -> object:
    """JSON has no inf / nan: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def cmd_accuracy(args: argparse.Namespace) -> int:
    from tessel.analysis.accuracy import evaluate

    if args.calibration < 1 or args.samples < 1:
        raise TesselConfigError("--calibration and --samples must be >= 1")
    report = evaluate(args.model, calibration=args.calibration, eval_samples=args.samples,
                      target=getattr(args, "target", None))
    if args.json:
        print(json.dumps({k: _finite(v) for k, v in report.to_json().items()}))
    else:
        print(report.text())
    return 0
