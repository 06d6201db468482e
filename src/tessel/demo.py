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

from tessel.progress import step, watching

MODEL, TARGET, CALIBRATION = "mobilenet_v2", "tnpu-s", 16


def _say(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    from tessel.progress import configure

    configure(0)  # progress bars on a terminal, timestamped lines on stderr otherwise
    with watching("demo: loading the model"):
        return _run()


def _run() -> int:
    from tessel.models import resolve

    spec = resolve(MODEL)
    model, inputs = spec.factory()
    _say(f"== Tessel demo: {spec.description} -> {TARGET}")
    ref, err = _float_check(model, inputs)
    qm = _quantise(spec, model, inputs)
    cm = _compile(qm)
    exact = _simulate(cm, qm, inputs, ref)
    with step("5. timing model: per-layer profile"):
        prof = cm.profile
    _say("5. " + prof.summary().replace("\n", "\n   "))
    _say("   five slowest layers:")
    prof.layer_table(5).print()
    return 0 if exact and err <= 1e-4 else 1


def _float_check(model, inputs) -> tuple[np.ndarray, float]:
    from tessel.frontend import import_model
    from tessel.ir import run_graph
    from tessel.passes import run_pipeline

    t0 = time.perf_counter()
    with step("1. torch.export, import and float passes"):
        graph = run_pipeline(import_model(model, inputs))
    with step("1. float IR interpreter vs torch eager"):
        with torch.no_grad():
            ref = model(*inputs).numpy()
        out = run_graph(graph, [x.numpy() for x in inputs])[0]
    err = float(np.abs(out - ref).max()) / float(ref.max() - ref.min())
    _say(f"1. float IR: {len(graph.nodes)} nodes after the passes; interpreter vs torch eager: "
         f"max error {err:.1e} of the output range ({time.perf_counter() - t0:.1f} s)")
    return ref, err


def _quantise(spec, model, inputs):
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    t0 = time.perf_counter()
    with step(f"2. int8 PTQ ({CALIBRATION} calibration samples)"):
        qm = quantize(model, inputs, calibration_data=spec.calibration_data(CALIBRATION),
                      quant_config=default_config(MODEL), calibration_samples=CALIBRATION)
    _say(f"2. int8 PTQ ({CALIBRATION} calibration samples, pt2e + TesselQuantizer) -> "
         f"{len(qm.graph.nodes)}-node integer IR in {time.perf_counter() - t0:.1f} s; host "
         f"ops: {len(qm.host_ops) or 'none'}")
    return qm


def _compile(qm):
    from tessel.arch import load_preset
    from tessel.driver import StageTimes, compile_graph

    times = StageTimes()
    with step(f"3. compiling for {TARGET}"):
        cm = compile_graph(qm.graph, load_preset(TARGET), name=MODEL, times=times)
    stages = ", ".join(f"{k} {v:.2f} s" for k, v in times.seconds.items())
    _say(f"3. compiled for {TARGET}: {len(cm.binary) / 1e6:.2f} MB .tsl ({stages})")
    return cm


def _simulate(cm, qm, inputs, ref) -> bool:
    from tessel.analysis.accuracy import sqnr_db

    x = [t.numpy() for t in inputs]
    t0 = time.perf_counter()
    with step("4. simulating the binary"):
        npu_out = cm.run(*x)[0]
    sim_s = time.perf_counter() - t0
    with step("4. golden model"):
        golden = qm.run(*x)[0]
    exact = bool(np.array_equal(npu_out, golden))
    _say(f"4. simulated in {sim_s:.1f} s: simulator vs golden model "
         f"{'BIT-EXACT' if exact else 'MISMATCH'}; SQNR vs float PyTorch "
         f"{sqnr_db(ref, npu_out):.1f} dB; top-1 {int(np.argmax(npu_out))} "
         f"(float {int(np.argmax(ref))})")
    return exact


if __name__ == "__main__":
    sys.exit(main())
