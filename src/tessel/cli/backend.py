"""CLI: `tessel compile MODEL`, `tessel run FILE.tsl`, `tessel profile FILE.tsl`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.errors import TesselConfigError, TesselError
from tessel.fileio import check_writable

if TYPE_CHECKING:  # numpy is imported by the commands, not by `tessel --help`
    import numpy as np


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compile", help="compile a model to a .tsl binary for an NPU target",
        description="Compile MODEL for an NPU target into a .tsl binary (quantised to int8 "
        "by Tessel unless the model brings its own scales).",
        epilog="MODEL inputs: " + "; ".join(f"{k}: {v}" for k, v in INPUT_FORMATS) + ". "
        f"Defaults: --target {DEFAULT_TARGET}; -o MODEL's name with .tsl in the working "
        "directory (resnet18.tsl, net.py:make -> net.tsl, model.onnx -> model.tsl).")
    p.add_argument("model", metavar="MODEL", help="what to compile: " + ", ".join(
        k for k, _ in INPUT_FORMATS) + " (see below)")
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help=f"preset name or path to a .toml file (default {DEFAULT_TARGET}; "
                   "`tessel targets` lists the presets)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE.tsl",
                   help="the .tsl file to write (default: MODEL's name with .tsl, in the "
                   "working directory)")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIBRATION_SAMPLES})")
    add_data_arguments(p)
    p.add_argument("--no-fallback", action="store_true",
                   help="fail instead of running unsupported ops on the host CPU")
    p.add_argument("--dump-after", action="append", default=[], metavar="STAGE",
                   help="print what a stage produced: import (the QDQ graph), lower_qdq, "
                   "quantize, legalize (integer IR), partition (host parts / NPU regions), "
                   "schedule (one line per step), emit (instruction streams); repeatable")
    p.add_argument("--on-chip-residency", action=argparse.BooleanOptionalAction, default=True,
                   help="keep activations in the SRAM between steps where the cost model finds "
                   "it faster (default on; docs/backend.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object (file, size, "
                   "cycles, latency, energy)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change one NPU parameter of the target (dotted name, e.g. "
                   "wdecoder.enabled=true: weights stored as compressed streams the NPU's "
                   "weight decoder reads); the binary records the changed target; repeatable")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("estimate", help="latency / energy estimate from the analytical cost "
                       "model, without building a binary (the design-space exploration path)")
    p.add_argument("model", help="zoo name (see `tessel models`), path/to/file.py:factory, "
                   "model.pt2, model.onnx, model.tflite or model.tosa")
    p.add_argument("--target", default="tnpu-s", help="preset name or path to a .toml file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change one NPU parameter of the target (dotted name, e.g. "
                   "energy.lpddr_byte_pj=160, the conservative DRAM figure); repeatable")
    p.add_argument("--operating-point", metavar="NAME|INDEX",
                   help="time and energy at this operating point of the target (its name, or "
                   "its index, 0 = slowest; `tessel targets --json` lists them); default: the "
                   "nominal point")
    p.add_argument("--calibration", type=int, default=DEFAULT_CALIBRATION_SAMPLES, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIBRATION_SAMPLES})")
    add_data_arguments(p)
    add_cache_argument(p)
    p.add_argument("--on-chip-residency", action=argparse.BooleanOptionalAction, default=True,
                   help="keep activations in the SRAM between steps where the cost model finds "
                   "it faster (default on; docs/backend.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--layers", type=int, default=10, metavar="N",
                   help="slowest layers shown in the text table (default 10; 0: every layer)")
    add_wide_argument(p)
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("run", help="run a .tsl binary on the simulator")
    p.add_argument("binary", type=Path)
    p.add_argument("--engine", choices=("python", "c"), default="python",
                   help="python: the Python simulator (default); c: the C runtime on the C NPU "
                   "model, built with the system C compiler (docs/runtime.md)")
    p.add_argument("--input", action="append", default=[], type=Path, metavar="X.npy",
                   help="an input array (repeat in the model's input order); default: the "
                   "model's example inputs")
    p.add_argument("--check", action="store_true", help="compare with the golden model "
                   "(must be bit-exact) and the float model (SQNR)")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="run inputs with NaN / inf values instead of refusing them")
    p.add_argument("--batch", action="store_true",
                   help="every --input holds N samples stacked on a new leading axis: simulate "
                   "them together (CompiledModel.run_batch); --check compares every sample")
    p.add_argument("--model", metavar="FILE.py:FACTORY",
                   help="the model the binary was compiled from, if its file is neither next "
                   "to the binary nor in the working directory (checked by content hash)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("profile", help="cycles, latency, energy and per-layer figures; "
                       "HTML report, Perfetto trace, per-layer CSV")
    p.add_argument("binary", type=Path)
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    add_wide_argument(p)
    from tessel.analysis.cli_options import add_report_arguments
    add_report_arguments(p)
    p.set_defaults(func=cmd_profile)


DEFAULT_TARGET = "tnpu-s"
# what MODEL may be (tessel.models.resolve; the model files: tessel.models.loader.MODEL_FILES)
INPUT_FORMATS = (
    ("zoo name", "a model of `tessel models` (resnet18, mobilenet_v2, ...)"),
    ("path/to/file.py:factory", "a Python file whose factory() returns (model, example "
     "inputs); an optional calibration() yields calibration samples"),
    ("model.pt2", "a program saved with torch.export.save"),
    ("model.onnx", "an ONNX model, opset >= 13 (float: quantised by Tessel; QDQ: its own "
     "scales)"),
    ("model.tflite", "a fully-int8 TFLite model (its own scales)"),
    ("model.tosa", "an integer TOSA 1.0 flatbuffer (its own integer arithmetic; "
     "docs/frontend.md)"),
)


def default_output(model: str) -> Path:
    """Where `compile` writes without -o: the model's name with .tsl, in the working
    directory (a zoo name as is; a file by its stem, ``net.py:make`` -> ``net.tsl``)."""
    stem = model.rpartition(":")[0] if model.rpartition(":")[0].endswith(".py") else model
    return Path(Path(stem).stem + ".tsl")


def _progress(msg: str) -> None:
    from tessel.progress import info
    info(msg)  # stderr with a timestamp unless -q (tessel.progress.configure)


def read_files(args: argparse.Namespace) -> list[Path]:
    """The files a model command reads, known from its arguments alone: the model file
    (file.py:factory, .pt2 / .onnx / .tflite), --inputs, --calibration-data (or the arrays in
    its folder) and a --target file."""
    files = []
    model = getattr(args, "model", None)
    if isinstance(model, str):
        path = model.rpartition(":")[0] if model.rpartition(":")[0].endswith(".py") else model
        files.append(Path(path))
    files += [p for p in (getattr(args, "inputs", None), getattr(args, "target", None))
              if p is not None]
    data = getattr(args, "calibration_data", None)
    if data is not None:
        files += sorted(Path(data).glob("*.np[yz]")) if Path(data).is_dir() else [Path(data)]
    return files


def model_sources(model: object, spec: str) -> list[Path]:
    """The source files of a loaded model: the file its spec names and the file of every
    module class in it (a zoo model's module, a helper module a model file imports)."""
    import inspect

    from tessel.models.digest import source_file

    files = {source_file(spec)}
    modules = model.modules() if hasattr(model, "modules") else [model]
    for m in modules:
        try:
            found = inspect.getsourcefile(type(m))
        except TypeError:  # a built-in class
            continue
        if found:
            files.add(Path(found))
    return sorted(files)


def cmd_compile(args: argparse.Namespace) -> int:
    if args.output is None:
        args.output = default_output(args.model)
    # before the imports and the compile: fails in well under 1 s
    check_writable(args.output, inputs=read_files(args))
    from tessel.arch import CompileOptions, load_target
    from tessel.driver import Dumps, parse_stages
    from tessel.driver import compile as tessel_compile
    from tessel.models import resolve
    from tessel.models.digest import source_record

    if args.calibration < 1:
        raise TesselConfigError(f"--calibration must be >= 1, got {args.calibration}")
    stages = parse_stages(args.dump_after)
    arch = load_target(args.target)
    if args.set:
        from tessel.arch.params import parse_settings

        arch = arch.with_params(parse_settings(args.set, arch))
    spec = resolve(args.model)
    model, inputs, calibration = model_data(args, spec)
    check_writable(args.output, inputs=model_sources(model, args.model))
    config = quant_config(args, spec, (model, inputs, calibration))
    options = CompileOptions(calibration_samples=args.calibration,
                             allow_host_fallback=not args.no_fallback,
                             on_chip_residency=args.on_chip_residency)
    t0 = time.perf_counter()
    cm = tessel_compile(model, inputs, target=arch, options=options,
                        calibration_data=calibration,
                        quant_config=config,
                        name=source_record(args.model)["model"],  # no path: reproducible
                        progress=_progress, source=args.model,
                        dump=Dumps(stages, lambda text: print(
                            text, end="", file=sys.stderr if args.json else sys.stdout)))
    cm.save(args.output)  # atomic; the bytes the compile serialised once
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(_compile_result(cm, args.output, seconds), indent=1, sort_keys=True))
        return 0
    cycles = simulated_cycles(cm)
    print(f"wrote {args.output} ({len(cm.binary):,} bytes) in {seconds:.1f} s: "
          f"{cycles:,} cycles = {1e3 * cycles / arch.clock_hz:.3f} ms on {arch.name}")
    fallback = cm.program.metadata.get("fallback")
    if isinstance(fallback, dict):
        from tessel.lower.fallback import summary_text
        text = summary_text(fallback)
        if text:
            print(text)
    left = getattr(model, "left", None)
    if left is not None:
        print(f"not compiled: the rest of the forward after {args.until}"
              + (f" ({', '.join(left)})" if left else "") + ", which runs in PyTorch on "
              f"{', '.join(cm.output_names)}")
    return 0


