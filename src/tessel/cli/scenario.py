"""CLI: `tessel scenario check FILE|NAME [--json]`: validate a scenario file (tessel.scenario)."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenario", help="several models on one NPU at their rates: check a "
                       "scenario file")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    check = actions.add_parser("check", help="validate a scenario TOML file (or a shipped "
                               "scenario by name): every error names the line and the field")
    check.add_argument("scenario", help="path/to/scenario.toml, or a shipped scenario's name")
    check.add_argument("--json", action="store_true", help="print the scenario as JSON")
    check.set_defaults(func=cmd_check)


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
