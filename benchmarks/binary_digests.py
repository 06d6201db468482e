"""SHA-256 of every zoo model's binary on every preset, and its backend compile seconds; with
``--against SRC``, the same digests compiled by another source tree, compared.

Run: ``python -m benchmarks.binary_digests [MODEL ...] [--presets a,b] [--out FILE]``; prints
one line per (model, preset): ``model preset sha256 seconds`` (models that do not fit a preset
print ``model preset error <message>``).

A refactoring that must not change bytes runs
``python -m benchmarks.binary_digests --against /path/to/other/tree/src [MODEL ...]``: the
digests are computed by this tree and, in a subprocess with ``PYTHONPATH=SRC``, by the other
one; prints ``same`` / ``DIFFERENT`` per (model, preset) and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError

MODELS = ["mobilenet_v2", "resnet18", "ds_cnn", "vit_small", "minilm", "digits_cnn"]
PRESETS = ["tnpu-s", "u65-512", "u55-256", "tnpu-m", "tnpu-xs"]
ROOT = Path(__file__).resolve().parents[1]


def digests(models: list[str], presets: list[str], echo=sys.stdout) -> list[str]:
    """One `model preset sha256 seconds` (or `model preset error ...`) line per pair, each
    also printed to `echo` as it is made."""
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from zoo_cache import quantized  # the tests' quantised zoo (same calibration)

    lines = []
    for name in models:
        qm = quantized(name)[0]
        for preset in presets:
            t0 = time.perf_counter()
            try:
                binary = compile_graph(qm.graph, load_preset(preset), name=name).binary
            except TesselCompileError as e:
                line = f"{name} {preset} error {str(e).splitlines()[0][:80]}"
            else:
                line = (f"{name} {preset} {hashlib.sha256(binary).hexdigest()} "
                        f"{time.perf_counter() - t0:.2f}")
            print(line, file=echo, flush=True)
            lines.append(line)
    return lines


def _compare(src: str, models: list[str], presets: list[str]) -> int:
    mine = digests(models, presets, echo=sys.stderr)  # stdout: the comparison
    argv = [sys.executable, "-m", "benchmarks.binary_digests", *models,
            "--presets", ",".join(presets)]
    res = subprocess.run(argv, env=dict(os.environ, PYTHONPATH=src), cwd=ROOT,
                         capture_output=True, text=True, check=True)
    theirs = res.stdout.strip().splitlines()
    bad = 0
    for a, b in zip(mine, theirs, strict=True):
        same = a.split()[:3] == b.split()[:3]  # model, preset, digest (or "error")
        bad += not same
        print(f"{' '.join(a.split()[:2]):28s} {'same' if same else 'DIFFERENT'}", flush=True)
    print("all identical" if not bad else f"{bad} differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--out", help="also write the lines to this file")
    ap.add_argument("--against", metavar="SRC", help="compare with the tree whose src is SRC")
    args = ap.parse_args(argv)
    presets = args.presets.split(",")
    if args.against:
        return _compare(args.against, args.models, presets)
    lines = digests(args.models, presets)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
