"""CLI: `tessel export c MODEL.tsl -o DIR/`: a C project that runs the binary with libtessel;
`tessel export tosa MODEL -o model.tosa`: the quantised integer graph as a TOSA 1.0 file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.errors import TesselConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="c: a C project running a .tsl binary with the C runtime "
                       "(header with the binary, I/O descriptors, arena size, main.c, Makefile, "
                       "CMakeLists.txt); tosa: a model's quantised integer graph as a TOSA 1.0 "
                       "flatbuffer")
    p.add_argument("format", choices=("c", "tosa"), help="c: C99 (libtessel, docs/runtime.md); "
                   "tosa: TOSA 1.0, profile PRO-INT (docs/frontend.md)")
    p.add_argument("binary", metavar="SOURCE", help="c: the .tsl binary; tosa: the model (zoo "
                   "name, path/to/file.py:factory, model.onnx, model.tflite)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT",
                   help="c: the folder to write (created; files of an earlier export replaced); "
                   "tosa: the .tosa file")
    p.add_argument("--name", help="c: the C prefix of the generated names (default: the "
                   "binary's file name)")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help="tosa: calibration samples of the quantiser")
    p.add_argument("--cut", action="store_true", help="tosa: export the integer part alone, "
                   "leaving float host operators before the quantised inputs and after the "
                   "integer outputs outside (MiniLM's embedding lookup and pooling)")
    p.add_argument("--mlir", type=Path, metavar="FILE.mlir", help="tosa: also write the TOSA "
                   "MLIR text (needs tosa-opt on PATH)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "tosa":
        return _export_tosa(args)
    from tessel.runtime.export_c import export_c

    out = export_c(Path(args.binary), args.output, args.name)
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


def _export_tosa(args: argparse.Namespace) -> int:
    from tessel.fileio import write_atomic
    from tessel.frontend.ir_module import QDQModule
    from tessel.frontend.tosa_export import export_tosa, mlir_text
    from tessel.models import resolve
    from tessel.quant.api import quantize, quantized_import
    from tessel.quant.config import default_config

    if args.calibration < 1:
        raise TesselConfigError(f"--calibration must be >= 1, got {args.calibration}")
    spec = resolve(args.binary)
    model, inputs = spec.factory()
    if isinstance(model, QDQModule):
        qm = quantized_import(model)
    else:
        qm = quantize(model, inputs, calibration_data=spec.calibration_data(args.calibration),
                      quant_config=default_config(args.binary), calibration_samples=args.calibration)
    exported = export_tosa(qm.graph, cut=args.cut)
    data = exported.to_bytes()
    write_atomic(args.output, data)
    if args.mlir is not None:
        write_atomic(args.mlir, mlir_text(args.output).encode())
    g = exported.graph
    result = {"output": str(args.output), "bytes": len(data), "operators": len(g.operators),
              "profile": g.profile, "extensions": list(g.extensions),
              "inputs": list(g.inputs), "outputs": list(g.outputs)}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    ext = ", ".join(g.extensions) or "no extensions"
    print(f"wrote {args.output} ({len(data):,} bytes): {len(g.operators)} TOSA operators, "
          f"{g.profile} with {ext}")
    return 0