def simulated_cycles(cm) -> int:
    """`cm.profile.cycles` (the timing model's total over the program) without the profile's
    per-layer, traffic and energy figures, which the compile's one-line summary does not
    print."""
    from tessel.sim.prepare import prepared
    from tessel.sim.timing import instr_times

    return instr_times(prepared(cm.program, cm.arch)).total_cycles


def _compile_result(cm, output: Path, seconds: float) -> dict:
    prof = cm.profile
    return {"output": str(output), "bytes": len(cm.binary), "seconds": round(seconds, 3),
            "model": prof.model, "target": prof.target, "cycles": prof.cycles,
            "latency_ms": prof.latency_ms, "energy_uj": prof.energy_uj,
            "mac_utilisation": prof.mac_utilisation, "layers": len(prof.layers),
            "host_ops": list(prof.host_ops), "fallback": prof.fallback}


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """--inputs and --calibration-data (see tessel.models.data_files); --weights and
    --layer-weights (the weight types, tessel.quant.config.WeightDtype)."""
    p.add_argument("--inputs", type=Path, metavar="X.npz",
                   help="example inputs (.npy, or .npz with the arrays in input order) instead "
                   "of the model's own")
    p.add_argument("--calibration-data", type=Path, metavar="DIR|FILE.npz",
                   help="calibration samples: a .npz with one sample per array, or a directory "
                   "with one .npy/.npz per sample (default: the model's own calibration data)")
    p.add_argument("--until", metavar="MODULE[,MODULE]",
                   help="compile the model up to and including these submodules (module paths, "
                   "e.g. head) and leave the rest of its forward, such as box decoding and NMS, "
                   "to PyTorch on the compiled outputs (tessel.cut)")
    add_weight_arguments(p)


