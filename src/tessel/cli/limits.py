"""The bounds of the CLI's counts, checked once after parsing (docs/cli.md lists them), and the
refusal of a boolean option given both ways (``--x --no-x``).

A count past its bound would ask for unbounded time or memory (``--calibration 1000000000``
calibrates for days and keeps every sample) or for more processes than the host can open
(``explore --workers 100000``): one line naming the flag and its range, exit 1. A boolean
option given both ways is a usage error, exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tessel.arch.options import MAX_CALIBRATION_SAMPLES
from tessel.errors import TesselConfigError

MAX_WORKERS = 64
MAX_TRIALS = 100_000
MAX_SAMPLES = 10_000

# argument destination -> (flag, lowest, highest)
COUNT_BOUNDS: dict[str, tuple[str, int, int]] = {
    "calibration": ("--calibration", 1, MAX_CALIBRATION_SAMPLES),
    "workers": ("--workers", 0, MAX_WORKERS),
    "trials": ("--trials", 1, MAX_TRIALS),
    "samples": ("--samples", 1, MAX_SAMPLES),
    "layers": ("--layers", 0, 1_000_000),
}


def check_counts(args: argparse.Namespace) -> None:
    """TesselConfigError naming the flag and its range for a count outside it."""
    for dest, (flag, lo, hi) in COUNT_BOUNDS.items():
        value = getattr(args, dest, None)
        if isinstance(value, int) and not isinstance(value, bool) and not lo <= value <= hi:
            raise TesselConfigError(f"{flag} must be between {lo} and {hi}, got {value}")


def conflicting_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """'--x and --no-x' if argv gives a boolean option of the chosen subcommand both ways."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    for action in _actions(parser, argv):
        if isinstance(action, argparse.BooleanOptionalAction):
            on, off = action.option_strings[0], action.option_strings[-1]
            if on in given and off in given:
                return f"{on} and {off} contradict each other; give one"
    return None


def _actions(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[argparse.Action]:
    actions = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name in argv:
                    actions += _actions(sub, [a for a in argv if a != name])
    return actions
