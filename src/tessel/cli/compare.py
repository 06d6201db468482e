"""CLI: `tessel compare`, side by side:

    tessel compare resnet18 mobilenet_v2 --targets tnpu-s,tnpu-m,u55-256 [--json] [--html F]
    tessel compare a.tsl b.tsl [--json] [--html F]

Several targets (presets or .toml files) for one or more models (tessel.analysis.compare:
the analytical estimate of each model on each target, and the layers whose bound changes),
or two binaries of one model (the simulator's figures: what changed, layer by layer).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.cli.backend import add_cache_argument, add_wide_argument, table_width
from tessel.errors import TesselConfigError
from tessel.fileio import check_writable


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare", help="compare NPU targets side by side for one or more models, or two "
        "binaries of one model",
        description="MODEL ... --targets A,B[,...]: every model estimated on every target "
        "(latency, energy, area with its process node, MAC utilisation, off-chip traffic, the "
        "layers whose bound changes). A.tsl B.tsl: two binaries of one model (cycles per "
        "layer, mapping, bytes: what changed).")
    p.add_argument("items", nargs="+", metavar="MODEL|FILE.tsl",
                   help="zoo names, path/to/file.py:factory or model files (.pt2, .onnx, "
                   ".tflite, .tosa) with --targets, or two .tsl binaries")
    p.add_argument("--targets", metavar="A,B,...",
                   help="comma-separated preset names or .toml files (models only)")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIBRATION_SAMPLES})")
    add_cache_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="write the comparison, plotted, as a self-contained HTML page")
    p.add_argument("--layers", type=int, default=20, metavar="N",
                   help="layers shown in the text tables (default 20; 0: all)")
    add_wide_argument(p)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    if args.layers < 0:
        raise TesselConfigError(f"--layers must be >= 0, got {args.layers}")
    if args.html is not None:
        check_writable(args.html, inputs=_read_files(args))
    binaries = [i for i in args.items if i.endswith(".tsl")]
    if binaries:
        cmp = _binaries(args, binaries)
    else:
        cmp = _targets(args)
    if args.json:
        print(cmp.to_json())
    else:
        print(cmp.text(table_width(args), args.layers or None))
    if args.html is not None:
        import sys

        from tessel.analysis.compare_html import write_compare_html
        print(f"wrote {write_compare_html(cmp, args.html)}",
              file=sys.stderr if args.json else sys.stdout)
    return 0


def _read_files(args: argparse.Namespace) -> list[Path]:
    """The files the comparison reads: binaries, model files (file.py:factory) and target files."""
    files = [Path(i.rpartition(":")[0] if ":" in i else i) for i in args.items
             if i.endswith(".tsl") or ".py:" in i]
    files += [Path(t) for t in (args.targets or "").split(",") if t.endswith(".toml")]
    return files


def _binaries(args: argparse.Namespace, binaries: list[str]):
    from tessel.analysis.compare import compare_binaries
    from tessel.runtime.compiled import load

    if len(binaries) != len(args.items) or len(binaries) != 2:
        raise TesselConfigError("compare takes two .tsl binaries, or models with --targets "
                                f"(got {', '.join(args.items)})")
    if args.targets:
        raise TesselConfigError("--targets compares models; two binaries carry their own")
    a, b = (load(Path(x)) for x in binaries)
    if a.program.metadata.get("model") != b.program.metadata.get("model"):
        from tessel.progress import LOGGER
        LOGGER.warning(f"compare: the binaries are of different models "
                       f"({a.program.metadata.get('model')}, {b.program.metadata.get('model')})"
                       "; layers are matched by IR name")
    return compare_binaries(a, b, binaries[0], binaries[1])


def _targets(args: argparse.Namespace):
    from tessel.analysis.compare import compare_targets
    from tessel.arch import load_target
    from tessel.cli.backend import quantised_graph
    from tessel.models import resolve

    if not args.targets:
        raise TesselConfigError("compare MODEL ... needs --targets A,B[,...] (presets or .toml "
                                "files; `tessel targets` lists the presets)")
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    if len(set(names)) != len(names):
        raise TesselConfigError(f"--targets names a target twice: {args.targets}")
    archs = [load_target(n) for n in names]
    if len({a.name for a in archs}) != len(archs):
        raise TesselConfigError("--targets: two targets have the same name "
                                f"({', '.join(a.name for a in archs)})")
    if len(set(args.items)) != len(args.items):
        raise TesselConfigError(f"a model is named twice: {', '.join(args.items)}")
    graphs = {}
    for item in args.items:
        spec = resolve(item)
        one = argparse.Namespace(**vars(args), model=item, inputs=None, calibration_data=None)
        graphs[_short_name(item)] = quantised_graph(one, spec)
    return compare_targets(graphs, archs)


def _short_name(item: str) -> str:
    """A model as tables show it: a zoo name as is, a file by its name (``tiny.py:make``)."""
    from tessel.models.loader import split_path_spec

    path_spec = split_path_spec(item)
    if path_spec is not None:
        return f"{path_spec[0].name}:{path_spec[1]}"
    return Path(item).name
