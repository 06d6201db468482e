"""The `tessel` command line: one sub-command per job.

Error contract (docs/cli.md): every failure a user can cause is a ``tessel.errors`` error,
printed as ``tessel COMMAND: error: MESSAGE`` on stderr with exit code 1; a bad command line
exits with 2 (argparse's usage message). No traceback unless ``--debug`` is given. Anything
else escaping a command is a bug in Tessel: one ``internal error`` line and exit code 3.
SIGINT exits with 130 and SIGTERM with 143, after the ``finally`` blocks that remove
temporary files have run.
"""

from __future__ import annotations

import argparse
import importlib
import re
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from tessel.errors import TesselError

EXIT_ERROR, EXIT_USAGE, EXIT_INTERNAL = 1, 2, 3

# Modules that add sub-commands through register(subparsers), in help order.
COMMAND_MODULES = (
    "tessel.cli.frontend", "tessel.cli.opt", "tessel.cli.quant", "tessel.cli.backend",
    "tessel.cli.advise", "tessel.cli.compare", "tessel.cli.explore", "tessel.cli.scenario",
    "tessel.cli.hw", "tessel.cli.asm", "tessel.cli.export",
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
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error (for bug reports)")
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
    from tessel.version import __version__
    return f"tessel {__version__}"


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so that cleanup (``finally``) runs as for Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    from tessel.cli.limits import check_counts, conflicting_flags

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (argparse printed them; code 2), --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    conflict = conflicting_flags(parser, list(sys.argv[1:] if argv is None else argv))
    if conflict is not None:
        print(parser.format_usage().rstrip(), file=sys.stderr)
        print(f"tessel {args.command}: error: {conflict}", file=sys.stderr)
        return EXIT_USAGE
    try:
        check_counts(args)
    except TesselError as exc:  # as the commands' own checks: a bad value, exit 1
        print(f"tessel {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from tessel.progress import configure, watching
    from tessel.quiet import third_party_messages
    configure(args.verbose - args.quiet)
    previous = _install(signal.SIGTERM, _on_sigterm)
    try:
        with watching(f"tessel {args.command}: starting"), \
                third_party_messages(shown=args.verbose > 0):
            return int(args.func(args) or 0)
    except TesselError as exc:
        if args.debug:
            raise
        print(f"tessel {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"tessel {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`tessel ... | head`): not an error
        _silence_stdout()
        return 141
    except Terminated:
        print(f"tessel {args.command}: terminated", file=sys.stderr)
        return 143
    except MemoryError:
        if args.debug:
            raise
        print(f"tessel {args.command}: error: out of memory", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 (the contract: never a traceback without --debug)
        if args.debug:
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        print(f"tessel {args.command}: internal error: {type(exc).__name__}: {first} "
              "(a bug in Tessel; rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        _install(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush finds no closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _install(signum: int, handler: object) -> object:
    """Set a signal handler (only possible in the main thread; elsewhere a no-op)."""
    if handler is None:
        return None
    try:
        return signal.signal(signum, handler)  # type: ignore[arg-type]
    except ValueError:
        return None


if __name__ == "__main__":
    sys.exit(main())