def add_weight_arguments(p: argparse.ArgumentParser) -> None:
    """--weights, --accuracy-budget and --layer-weights (tessel.quant.config.WeightDtype,
    tessel.analysis.precision)."""
    p.add_argument("--weights", choices=("int8", "int4", "auto"), default="int8",
                   help="the weight type of every conv / linear layer: int8, int4 (two per "
                   "byte: half the weight bytes, coarser weights; docs/numerics.md), or auto "
                   "(int4 where --accuracy-budget allows, measured on held-out inputs, and "
                   "where the target's weights memory needs it for the constants to fit)")
    p.add_argument("--accuracy-budget", default="sqnr=1.0", metavar="METRIC=LOSS",
                   help="with --weights auto: the accuracy int4 may cost against all-int8 "
                   "weights: sqnr=DB (output SQNR vs float), cosine=X or top1=X (fractions); "
                   "default sqnr=1.0")
    p.add_argument("--activations", choices=("int8", "auto"), default="int8",
                   help="with --weights auto: int8 keeps every conv / linear input int8; auto "
                   "first makes the inputs int16 (int16 x int8 MACs, twice the matrix cycles) "
                   "for the layers where that buys the most accuracy per extra cycle, then "
                   "spends --accuracy-budget on int4 weights")
    p.add_argument("--layer-weights", action="append", default=[], metavar="PATTERN=TYPE",
                   help="the weight type of the layers whose module name matches PATTERN (an "
                   "fnmatch pattern, e.g. 'layer4.*=int4' or 'fc=int8'); repeatable, later "
                   "ones win")
    add_precision_argument(p)


