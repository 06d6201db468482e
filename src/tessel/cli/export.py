"""CLI: `tessel export c MODEL.tsl -o DIR/`: a C project that runs the binary with libtessel."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="a C project running a .tsl binary with the C runtime "
                       "(header with the binary, I/O descriptors, arena size, main.c, Makefile, "
                       "CMakeLists.txt)")
    p.add_argument("format", choices=("c",), help="c: C99 (libtessel, docs/runtime.md)")
    p.add_argument("binary", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="the folder to write (created; files of an earlier export replaced)")
    p.add_argument("--name", help="the C prefix of the generated names (default: the binary's "
                   "file name)")
    p.add_argument("--json", action="store_true", help="print one JSON object (folder, files, "
                   "arena size)")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from tessel.runtime.export_c import export_c

    out = export_c(args.binary, args.output, args.name)
    if args.json:
        print(json.dumps({"folder": str(out.folder), "name": out.name,
                          "files": [str(f) for f in out.files], "arena_size": out.arena_size,
                          "example_inputs": out.example_inputs}, indent=1))
        return 0
    example = "its example inputs" if out.example_inputs else "zero inputs (none stored)"
    print(f"wrote {out.folder}/: {out.name}_model.h (arena {out.arena_size:,} bytes), "
          f"{out.name}_example.h ({example}), main.c, Makefile, CMakeLists.txt, tessel/ "
          f"(the runtime's sources); build: make -C {out.folder} run")
    return 0
