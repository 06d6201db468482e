"""CLI: `tessel disasm FILE.tsl` and `tessel asm FILE.tasm -o FILE.tsl` (inverse of each other)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tessel.fileio import check_writable, read_text, write_atomic


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("disasm", help="print a .tsl binary as readable program text")
    p.add_argument("binary", type=Path)
    p.add_argument("-o", "--output", type=Path, help="write the text here instead of stdout")
    p.set_defaults(func=cmd_disasm)

    p = sub.add_parser("asm", help="assemble program text (as disasm prints it) into a .tsl")
    p.add_argument("source", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True)
    p.set_defaults(func=cmd_asm)


def cmd_disasm(args: argparse.Namespace) -> int:
    from tessel.binary import load_tsl
    from tessel.binary.text import program_to_text
    check_writable(args.output, inputs=[args.binary])
    text = program_to_text(load_tsl(args.binary))
    if args.output is None:
        print(text, end="")
    else:
        write_atomic(args.output, text)
    return 0


def cmd_asm(args: argparse.Namespace) -> int:
    from tessel.binary import save_tsl
    from tessel.binary.text import program_from_text
    check_writable(args.output, inputs=[args.source])
    text = read_text(args.source, "program text")
    save_tsl(args.output, program_from_text(text, source=str(args.source)))
    print(f"wrote {args.output}")
    return 0