def add_precision_argument(p: argparse.ArgumentParser) -> None:
    """--layer-precision (activation types per layer, tessel.quant.config.ActDtype)."""
    p.add_argument("--layer-precision", action="append", default=[],
                   metavar="PATTERN[:OP]=TYPE",
                   help="the activation type (int8 or int16) of the ops whose module name "
                   "matches PATTERN, optionally one op type of them (e.g. "
                   "'features.4.block.2:mul=int16', or '*:add=int16' for every residual add); "
                   "PATTERN:input=int16 makes the matching conv / linear layers' inputs int16 "
                   "(int16 x int8 MACs); repeatable, later ones win; `tessel accuracy "
                   "--per-layer` suggests them")


def quant_config(args: argparse.Namespace, spec, data: tuple | None = None):
    """The QuantConfig of a model (`default_config`) with --layer-precision, --weights and
    --layer-weights; with
    --weights auto, the per-layer choice of tessel.analysis.precision on `data` (`model_data`'s
    model, inputs and calibration samples), printed."""
    from tessel.quant.config import (
        WeightDtype,
        default_config,
        parse_layer_precision,
        parse_layer_weights,
        with_precision_choices,
        with_weight_choices,
    )

    layers = [parse_layer_weights(t) for t in getattr(args, "layer_weights", [])]
    config = with_precision_choices(default_config(spec.name), [
        parse_layer_precision(t) for t in getattr(args, "layer_precision", [])])
    weights = getattr(args, "weights", "int8")
    if weights != "auto":
        return with_weight_choices(config, WeightDtype(weights), layers)
    base = with_weight_choices(config, WeightDtype.INT8, layers)
    plan = auto_precision(args, spec, base, data if data is not None else model_data(args, spec))
    print(plan.text(table_width(args)), file=sys.stderr if getattr(args, "json", False)
          else sys.stdout)
    return plan.config


AUTO_HELD_OUT = 8  # held-out inputs --weights auto measures every candidate on


def auto_precision(args: argparse.Namespace, spec, base, data: tuple):
    """The PrecisionPlan of `spec` under --accuracy-budget (held-out inputs: as `tessel
    accuracy` picks them); its constants fit --target's weights memory (with --set)."""
    from tessel.analysis.accuracy import eval_set
    from tessel.analysis.precision import (
        AccuracyBudget,
        InputPrecision,
        choose_weights,
        golden_evaluator,
        memory_limit,
    )
    from tessel.frontend.ir_module import QDQModule

    budget = AccuracyBudget.parse(args.accuracy_budget)
    model, inputs, calibration = data
    if isinstance(model, QDQModule):
        raise TesselConfigError(f"--weights auto: {args.model} is already quantised (its own "
                                "scales and weights); it takes no weight type")
    calibration = list(calibration) if calibration is not None else [inputs]
    held_out = eval_set(spec, args.calibration, AUTO_HELD_OUT, inputs)[0][:AUTO_HELD_OUT]
    evaluate = golden_evaluator(model, inputs, calibration, held_out, args.calibration)
    limit = None
    if getattr(args, "target", None) is not None:  # the constants must fit its memory
        from tessel.arch import load_target
        from tessel.arch.params import parse_settings

        arch = load_target(args.target)
        if getattr(args, "set", None):
            arch = arch.with_params(parse_settings(args.set, arch))
        limit = memory_limit(arch, evaluate, spec.name)
    return choose_weights(model, evaluate, held_out, budget, base, spec.name, limit,
                          InputPrecision(getattr(args, "activations", "int8")))


