"""Weight streaming from slow memory: simulated cycles of every zoo model on every preset, and
ResNet-18 on u55-256 (weights in flash at 1 B/cycle) against Vela's estimate and against its
flash floor, with int8 and int4 weights.

Run: ``python -m benchmarks.bench_weight_stream [MODEL ...] [--presets a,b] [--against SRC |
--baseline FILE]``;
prints one line per (model, weights, preset): ``model weights preset simulated estimated``
(``error ...`` where a model does not fit), then the ResNet-18 u55-256 rows. With
``--against SRC`` the same lines are computed by the tree whose src is SRC (a subprocess with
``PYTHONPATH=SRC``; with ``--baseline FILE``, read from an earlier run's output) and a markdown
table compares the two, cycle by cycle; exits 1 if any simulated cycle count rose.

Vela's figure is ethos-u-vela 5.2's estimate for ResNet-18 on its Ethos_U55_High_End_Embedded
system with Shared_Sram (the system u55-256 is matched to: docs/architecture.md), about
17.0 M cycles. The flash floor is the constant bytes over the flash's bytes per cycle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError

MODELS = ["mobilenet_v2", "resnet18", "ds_cnn", "vit_small", "minilm", "digits_cnn"]
PRESETS = ["tnpu-s", "u65-512", "u55-256", "tnpu-m", "tnpu-xs"]
VELA_RESNET18_U55_256 = 17_000_000  # cycles, Vela 5.2 (module docstring)
ROOT = Path(__file__).resolve().parents[1]


def _quantized(name: str, weights: str):
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from zoo_cache import quantized  # the tests' quantised zoo (same calibration)

    if weights == "int8":
        return quantized(name)[0]
    from dataclasses import replace

    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import WeightDtype, default_config
    spec = resolve(name)
    model, example = spec.factory()
    config = replace(default_config(name), weights=WeightDtype(weights))
    return quantize(model, example, calibration_data=spec.calibration_data(4), quant_config=config,
                    calibration_samples=4)


def lines(models: list[str], presets: list[str], extra: bool, echo=sys.stdout) -> list[str]:
    """`model weights preset simulated estimated constant-bytes` per pair (and, with `extra`,
    ResNet-18 with int4 weights on u55-256)."""
    jobs = [(m, "int8", p) for m in models for p in presets]
    if extra:
        jobs.append(("resnet18", "int4", "u55-256"))
    out = []
    for name, weights, preset in jobs:
        qm = _quantized(name, weights)
        try:
            cm = compile_graph(qm.graph, load_preset(preset), name=name)
        except TesselCompileError as e:
            line = f"{name} {weights} {preset} error {str(e).splitlines()[0][:60]}"
        else:
            prof = cm.profile
            est = sum(layer.estimated_cycles for layer in prof.layers)
            line = f"{name} {weights} {preset} {prof.cycles} {est} {len(cm.program.constants)}"
        print(line, file=echo, flush=True)
        out.append(line)
    return out


def _table(mine: list[str], theirs: list[str]) -> tuple[str, bool]:
    old = {tuple(x.split()[:3]): x.split()[3:] for x in theirs}
    rows = ["| model | weights | preset | cycles before | cycles after | after / before |",
            "|---|---|---|---:|---:|---:|"]
    rose = False
    for x in mine:
        key, new = tuple(x.split()[:3]), x.split()[3:]
        was = old.get(key, ["?"])
        if new[0] == "error" or was[0] in ("error", "?"):
            rows.append(f"| {' | '.join(key)} | {' '.join(was)[:40]} | {' '.join(new)[:40]} | |")
            continue
        a, b = int(was[0]), int(new[0])
        rose |= b > a
        rows.append(f"| {' | '.join(key)} | {a:,} | {b:,} | {b / a:.3f} |")
    return "\n".join(rows), rose


def _resnet_rows(mine: list[str]) -> str:
    out = []
    for x in mine:
        f = x.split()
        if f[0] != "resnet18" or f[2] != "u55-256" or f[3] == "error":
            continue
        cycles, consts = int(f[3]), int(f[5])
        out.append(f"resnet18 u55-256 {f[1]}: {cycles:,} cycles = "
                   f"{cycles / VELA_RESNET18_U55_256:.3f}x Vela ({VELA_RESNET18_U55_256:,}); "
                   f"flash floor {consts:,} = {consts / VELA_RESNET18_U55_256:.3f}x Vela, "
                   f"cycles / floor {cycles / consts:.3f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--no-int4", action="store_true", help="skip ResNet-18 int4 on u55-256")
    ap.add_argument("--against", metavar="SRC", help="compare with the tree whose src is SRC")
    ap.add_argument("--baseline", metavar="FILE",
                    help="compare with the lines of an earlier run saved in FILE")
    args = ap.parse_args(argv)
    presets = args.presets.split(",")
    extra = "resnet18" in args.models and not args.no_int4
    compare = args.against or args.baseline
    mine = lines(args.models, presets, extra, echo=sys.stderr if compare else sys.stdout)
    if compare:
        if args.against:
            argv_ = [sys.executable, "-m", "benchmarks.bench_weight_stream", *args.models,
                     "--presets", args.presets] + (["--no-int4"] if not extra else [])
            text = subprocess.run(argv_, env=dict(os.environ, PYTHONPATH=args.against),
                                  cwd=ROOT, capture_output=True, text=True, check=True).stdout
        else:
            text = Path(args.baseline).read_text()
        theirs = [x for x in text.splitlines() if len(x.split()) >= 4
                  and not x.startswith("resnet18 u55-256 ")]
        table, rose = _table(mine, theirs)
        print(table)
        print(_resnet_rows(theirs).replace("resnet18", "before: resnet18"))
        print(_resnet_rows(mine).replace("resnet18", "after: resnet18"))
        return 1 if rose else 0
    print(_resnet_rows(mine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
