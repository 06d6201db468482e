"""CLI: `tessel models`, `tessel import MODEL`, `tessel verify FILE.tir`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tessel.errors import TesselConfigError
from tessel.fileio import check_writable, read_text, write_atomic


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the model zoo")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("import", help="import a model into float Graph IR and run the passes")
    p.add_argument("model", help="zoo name (see `tessel models`), path/to/file.py:factory, "
                   "model.pt2, model.onnx, model.tflite or model.tosa")
    p.add_argument("-o", "--output", type=Path, help="write the IR text to this .tir file")
    p.add_argument("--dump-after", action="append", default=[], metavar="PASS",
                   help="print the IR after this pass (repeatable; 'import' for the raw import)")
    p.add_argument("--host-fallback", action="store_true",
                   help="import unsupported ops as host (CPU) ops instead of failing")
    p.add_argument("--no-passes", action="store_true", help="stop after the import")
    p.add_argument("--json", action="store_true", help="print one JSON object (graph summary)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("verify", help="parse and verify a .tir file")
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_verify)


def cmd_models(args: argparse.Namespace) -> int:
    from tessel.models import ZOO
    if args.json:
        print(json.dumps([{"name": n, "description": m.description} for n, m in ZOO.items()],
                         indent=1))
        return 0
    width = max(len(n) for n in ZOO)
    for name, model_spec in ZOO.items():
        print(f"{name:<{width}}  {model_spec.description}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from tessel.cli.backend import model_sources, read_files
    from tessel.frontend import import_model
    from tessel.ir import print_graph
    from tessel.models import load
    from tessel.passes import check_dump_after, run_pipeline

    check_dump_after([d for d in args.dump_after if d != "import"])
    check_writable(args.output, inputs=read_files(args))
    from tessel.frontend.ir_module import IRModule, QDQModule

    model, inputs = load(args.model)
    check_writable(args.output, inputs=model_sources(model, args.model))
    if isinstance(model, (IRModule, QDQModule)):  # model.onnx / model.tflite: imported already
        graph = model.graph if isinstance(model, IRModule) else model.qdq_graph
    else:
        graph = import_model(model, inputs, allow_host_ops=args.host_fallback)
    dump = set(args.dump_after)
    if "import" in dump:
        print(print_graph(graph, elide_constants=True))
        dump.discard("import")
    if not args.no_passes:
        graph = run_pipeline(graph, dump_after=dump or None)
    elif dump:
        raise TesselConfigError(f"--dump-after {sorted(dump)} needs the passes (drop --no-passes)")
    if args.output is not None:
        write_atomic(args.output, print_graph(graph))
    if args.json:
        print(json.dumps(_import_result(graph, args.output), indent=1, sort_keys=True))
        return 0
    print(graph.summary(), file=sys.stderr if args.output is None else sys.stdout)
    if args.output is not None:
        print(f"wrote {args.output}")
    return 0


def _import_result(graph, output: Path | None) -> dict:
    ops: dict[str, int] = {}
    for n in graph.nodes:
        ops[n.op.value] = ops.get(n.op.value, 0) + 1
    return {"graph": graph.name, "nodes": len(graph.nodes), "ops": ops,
            "inputs": [v.name for v in graph.inputs], "outputs": list(graph.outputs),
            "output": None if output is None else str(output)}


def cmd_verify(args: argparse.Namespace) -> int:
    from tessel.ir import parse_graph, verify
    text = read_text(args.file, "IR file")
    graph = verify(parse_graph(text, source=str(args.file)))
    if args.json:
        print(json.dumps({"file": str(args.file), "ok": True, "graph": graph.name,
                          "nodes": len(graph.nodes)}))
        return 0
    print(f"{args.file}: ok ({len(graph.nodes)} nodes)")
    return 0