def model_data(args: argparse.Namespace, spec) -> tuple:
    """(model, example inputs, calibration samples) of `spec` with --inputs /
    --calibration-data applied; says on stderr what calibration uses when it is a stand-in."""
    from tessel.frontend.ir_module import QDQModule
    from tessel.models.data_files import read_calibration, read_inputs

    model, inputs = spec.factory()
    if getattr(args, "until", None):
        model = _cut(model, args.until, inputs)
    if isinstance(model, QDQModule):  # a QDQ ONNX / int8 TFLite model keeps its own scales
        inputs = read_inputs(args.inputs, inputs) if args.inputs is not None else inputs
        return model, inputs, None
    if args.inputs is not None:
        inputs = read_inputs(args.inputs, inputs)
    if args.calibration_data is not None:
        calibration = read_calibration(args.calibration_data, inputs)[:args.calibration]
    elif args.inputs is not None and spec.calibration_description:
        calibration = [inputs]
        _progress(f"calibration: the inputs of {args.inputs} only (1 sample); give "
                  "--calibration-data for real data")
    else:
        calibration = spec.calibration_data(args.calibration)
        if spec.calibration_description:
            _progress(f"calibration: {spec.calibration_description}")
    return model, inputs, list(calibration)


def _cut(model, until: str, inputs):
    """`model` cut after `until` (tessel.cut), saying on stderr what stays in PyTorch."""
    from tessel.frontend.cut import cut, left_out

    cut_model = cut(model, until)
    left = cut_model.left = left_out(cut_model, inputs)
    _progress(f"cut after {until}: the compiled model's outputs are "
              f"{', '.join(cut_model.names)}; the rest of {type(model).__name__}.forward"
              + (f" ({', '.join(left)})" if left else "") + " runs in PyTorch, not compiled")
    return cut_model


def add_wide_argument(p: argparse.ArgumentParser) -> None:
    """--wide: tables at their full width (default: fitted to COLUMNS or the terminal, long
    cells wrapped; full width off a terminal)."""
    p.add_argument("--wide", action="store_true", help="print tables at full width, every "
                   "column on one line per row (default: fitted to $COLUMNS or the terminal)")


def table_width(args: argparse.Namespace) -> int | None:
    """The width text tables are fitted to: None (no limit) with --wide."""
    from tessel.display import output_width
    return None if getattr(args, "wide", False) else output_width()


def add_cache_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true", help="quantise again instead of reusing "
                   "the cached integer graph (cache: $TESSEL_CACHE_DIR, else "
                   "~/.cache/tessel/graphs; TESSEL_CACHE_DIR=off disables it)")


def quantised_graph(args: argparse.Namespace, spec):
    """The integer graph of `spec` (with --inputs / --calibration-data), quantised once and then
    reused from the graph cache (tessel.quant.cache) unless --no-cache."""
    from tessel.quant.cache import cached_graph

    if args.calibration < 1:
        raise TesselConfigError(f"--calibration must be >= 1, got {args.calibration}")
    model, inputs, calibration = model_data(args, spec)
    config = quant_config(args, spec, (model, inputs, calibration))
    return cached_graph(args.model, model, inputs, calibration, config,
                        args.calibration, use_default=not args.no_cache)


