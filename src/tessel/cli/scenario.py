"""CLI: `tessel scenario check FILE|NAME [--json]`: validate a scenario file;
`tessel scenario run FILE|NAME --target PRESET`: schedule it on one NPU and report latency,
deadlines and power (text, --json, --html, --trace) (tessel.scenario); it exits 1 when a
deadline is missed (or, with --functional, a model is not bit-exact)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tessel.cli.backend import add_wide_argument, table_width
from tessel.cli.hw import add_target_argument
from tessel.errors import TesselConfigError
from tessel.fileio import check_writable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenario", help="several models on one NPU at their rates: check a "
                       "scenario file, or schedule it and report deadlines and power")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    check = actions.add_parser("check", help="validate a scenario TOML file (or a shipped "
                               "scenario by name): every error names the line and the field")
    check.add_argument("scenario", help="path/to/scenario.toml, or a shipped scenario's name")
    check.add_argument("--json", action="store_true", help="print the scenario as JSON")
    check.set_defaults(func=cmd_check)
    run = actions.add_parser("run", help="schedule a scenario on one NPU over its hyperperiod "
                             "(or --window-ms): latency p50/p99/max, deadline misses, NPU "
                             "busy, energy per frame and average power; exit status 1 when a "
                             "deadline is missed")
    run.add_argument("scenario", help="path/to/scenario.toml, or a shipped scenario's name")
    add_target_argument(run)
    run.add_argument("--policy", choices=("rm", "edf"), default="rm",
                     help="rm: fixed priority (given priorities, else rate monotonic; "
                     "default); edf: earliest deadline first")
    run.add_argument("--window-ms", type=float, default=None,
                     help="simulate this window (default: the hyperperiod)")
    run.add_argument("--idle-gating", type=float, default=0.0, metavar="FRACTION",
                     help="share of the leakage power gating removes while the NPU is idle "
                     "(0 .. 1, default 0; --dvfs race gates all of it)")
    run.add_argument("--dvfs", choices=("race", "slowest"), default=None,
                     help="pick the target's operating point: race (the fastest, power-gated "
                     "when idle) or slowest (the slowest point that meets every deadline); "
                     "default: the nominal point")
    run.add_argument("--seed", type=int, default=0, help="seed of the release jitter draws")
    run.add_argument("--no-preemption", action="store_true",
                     help="a started job runs to its end (default: preemption at step "
                     "boundaries)")
    run.add_argument("--resident-constants", default="none", metavar="none|auto|KIB",
                     help="keep models' constants on chip across frames: none (default: "
                     "every frame reads them), auto (try SRAM reserves of 0 to 1/2 of the "
                     "scratchpad, keep the lowest power), or KiB of SRAM to reserve")
    run.add_argument("--functional", action="store_true", help="also compile every model, "
                     "run its first frame on the simulator and check it bit for bit against "
                     "the golden model")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument("--html", metavar="OUT.html", help="write the HTML report (timeline, "
                     "power breakdown)")
    run.add_argument("--trace", metavar="OUT.json", help="write a Perfetto / chrome://tracing "
                     "trace, one track per model")
    add_wide_argument(run)
    run.set_defaults(func=cmd_run)


def cmd_check(args: argparse.Namespace) -> int:
    from tessel.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    if args.json:
        print(json.dumps({"name": scenario.name, "description": scenario.description,
                          "hyperperiod_s": scenario.hyperperiod_s,
                          "chains": [list(c) for c in scenario.chains()],
                          "models": [{"name": m.name, "model": m.model, "rate_hz": m.rate_hz,
                                      "period_s": m.period_s, "deadline_s": m.deadline_s,
                                      "priority": m.priority, "after": list(m.after),
                                      "inputs": None if m.inputs is None else str(m.inputs),
                                      "offset_s": m.offset_s, "jitter_s": m.jitter_s,
                                      "line": m.line} for m in scenario.models]},
                         indent=1, sort_keys=True))
    else:
        print(scenario.summary())
        print("ok")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tessel.arch import load_target
    from tessel.progress import info
    from tessel.scenario import load_scenario
    from tessel.scenario.run import run_scenario
    from tessel.scenario.scheduler import Policy

    scenario = load_scenario(args.scenario)
    arch = load_target(args.target)
    if args.html and args.trace and Path(args.html).resolve() == Path(args.trace).resolve():
        raise TesselConfigError(f"--html and --trace name the same file: {args.html}")
    for out in (args.html, args.trace):  # before any model is quantised
        check_writable(out, inputs=_read_files(args, scenario))
    options = dict(policy=Policy(args.policy),
                   window_s=None if args.window_ms is None else args.window_ms / 1e3,
                   seed=args.seed, preemptive=not args.no_preemption,
                   resident_constants=_reserve(args.resident_constants), progress=info)
    dvfs = None
    if args.dvfs is None:
        report = run_scenario(scenario, arch, idle_gating=args.idle_gating, **options)
    else:
        from tessel.arch.dvfs import DvfsPolicy
        from tessel.codesign.dvfs import run_dvfs

        dvfs = run_dvfs(scenario, arch, DvfsPolicy(args.dvfs), idle_gating=args.idle_gating,
                        **options)
        report = dvfs.report
    checks = None
    if args.functional:
        from tessel.scenario.functional import check_first_frames

        checks = check_first_frames(scenario, arch, progress=info, constants=report.constants)
    if args.html:
        from tessel.scenario.html import write_scenario_html

        info(f"wrote {write_scenario_html(report, args.html, None if dvfs is None else dvfs.as_dict())}")
    if args.trace:
        from tessel.scenario.trace import write_trace

        info(f"wrote {write_trace(report, args.trace)}")
    failed = report.misses > 0 or any(not c.bit_exact for c in checks or ())
    if args.json:
        data = report.as_dict()
        if dvfs is not None:
            data["dvfs"] = dvfs.as_dict()
        if checks is not None:
            data["functional"] = [c.as_dict() for c in checks]
        print(json.dumps(data, indent=1, sort_keys=True))
        return 1 if failed else 0
    if dvfs is not None:
        print(dvfs.summary())
    print(report.text(table_width(args)))
    if checks is not None:
        for c in checks:
            print(c.line())
    return 1 if failed else 0


def _read_files(args: argparse.Namespace, scenario) -> list[Path]:
    """What `scenario run` reads: the scenario file, a target file, model and input files."""
    files = [scenario.path, Path(args.target) if args.target.endswith(".toml") else None]
    for m in scenario.models:
        file = m.model.rpartition(":")[0] if ".py:" in m.model else m.model
        files += [Path(file) if Path(file).suffix else None, m.inputs]
    return [f for f in files if f is not None]


def _reserve(text: str):
    """--resident-constants: `Reserve.AUTO`, or the bytes to reserve ("none": 0)."""
    from tessel.scenario.run import Reserve

    if text == "none":
        return 0
    if text == Reserve.AUTO.value:
        return Reserve.AUTO
    try:
        return int(text) * 1024
    except ValueError:
        raise TesselConfigError(f"--resident-constants must be none, auto or a number of KiB, "
                                f"got {text!r}") from None
