"""`make demo`: the main job end to end on the embedded default (MobileNetV2 on tnpu-s).

PyTorch model -> float IR (checked against torch eager) -> int8 quantisation (pt2e) ->
NPU binary -> bit-exact simulation (checked against the golden model) -> latency, energy,
MAC utilisation and the slowest layers.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

MODEL, TARGET, CALIBRATION = "mobilenet_v2", "tnpu-s", 16


def _say(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    from tessel.arch import load_preset
    from tessel.driver import StageTimes, compile_graph
    from tessel.frontend import import_model
    from tessel.ir import run_graph
    from tessel.models import resolve
    from tessel.passes import run_pipeline
    from tessel.quant.accuracy import default_config, sqnr_db
    from tessel.quant.api import quantize

    spec = resolve(MODEL)
    model, inputs = spec.factory()
    _say(f"== Tessel demo: {spec.description} -> {TARGET}")
    t0 = time.perf_counter()
    graph = run_pipeline(import_model(model, inputs))
    with torch.no_grad():
        ref = model(*inputs).numpy()
    out = run_graph(graph, [x.numpy() for x in inputs])[0]
    err = float(np.abs(out - ref).max()) / float(ref.max() - ref.min())
    _say(f"1. float IR: {len(graph.nodes)} nodes after the passes; interpreter vs torch eager: "
         f"max error {err:.1e} of the output range ({time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    qm = quantize(model, inputs, calibration_data=spec.calibration_data(CALIBRATION),
                  config=default_config(MODEL), calibration_samples=CALIBRATION)
    t1 = time.perf_counter()
    _say(f"2. int8 PTQ ({CALIBRATION} calibration samples, pt2e + TesselQuantizer) -> "
         f"{len(qm.graph.nodes)}-node integer IR in {t1 - t0:.1f} s; host ops: "
         f"{len(qm.host_ops) or 'none'}")
    times = StageTimes()
    cm = compile_graph(qm.graph, load_preset(TARGET), name=MODEL, times=times)
    stages = ", ".join(f"{k} {v:.2f} s" for k, v in times.seconds.items())
    _say(f"3. compiled for {TARGET}: {len(cm.binary) / 1e6:.2f} MB .tsl "
         f"({stages})")

    x = [t.numpy() for t in inputs]
    t0 = time.perf_counter()
    npu_out = cm.run(*x)[0]
    sim_s = time.perf_counter() - t0
    golden = qm.run(*x)[0]
    exact = np.array_equal(npu_out, golden)
    _say(f"4. simulated in {sim_s:.1f} s: simulator vs golden model "
         f"{'BIT-EXACT' if exact else 'MISMATCH'}; SQNR vs float PyTorch "
         f"{sqnr_db(ref, npu_out):.1f} dB; top-1 {int(np.argmax(npu_out))} "
         f"(float {int(np.argmax(ref))})")

    prof = cm.profile
    _say("5. " + prof.summary().replace("\n", "\n   "))
    _say("   five slowest layers:")
    for lay in prof.slowest(5):
        _say(f"     {lay.name:<32} {lay.op:<10} {lay.cycles:>9} cycles  {lay.bound:<8} "
             f"MAC {100 * lay.mac_utilisation:5.1f} %  {lay.mapping}")
    return 0 if exact and err <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