def cmd_estimate(args: argparse.Namespace) -> int:
    from tessel.analysis.estimate import estimate_graph
    from tessel.arch import CompileOptions, load_target
    from tessel.arch.operating import at_point
    from tessel.arch.params import parse_settings
    from tessel.display import fit_text
    from tessel.models import resolve

    arch = load_target(args.target)
    if args.set:
        arch = arch.with_params(parse_settings(args.set, arch))
    point = arch.point(args.operating_point) if args.operating_point is not None \
        else arch.nominal_point
    arch = at_point(arch, point)
    spec = resolve(args.model)
    report = estimate_graph(quantised_graph(args, spec), arch, name=spec.name,
                            options=CompileOptions(on_chip_residency=args.on_chip_residency))
    where = (f"operating point {point.name}: {point.clock_hz / 1e6:g} MHz, "
             f"{point.voltage_v:g} V")
    if args.json:
        data = json.loads(report.to_json())
        data["operating_point"] = dataclasses.asdict(point)
        print(json.dumps(data, indent=1, sort_keys=True))
    else:
        if args.layers < 0:
            raise TesselConfigError(f"--layers must be >= 0, got {args.layers}")
        print(fit_text(f"{report.summary()}\n{where}", table_width(args)))
        report.layer_table(args.layers or None).print(wide=args.wide)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from tessel.runtime.compiled import load
    from tessel.runtime.inputs import check_inputs
    from tessel.runtime.reference import stored_reference

    cm = load(args.binary)
    source = cm.program.metadata.get("source")
    stored = stored_reference(cm.program.metadata)
    if args.input:
        inputs = [_load_npy(p) for p in args.input]
    elif stored is not None and stored.inputs is not None:  # the example inputs, as compiled
        inputs = [np.array(x) for x in stored.inputs]
    else:
        inputs = _example_inputs(source, args.binary, args.model)
    batch = getattr(args, "batch", False)
    if batch and not args.input:
        raise TesselConfigError("--batch needs --input arrays with the samples stacked")
    inputs = check_inputs(cm, inputs, allow_nonfinite=args.allow_nonfinite, batch=batch)
    _progress(f"running {args.binary.name} with the C runtime on {cm.arch.name}"
              if args.engine == "c" else f"simulating {args.binary.name} on {cm.arch.name}")
    outputs = cm.run_batch(*inputs, allow_nonfinite=True, engine=args.engine) if batch else \
        cm.run(*inputs, allow_nonfinite=True, engine=args.engine)  # checked just above
    result: dict = {"outputs": {n: {"shape": list(o.shape), "dtype": str(o.dtype)}
                                for n, o in zip(cm.output_names, outputs, strict=True)},
                    "engine": args.engine, "npu_seconds": cm.last_run.npu_seconds,
                    "host_seconds": cm.last_run.host_seconds}
    ok = True
    if args.check:
        result["check"], ok = _check(cm, source, inputs, outputs, args)
        note = _source_note(source, args) if result["check"]["reference"] == "stored" else ""
        if note:
            result["check"]["note"] = note
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
    else:
        for n, o in zip(cm.output_names, outputs, strict=True):
            flat = o.reshape(-1)
            print(f"{n}: shape {list(o.shape)} {o.dtype}, first values {np.round(flat[:6], 4)}")
        if args.engine == "c":
            print(f"ran on the C runtime in {cm.last_run.npu_seconds:.3f} s (host ops included)")
        else:
            print(f"simulated in {cm.last_run.npu_seconds:.3f} s (host ops "
                  f"{cm.last_run.host_seconds:.3f} s)")
        if args.check:
            from tessel.runtime.check import CheckReport
            fields = {k: v for k, v in result["check"].items() if k not in ("reference", "note")}
            print(CheckReport(**fields).text("C runtime" if args.engine == "c" else "simulator"))
            if result["check"].get("note"):
                print(result["check"]["note"])
    return 0 if ok else 1


