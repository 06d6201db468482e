"""Byte-compare compiled binaries of the zoo between two source trees (a refactoring check of
the residency / prefetch planners: their results must not change). Run it, not a unit test:

    python benchmarks/check_residency_identical.py /work/main/src [models...]

For each model x preset it compiles in a subprocess with PYTHONPATH=<ref> and with this
tree's src, and compares `compiled.binary` (sha256). Exits 1 on any difference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MODELS = ["mobilenet_v2", "resnet18", "ds_cnn", "vit_small", "minilm", "digits_cnn"]
PRESETS = ["tnpu-s", "u65-512", "u55-256", "tnpu-m", "tnpu-xs"]
SKIP = {("resnet18", "tnpu-xs"), ("minilm", "tnpu-xs")}  # do not fit

CHILD = r"""
import hashlib, json, sys
SKIP = SKIP_SET
sys.path.insert(0, "tests/e2e")
from zoo_cache import quantized
from tessel.arch.loader import load_preset
from tessel.driver import compile_graph
out = {}
for model in sys.argv[2].split(","):
    qm, _, _ = quantized(model)
    for preset in sys.argv[1].split(","):
        if (model, preset) in SKIP:
            continue
        cm = compile_graph(qm.graph, load_preset(preset), name="x")
        out[model + "/" + preset] = hashlib.sha256(bytes(cm.binary)).hexdigest()
print(json.dumps(out))
""".replace("SKIP_SET", repr(SKIP))


def run(src: str, models: list[str]) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=src)
    res = subprocess.run([sys.executable, "-c", CHILD, ",".join(PRESETS), ",".join(models)],
                         env=env, cwd=HERE, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ref = sys.argv[1] if len(sys.argv) > 1 else "/work/main/src"
    models = sys.argv[2:] or MODELS
    bad = 0
    for m in models:
        a, b = run(ref, [m]), run(str(HERE / "src"), [m])
        for k in sorted(a):
            same = a[k] == b.get(k)
            bad += not same
            print(f"{k:28s} {'same' if same else 'DIFFERENT'} {a[k][:12]} {b.get(k, '-')[:12]}",
                  flush=True)
    print("all identical" if not bad else f"{bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
