"""`tessel opt FILE.tir`: run passes on IR text (like mlir-opt), for pass debugging and tests."""

from __future__ import annotations

import argparse
import sys

from tessel.fileio import check_writable, read_text, write_atomic


class _PassListDescription(argparse.ArgumentParser):
    """`tessel opt --help` lists the passes; the pass manager (and numpy) load only then."""

    def format_help(self) -> str:
        from tessel.passes.manager import PASSES

        self.description = "Run Tessel passes on IR text. Passes: " + ", ".join(sorted(PASSES))
        return super().format_help()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("opt", help="run passes on an IR file and print the result")
    p.__class__ = _PassListDescription  # add_parser has no parser_class before Python 3.14
    p.add_argument("file", help="IR text file (.tir)")
    p.add_argument("--passes", default="default",
                   help="comma-separated pass names, or 'default' for the float pipeline")
    p.add_argument("--dump-after", action="append", default=[], metavar="PASS",
                   help="print the IR after this pass to stderr (repeatable; 'all' for every pass)")
    p.add_argument("-o", "--output", help="write the result here instead of stdout")
    p.add_argument("--no-verify", action="store_true", help="skip the verifier between passes")
    p.set_defaults(func=run_opt)


def run_opt(args: argparse.Namespace) -> int:
    from tessel.ir.parser import parse_graph
    from tessel.ir.printer import print_graph
    from tessel.passes.manager import check_dump_after, default_pipeline, run_pipeline

    dump_after = check_dump_after(args.dump_after)
    names = [n.strip() for n in args.passes.split(",") if n.strip()]
    passes = default_pipeline() if names == ["default"] else names
    check_writable(args.output, inputs=[args.file])
    text = read_text(args.file, "IR file")
    graph = run_pipeline(parse_graph(text, source=args.file), passes, dump_after=dump_after,
                         verify_each=not args.no_verify)
    out = print_graph(graph)
    if args.output:
        write_atomic(args.output, out)
    else:
        sys.stdout.write(out)
    return 0
