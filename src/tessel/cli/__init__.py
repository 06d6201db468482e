"""The `tessel` command line: one sub-command per job, errors as one clear line and exit code 1."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from tessel.errors import TesselError

# Modules that add sub-commands through register(subparsers), in help order.
COMMAND_MODULES = (
    "tessel.cli.frontend", "tessel.passes.cli", "tessel.cli.quant", "tessel.cli.backend",
    "tessel.cli.advise", "tessel.cli.explore", "tessel.cli.hw", "tessel.cli.asm",
)


class Parser(argparse.ArgumentParser):
    """argparse with a 'did you mean' hint for a mistyped command or choice."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            from tessel.errors import did_you_mean
            known = re.findall(r"'([^']*)'", m.group(2)) or [
                c.strip() for c in m.group(2).split(",")]
            message += did_you_mean(m.group(1), known)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tessel", description="Compile PyTorch models for the Tessel NPU, simulate, analyse.")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more messages (debug detail)")
    parser.add_argument("-q", "--quiet", action="count", default=0,
                        help="no progress, warnings and errors only")
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
    from tessel.progress import configure
    configure(args.verbose - args.quiet)
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
