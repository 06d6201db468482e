"""Differential fuzzing of the backend with the random-model generator (`make fuzz-models`).

    python tests/e2e/fuzz_models.py --seeds 2000 [--start 0] [--host-outputs]

(the graph input is an output too in every fifth model; --host-outputs: in every model)

For each seed: build the random integer model, compile it for a preset chosen by the seed,
simulate it on a seeded input and compare with the golden model bit for bit, and the C runtime
on the C NPU model with the simulator (when a C compiler is available). Counted:
mismatches (simulator != golden, or C != simulator), crashes (any exception other than a clean refusal),
refusals (a `TesselCompileError` naming the reason), fully compiled models (no host op), and the
reasons ops fell back to the host. Exit status 1 on any mismatch or crash.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from random_models import random_model  # noqa: E402

from tessel.arch import list_presets, load_preset  # noqa: E402
from tessel.driver import compile_graph  # noqa: E402
from tessel.errors import TesselCompileError  # noqa: E402
from tessel.quant.golden import run_golden  # noqa: E402
from tessel.runtime.cengine import available  # noqa: E402

C_ENGINE_MISSING = available()


def one(seed: int, presets: list[str], host_outputs: bool | None) -> tuple[str, list[str]]:
    """('ok' | 'mismatch' | 'refused: ...' | 'crash: ...', host-op reasons) of one seed."""
    try:
        g = random_model(seed, host_outputs=host_outputs)
        arch = load_preset(presets[seed % len(presets)])
        x = np.random.default_rng(seed).integers(-128, 128, g.inputs[0].type.shape, np.int8)
        cm = compile_graph(g, arch, name=g.name)
        got, want = cm.run(x), run_golden(g, [x])
        c_got = cm.run(x, engine="c") if C_ENGINE_MISSING is None else got
    except TesselCompileError as exc:  # a clean refusal names its reason
        return f"refused: {str(exc).splitlines()[0][:120]}", []
    except Exception as exc:  # noqa: BLE001 - a crash is what we count
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return f"crash: {type(exc).__name__} at {Path(tb.filename).name}:{tb.lineno}", []
    reasons = [re.sub(r"^%\S+ = ", "", h).split(" at ")[0] for h in cm.program.metadata["host_ops"]]
    same = all(np.array_equal(a, b) and np.array_equal(a, c)
               for a, b, c in zip(got, want, c_got, strict=True))
    return ("ok" if same else "mismatch"), reasons


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2000)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--host-outputs", action="store_true",
                   help="make the graph input an output of every model (default: every fifth)")
    args = p.parse_args(argv)
    presets = list_presets()
    print("C runtime: " + (C_ENGINE_MISSING or "compared with the simulator on every model"))
    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    bad: list[str] = []
    full = 0
    t0 = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        status, why = one(seed, presets, True if args.host_outputs else None)
        kind = status.split(":")[0]
        counts[kind] += 1
        if kind == "ok" and not why:
            full += 1
        reasons.update(why)
        if kind in ("mismatch", "crash") or kind == "refused":
            bad.append(f"seed {seed}: {status}")
    n = args.seeds
    print(f"{n} seeds ({args.start}..{args.start + n - 1}) in {time.perf_counter() - t0:.0f} s")
    print(f"ok {counts['ok']}, mismatches {counts['mismatch']}, crashes {counts['crash']}, "
          f"refused {counts['refused']}; fully compiled (no host op) {full} "
          f"({100.0 * full / n:.1f} %)")
    for why, k in reasons.most_common():
        print(f"  host op x{k}: {why}")
    for line in bad[:50]:
        print("  " + line)
    return 1 if counts["mismatch"] or counts["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
