"""SHA-256 of every zoo model's binary on every preset, and its backend compile seconds.

Run: ``python -m benchmarks.binary_digests [MODEL ...] [--presets a,b] [--out FILE]``; prints
one line per (model, preset): ``model preset sha256 seconds`` (models that do not fit a preset
print ``model preset error <message>``). A refactoring that must not change bytes runs this
under two source trees (``PYTHONPATH=<tree>/src``) and diffs the first three columns.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError

MODELS = ["mobilenet_v2", "resnet18", "ds_cnn", "vit_small", "minilm", "digits_cnn"]
PRESETS = ["tnpu-s", "u65-512", "u55-256", "tnpu-m", "tnpu-xs"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--out", help="also write the lines to this file")
    args = ap.parse_args(argv)
    sys.path.insert(0, "tests/e2e")
    from zoo_cache import quantized  # the tests' quantised zoo (same calibration)

    lines = []
    for name in args.models:
        qm = quantized(name)[0]
        for preset in args.presets.split(","):
            arch = load_preset(preset)
            t0 = time.perf_counter()
            try:
                binary = compile_graph(qm.graph, arch, name=name).binary
            except TesselCompileError as e:
                line = f"{name} {preset} error {str(e).splitlines()[0][:80]}"
            else:
                line = (f"{name} {preset} {hashlib.sha256(binary).hexdigest()} "
                        f"{time.perf_counter() - t0:.2f}")
            print(line, flush=True)
            lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
