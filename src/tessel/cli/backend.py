"""CLI: `tessel compile MODEL`, `tessel run FILE.tsl`, `tessel profile FILE.tsl`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from tessel.errors import TesselConfigError, TesselError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile a model to a .tsl binary for an NPU target")
    p.add_argument("model", help="zoo name (see `tessel models`) or path/to/file.py:factory")
    p.add_argument("--target", default="tnpu-s", help="preset name or path to a .toml file")
    p.add_argument("-o", "--output", type=Path, required=True, help="the .tsl file to write")
    p.add_argument("--calibration", type=int, default=32, metavar="N",
                   help="calibration samples (default 32)")
    p.add_argument("--no-fallback", action="store_true",
                   help="fail instead of running unsupported ops on the host CPU")
    p.add_argument("--dump-after", action="append", default=[], metavar="PASS",
                   help="print the integer IR after quantisation ('quantize')")
    p.add_argument("--json", action="store_true", help="print one JSON object (file, size, "
                   "cycles, latency, energy)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("estimate", help="latency / energy estimate from the analytical cost "
                       "model, without building a binary (the design-space exploration path)")
    p.add_argument("model", help="zoo name (see `tessel models`) or path/to/file.py:factory")
    p.add_argument("--target", default="tnpu-s", help="preset name or path to a .toml file")
    p.add_argument("--calibration", type=int, default=32, metavar="N")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("run", help="run a .tsl binary on the simulator")
    p.add_argument("binary", type=Path)
    p.add_argument("--input", action="append", default=[], type=Path, metavar="X.npy",
                   help="an input array (repeat in the model's input order); default: the "
                   "model's example inputs")
    p.add_argument("--check", action="store_true", help="compare with the golden model "
                   "(must be bit-exact) and the float model (SQNR)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("profile", help="cycles, latency, energy and per-layer figures; "
                       "HTML report, Perfetto trace, per-layer CSV")
    p.add_argument("binary", type=Path)
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    from tessel.analysis.cli_options import add_report_arguments
    add_report_arguments(p)
    p.set_defaults(func=cmd_profile)


def _progress(msg: str) -> None:
    from tessel.progress import info
    info(msg)  # stderr with a timestamp unless -q (tessel.progress.configure)


def cmd_compile(args: argparse.Namespace) -> int:
    from tessel.arch import CompileOptions, load_target
    from tessel.driver import compile as tessel_compile
    from tessel.ir import print_graph
    from tessel.models import resolve
    from tessel.quant.accuracy import default_config

    if args.calibration < 1:
        raise TesselConfigError(f"--calibration must be >= 1, got {args.calibration}")
    unknown = sorted(set(args.dump_after) - {"quantize"})
    if unknown:
        raise TesselConfigError(f"--dump-after {unknown}: the backend's dump point is 'quantize'"
                                " (use `tessel import --dump-after PASS` for the float passes)")
    arch = load_target(args.target)
    spec = resolve(args.model)
    model, inputs = spec.factory()
    options = CompileOptions(calibration_samples=args.calibration,
                             allow_host_fallback=not args.no_fallback)
    t0 = time.perf_counter()
    cm = tessel_compile(model, inputs, target=arch, options=options,
                        calibration_data=spec.calibration_data(args.calibration),
                        quant_config=default_config(spec.name), name=spec.name,
                        progress=_progress, source=args.model,
                        dump=(lambda g: print(print_graph(g, elide_constants=True),
                                              file=sys.stderr if args.json else sys.stdout))
                        if args.dump_after else None)
    cm.save(args.output)
    prof = cm.profile
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(_compile_result(cm, args.output, seconds), indent=1, sort_keys=True))
        return 0
    print(f"wrote {args.output} ({len(cm.binary):,} bytes) in {seconds:.1f} s: "
          f"{prof.cycles:,} cycles = {prof.latency_ms:.3f} ms on {arch.name}")
    return 0


def _compile_result(cm, output: Path, seconds: float) -> dict:
    prof = cm.profile
    return {"output": str(output), "bytes": len(cm.binary), "seconds": round(seconds, 3),
            "model": prof.model, "target": prof.target, "cycles": prof.cycles,
            "latency_ms": prof.latency_ms, "energy_uj": prof.energy_uj,
            "mac_utilisation": prof.mac_utilisation, "layers": len(prof.layers),
            "host_ops": list(prof.host_ops)}


def cmd_estimate(args: argparse.Namespace) -> int:
    from tessel.analysis.estimate import estimate
    from tessel.arch import load_target
    from tessel.models import resolve
    from tessel.quant.accuracy import default_config

    if args.calibration < 1:
        raise TesselConfigError(f"--calibration must be >= 1, got {args.calibration}")
    arch = load_target(args.target)
    spec = resolve(args.model)
    model, inputs = spec.factory()
    report = estimate(model, inputs, target=arch, calibration_samples=args.calibration,
                      calibration_data=spec.calibration_data(args.calibration),
                      quant_config=default_config(spec.name), name=spec.name)
    if args.json:
        print(report.to_json())
    else:
        print(report.summary())
        report.layer_table(10).print()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tessel.runtime.compiled import load

    cm = load(args.binary)
    source = cm.program.metadata.get("source")
    inputs = [_load_npy(p) for p in args.input] if args.input else _example_inputs(source)
    outputs = cm.run(*inputs)
    result: dict = {"outputs": {n: {"shape": list(o.shape), "dtype": str(o.dtype)}
                                for n, o in zip(cm.output_names, outputs, strict=True)},
                    "npu_seconds": cm.last_run.npu_seconds,
                    "host_seconds": cm.last_run.host_seconds}
    ok = True
    if args.check:
        result["check"], ok = _check(cm, source, inputs, outputs)
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
    else:
        for n, o in zip(cm.output_names, outputs, strict=True):
            flat = o.reshape(-1)
            print(f"{n}: shape {list(o.shape)} {o.dtype}, first values {np.round(flat[:6], 4)}")
        print(f"simulated in {cm.last_run.npu_seconds:.3f} s (host ops "
              f"{cm.last_run.host_seconds:.3f} s)")
        if args.check:
            c = result["check"]
            print(f"check: simulator vs golden model: {'bit-exact' if c['bit_exact'] else 'MISMATCH'}"
                  f"; SQNR vs float PyTorch: "
                  + ", ".join(f"{k} {v:.1f} dB" for k, v in c["sqnr_db"].items()))
    return 0 if ok else 1


def _check(cm, source, inputs, outputs) -> tuple[dict, bool]:
    """Re-quantise the source model (deterministic) for its golden and float outputs."""
    import torch

    from tessel.quant.accuracy import sqnr_db
    from tessel.runtime.source import requantize_source

    model, _, qm = requantize_source(source, "--check")
    golden = qm.run(*inputs)
    with torch.no_grad():
        ref = model(*[torch.from_numpy(np.asarray(x)) for x in inputs])
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    exact = all(np.array_equal(a, b) for a, b in zip(outputs, golden, strict=True))
    sqnr = {name: float(sqnr_db(r.numpy(), o)) for name, r, o in
            zip(cm.output_names, refs, outputs, strict=True)}
    return {"bit_exact": exact, "sqnr_db": sqnr}, exact


def _example_inputs(source) -> list[np.ndarray]:
    if not source:
        raise TesselError("no --input given and the binary does not name its model")
    from tessel.models import resolve
    _, example = resolve(source["model"]).factory()
    return [x.numpy() for x in example]


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise TesselError(f"cannot read input {path}: {exc}") from None


def cmd_profile(args: argparse.Namespace) -> int:
    from tessel.analysis.cli_options import write_reports
    from tessel.runtime.compiled import load

    cm = load(args.binary)
    prof = cm.profile
    if args.json:
        print(prof.to_json())
    else:
        print(prof.summary())
        prof.layer_table().print()
    for path in write_reports(args, cm):
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
