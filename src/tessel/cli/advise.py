"""CLI: `tessel advise MODEL --target PRESET [--json] [--calibration N] [--layers N] [--confirm]`:
co-design advice (tessel.analysis.advise) — which hardware limit binds and what each 2x
relaxation of the NPU buys, ranked, with its area cost. `tessel advise --scenario FILE|NAME
--target PRESET`: the same for a scenario (tessel.scenario.advise) — the model and layers that
limit its schedule, and each relaxation's gain with the whole scenario run again."""

from __future__ import annotations

import argparse
import json

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.cli.backend import (
    add_cache_argument,
    add_data_arguments,
    add_wide_argument,
    quantised_graph,
    table_width,
)
from tessel.errors import TesselConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "advise", help="co-design advice: the binding hardware limit per layer and the gain "
        "of relaxing each NPU parameter by 2x (compiler in the loop), ranked, with area cost")
    p.add_argument("model", nargs="?", help="zoo name (see `tessel models`), "
                   "path/to/file.py:factory, model.pt2, model.onnx, model.tflite or model.tosa")
    p.add_argument("--scenario", metavar="FILE|NAME", help="advise for a scenario instead of "
                   "one model: the model and layers limiting its schedule, and what each 2x "
                   "relaxation gains with the whole scenario run again (deadline slack, busy, "
                   "average power)")
    p.add_argument("--policy", choices=("rm", "edf"), default="rm",
                   help="with --scenario: the scheduling policy (see `tessel scenario run`)")
    p.add_argument("--window-ms", type=float, default=None,
                   help="with --scenario: simulate this window (default: the hyperperiod)")
    p.add_argument("--idle-gating", type=float, default=0.0, metavar="FRACTION",
                   help="with --scenario: share of idle leakage power-gated (0 .. 1)")
    p.add_argument("--resident-constants", default="none", metavar="none|auto|KIB",
                   help="with --scenario: constants kept on chip (see `tessel scenario run`)")
    p.add_argument("--target", default="tnpu-s", help="preset name or path to a .toml file")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIBRATION_SAMPLES})")
    add_data_arguments(p)
    add_cache_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--layers", type=int, default=15, metavar="N",
                   help="slowest layers shown in the text table (default 15)")
    p.add_argument("--confirm", action="store_true", help="recompile the model with the top "
                   "relaxation and compare the prediction with the simulated cycles")
    add_wide_argument(p)
    p.set_defaults(func=cmd_advise)


def cmd_advise(args: argparse.Namespace) -> int:
    from tessel.analysis.advise import advise, confirm
    from tessel.arch import load_target
    from tessel.models import resolve

    if args.layers < 0:
        raise TesselConfigError(f"--layers must be >= 0, got {args.layers}")
    if (args.model is None) == (args.scenario is None):
        raise TesselConfigError("give a MODEL or --scenario FILE|NAME (one of them)")
    arch = load_target(args.target)
    if args.scenario is not None:
        return _advise_scenario(args, arch)
    given = [o for o, v in (("--policy", args.policy != "rm"), ("--window-ms", args.window_ms),
                            ("--idle-gating", args.idle_gating),
                            ("--resident-constants", args.resident_constants != "none")) if v]
    if given:
        raise TesselConfigError(f"{', '.join(given)}: only with --scenario")
    spec = resolve(args.model)
    graph = quantised_graph(args, spec)
    advice = advise(graph, arch, name=spec.name)
    check = confirm(graph, arch, advice) if args.confirm and advice.ranked else None
    if args.json:
        data = advice.to_dict()
        if check is not None:
            data["confirmation"] = check.__dict__
        print(json.dumps(data, indent=1, sort_keys=True))
        return 0
    print(advice.table(args.layers, table_width(args)))
    if check is not None:
        gain = "" if check.simulated_gain_pct is None else \
            f", simulated gain {check.simulated_gain_pct:.2f} %"
        print(f"\nconfirmed by recompiling with {check.change}: predicted "
              f"{check.predicted_cycles} cycles, simulated {check.simulated_cycles} "
              f"({check.error_pct:+.2f} %{gain})")
    return 0


def _advise_scenario(args: argparse.Namespace, arch) -> int:
    from tessel.cli.scenario import _reserve
    from tessel.progress import info
    from tessel.scenario import load_scenario
    from tessel.scenario.advise import advise_scenario
    from tessel.scenario.scheduler import Policy

    if args.confirm:
        raise TesselConfigError("--confirm is for one model: with --scenario every relaxation "
                                "is already measured by running the scenario again")
    scenario = load_scenario(args.scenario)
    advice = advise_scenario(
        scenario, arch, policy=Policy(args.policy),
        window_s=None if args.window_ms is None else args.window_ms / 1e3,
        idle_gating=args.idle_gating, resident_constants=_reserve(
            args.resident_constants), progress=info)
    if args.json:
        print(advice.to_json())
    else:
        print(advice.text(table_width(args)))
    return 0