def _check(cm, source, inputs, outputs, args) -> tuple[dict, bool]:
    """Compare with the golden and float outputs: those stored in the binary for its example
    inputs (no re-quantisation), else from re-quantising the source model (deterministic)."""
    from tessel.runtime.check import FloatReference, compare, float_reference, float_reference_of
    from tessel.runtime.reference import stored_reference

    stored = stored_reference(cm.program.metadata) if not args.input else None
    if stored is not None:
        floats = len(outputs) if stored.float_of is FloatReference.NONE else len(stored.float)
        if len(stored.golden) != len(outputs) or floats != len(outputs):
            raise TesselError(f"{args.binary}: metadata 'reference' has {len(stored.golden)} "
                              f"golden outputs for a program with {len(outputs)}")
        report = compare(cm.output_names, outputs, stored.golden, stored.float,
                         low_range=stored.low_range, float_of=stored.float_of)
    else:
        from tessel.runtime.source import requantize_source

        model, _, qm = requantize_source(source, "--check", args.binary, args.model)
        float_of = float_reference_of(model)

        def reference(xs):  # (not read without a float reference: compare's float_of NONE)
            return outputs if float_of is FloatReference.NONE else float_reference(model, xs)

        if getattr(args, "batch", False):  # every sample against its own references
            import numpy as np

            from tessel.runtime.check import low_range_outputs
            samples = [[x[k] for x in inputs] for k in range(inputs[0].shape[0])]
            golden = [np.stack(v) for v in zip(*(qm.run(*s) for s in samples), strict=True)]
            ref = outputs if float_of is FloatReference.NONE else [
                np.stack(v) for v in zip(*(reference(s) for s in samples), strict=True)]
            report = compare(cm.output_names, outputs, golden, ref,
                             low_range=low_range_outputs(qm.graph, outputs), float_of=float_of)
        else:
            report = compare(cm.output_names, outputs, qm.run(*inputs), reference(inputs),
                             qm.graph, inputs, float_of=float_of)
    return {**report.to_json(), "reference": "stored" if stored is not None else "re-quantised"}, \
        report.bit_exact


def _source_note(source, args: argparse.Namespace) -> str:
    """One line when the check ran without the model's source (references stored in the
    binary): what was checked, and what needs ``--model``."""
    from tessel.runtime.source import recorded_model

    if args.model:  # asked for: a wrong one is an error, not a note
        recorded_model(source, "--check", args.binary, args.model)
        return ""
    try:
        recorded_model(source, "--check", args.binary, None)
    except TesselError:
        model = source.get("model", "?") if isinstance(source, dict) else "?"
        return (f"note: the model's source ({model}) was not found: bit-exactness and SQNR are "
                "against the golden and float outputs stored in the binary for its example "
                "inputs; a float SQNR on other inputs (--input) needs --model "
                "path/to/file.py:factory")
    return ""


def _example_inputs(source, binary: Path, override: str | None) -> list[np.ndarray]:
    if not source:
        raise TesselError("no --input given and the binary does not name its model")
    from tessel.models import resolve
    from tessel.runtime.source import recorded_model
    spec = resolve(recorded_model(source, "run", binary, override))
    return [x.numpy() for x in spec.example_inputs()]


def _load_npy(path: Path) -> np.ndarray:
    """A .npy array; anything else (missing, empty, truncated, pickled objects, .npz) is one
    TesselConfigError naming the file."""
    import numpy as np

    from tessel.models.data_files import check_size

    try:
        if path.is_file():
            check_size(path)  # the header's shape, before the array is read
        array = np.load(path, allow_pickle=False)
    except IsADirectoryError:
        raise TesselConfigError(f"cannot read input {path}: it is a directory") from None
    except OSError as exc:
        raise TesselConfigError(f"cannot read input {path}: {exc.strerror or exc}") from None
    except EOFError:
        raise TesselConfigError(f"input {path} is empty (expected a .npy array)") from None
    except (ValueError, TypeError) as exc:
        first = (str(exc).splitlines() or ["not a .npy array"])[0]
        raise TesselConfigError(f"input {path} is not a readable .npy array: {first}") from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        array.close()
        raise TesselConfigError(f"input {path} is an .npz archive; give one .npy per input")
    return array


def cmd_profile(args: argparse.Namespace) -> int:
    from tessel.analysis.cli_options import write_reports
    from tessel.display import fit_text
    from tessel.runtime.compiled import load

    for path in (args.html, args.trace, args.csv):
        check_writable(path, inputs=[args.binary])
    cm = load(args.binary)
    _progress(f"profiling {args.binary.name}: the timing model of its program")
    prof = cm.profile
    if args.json:
        print(prof.to_json())
    else:
        print(fit_text(prof.summary(), table_width(args)))
        prof.layer_table().print(wide=args.wide)
    for path in write_reports(args, cm):
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
