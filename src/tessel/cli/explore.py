"""`tessel explore MODEL [MODEL ...] --space space.toml`: design-space exploration (the Pareto
front of latency, energy per inference and area; see tessel.analysis.explore)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "explore", help="design-space exploration: Pareto front of latency, energy, area",
        description="Vary NpuArch parameters (space.toml), estimate every model on every design "
        "point with the compiler in the loop, write the Pareto front (CSV, plot, TOML presets).")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="zoo name, path/to/file.py:factory or model file (.pt2, .onnx, "
                   ".tflite, .tosa); none with --scenario")
    p.add_argument("--scenario", metavar="FILE|NAME",
                   help="instead of models: the design of lowest average power that runs this "
                   "scenario with no deadline miss (space: parameters and `operating_point`, "
                   "[constraints] max_area_mm2); the best design is confirmed by running the "
                   "scenario again from its preset file and simulating every model")
    p.add_argument("--idle-gating", type=float, default=0.0, metavar="FRACTION",
                   help="with --scenario: share of the idle leakage power gating removes "
                   "(0 .. 1, default 0)")
    p.add_argument("--space", required=True, type=Path, help="space file (TOML)")
    p.add_argument("--target", default="tnpu-s", help="base preset or .toml (default tnpu-s)")
    p.add_argument("--out", type=Path, default=Path("explore-out"),
                   help="output folder: study file (resumable), pareto.csv/png, presets/")
    p.add_argument("--workers", type=int, default=1,
                   help="local worker processes (default 1; 0 = in this process)")
    p.add_argument("--ray", metavar="auto|ADDRESS",
                   help="run the evaluations as Ray tasks (auto: running cluster or local)")
    p.add_argument("--search", choices=["auto", "exhaustive", "nsga2", "tpe"], default="auto",
                   help="auto (default): exhaustive if the space has <= --trials points, "
                   "else nsga2")
    p.add_argument("--trials", type=int, default=200,
                   help="design points to evaluate with nsga2/tpe (default 200)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES,
                   help=f"calibration samples for quantisation (default {DEFAULT_CALIBRATION_SAMPLES})")
    p.add_argument("--json", action="store_true", help="print the Pareto front as JSON")
    from tessel.cli.backend import add_weight_arguments, add_wide_argument
    add_weight_arguments(p)
    add_wide_argument(p)
    p.set_defaults(func=cmd_explore)


def cmd_explore(args: argparse.Namespace) -> int:
    from tessel.analysis.explore import explore
    from tessel.errors import TesselConfigError
    from tessel.fileio import check_writable

    if args.calibration < 1:
        raise TesselConfigError(f"--calibration must be >= 1, got {args.calibration}")
    check_writable(args.out, directory=True)
    if args.scenario is not None:
        return _explore_scenario(args)
    if not args.models:
        raise TesselConfigError("name at least one MODEL, or a --scenario")
    result = explore(_models(args), args.space, target=args.target, out=args.out,
                     workers=args.workers, ray=args.ray, search=args.search,
                     trials=args.trials, seed=args.seed,
                     calibration_samples=args.calibration, progress=True)
    if args.json:
        print(json.dumps({"models": list(result.models), "base": result.base,
                          "latency": result.space.latency.value, "front": result.front_rows()},
                         indent=1, sort_keys=True))
    else:
        from tessel.cli.backend import table_width
        from tessel.display import fit_text
        print(fit_text(result.summary(), table_width(args)))
        print(result.front_table().text(table_width(args)))
        print("wrote " + ", ".join(str(f) for f in result.files[:3])
              + (f" and {len(result.files) - 3} presets" if len(result.files) > 3 else ""))
    return 0


def _explore_scenario(args: argparse.Namespace) -> int:
    from tessel.analysis.explore import load_space
    from tessel.arch import load_target
    from tessel.cli.backend import table_width
    from tessel.codesign.explore import explore_scenario
    from tessel.errors import TesselConfigError
    from tessel.progress import info
    from tessel.scenario import load_scenario

    if args.models:
        raise TesselConfigError("--scenario explores for the scenario's models: name no MODEL")
    if args.workers != 1 or args.ray or args.search != "auto":
        raise TesselConfigError("--scenario runs every design of the space in this process: "
                                "--workers, --ray and --search do not apply")
    result = explore_scenario(load_scenario(args.scenario), load_space(args.space),
                              load_target(args.target), args.out, progress=info,
                              idle_gating=args.idle_gating, seed=args.seed)
    if args.json:
        print(json.dumps(result.as_dict(), indent=1, sort_keys=True, default=str))
    else:
        print(result.summary())
        print(result.table().text(table_width(args)))
    return 0 if result.confirmation is None or result.confirmation.confirmed else 1


def _models(args: argparse.Namespace):
    """The model names, or with --weights / --layer-weights / --layer-precision their integer
    graphs quantised so (through the graph cache; --weights auto chooses per layer first)."""
    if args.weights == "int8" and not args.layer_weights and not args.layer_precision:
        return args.models
    from tessel.cli.backend import quantised_graph
    from tessel.errors import TesselConfigError
    from tessel.models import resolve

    if len(set(args.models)) != len(args.models):
        raise TesselConfigError(f"a model is named twice: {list(args.models)}")
    return {m: quantised_graph(argparse.Namespace(**{**vars(args), "model": m, "inputs": None,
                                                     "calibration_data": None,
                                                     "no_cache": False}), resolve(m))
            for m in args.models}
