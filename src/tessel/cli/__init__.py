"""The `tessel` command line: one sub-command per job, errors as one clear line and exit code 1."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tessel.errors import TesselError

# Modules that add sub-commands through register(subparsers), in help order.
COMMAND_MODULES = (
    "tessel.cli.frontend", "tessel.cli.opt", "tessel.cli.quant", "tessel.cli.backend",
    "tessel.cli.advise", "tessel.cli.explore", "tessel.cli.hw", "tessel.cli.asm",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessel", description="Compile PyTorch models for the Tessel NPU, simulate, analyse.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def _version() -> str:
    from tessel import __version__
    return f"tessel {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TesselError as exc:
        print(f"tessel {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tessel: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
