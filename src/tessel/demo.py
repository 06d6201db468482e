"""`make demo`: the main job end to end on the embedded default model (MobileNetV2).

Today: import -> float passes -> summary -> float interpreter vs PyTorch eager.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch


def main() -> int:
    from tessel.frontend import import_model
    from tessel.ir import run_graph
    from tessel.models import load
    from tessel.passes import run_pipeline

    print("== Tessel demo: MobileNetV2 1.0 @224")
    t0 = time.perf_counter()
    model, inputs = load("mobilenet_v2")
    graph = import_model(model, inputs)
    t1 = time.perf_counter()
    print(f"imported with torch.export in {t1 - t0:.1f} s: {len(graph.nodes)} IR nodes")
    graph = run_pipeline(graph)
    t2 = time.perf_counter()
    print(f"float passes (verifier after each) in {t2 - t1:.2f} s")
    print(graph.summary())
    with torch.no_grad():
        ref = model(*inputs).numpy()
    out = run_graph(graph, [x.numpy() for x in inputs])[0]
    err = float(np.abs(out - ref).max())
    rng = float(ref.max() - ref.min())
    ok = err <= 1e-4 * rng
    print(f"float interpreter vs torch eager: max |err| = {err:.3g} "
          f"({err / rng:.2e} of the output range; limit 1e-4) -> {'OK' if ok else 'MISMATCH'}")
    top = int(np.argmax(out)), int(np.argmax(ref))
    print(f"top-1 class: interpreter {top[0]}, torch {top[1]}")
    return 0 if ok and top[0] == top[1] else 1


if __name__ == "__main__":
    sys.exit(main())
