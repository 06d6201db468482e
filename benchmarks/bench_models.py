"""Code quality, compile time and simulator speed of the zoo models (BENCHMARKS.md definitions).

Run: ``python -m benchmarks.bench_models [MODEL ...] [--presets a,b] [--repeats N]``; prints
markdown tables:
1. per model and preset: simulated cycles, latency, MAC utilisation, DRAM traffic, energy
   per inference (dynamic and static, `CompiledModel.profile`), roofline
   bound and roofline efficiency (= bound / simulated cycles);
2. compile time: whole compile (calibration included) split by stage, backend compile
   (integer IR -> binary bytes), and torch.export + run_decompositions as the reference;
3. simulator speed: functional run and timing vs torch fp32 eager, same input, same process.
BLAS and torch are held to one thread so that ratios are stable on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from tessel.arch import NpuArch, list_presets, load_preset
from tessel.driver import StageTimes, compile_graph
from tessel.ir import Graph
from tessel.models import resolve
from tessel.ops.registry import node_macs
from tessel.quant.api import quantize
from tessel.quant.config import default_config

MODELS = ["mobilenet_v2", "resnet18", "ds_cnn", "vit_small", "minilm", "digits_cnn"]
CALIBRATION = 8


def roofline_bound(graph: Graph, cm, arch: NpuArch) -> int:
    """sum over layers of max(MACs / peak, weight bytes / weight-memory B/cycle) + model I/O
    bytes / activation-memory B/cycle (BENCHMARKS.md)."""
    wmem = arch.offchip[arch.memory_index(arch.weights_memory)]
    amem = arch.offchip[arch.memory_index(arch.activations_memory)]
    npu = {n for layer in cm.program.metadata["layers"] for n in layer.get("nodes", [layer["name"]])}
    total = 0.0
    for node in graph.nodes:
        if node.name not in npu:
            continue
        wbytes = sum(graph.type_of(i).nbytes for i in node.inputs
                     if graph.constant_value(i) is not None)
        total += max(node_macs(graph, node) / arch.peak_macs_per_cycle,
                     wbytes / wmem.bytes_per_cycle)
    io = sum(d.nbytes for d in cm.program.inputs) + sum(d.nbytes for d in cm.program.outputs)
    return int(total + io / amem.bytes_per_cycle)


def _fidelity_row(name: str, preset: str, prof) -> str:
    est = sum(layer.estimated_cycles for layer in prof.layers)
    errs = sorted(abs(layer.estimated_cycles - layer.cycles) / layer.cycles
                  for layer in prof.layers if layer.cycles)
    pick = lambda q: 100 * errs[min(len(errs) - 1, int(q * len(errs)))]  # noqa: E731
    return (f"| {name} | {preset} | {est:,} | {prof.cycles:,} | "
            f"{100 * (est - prof.cycles) / prof.cycles:+.1f} % | {pick(0.5):.1f} % | "
            f"{pick(0.9):.1f} % | {100 * errs[-1]:.1f} % |")


def _median(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(names: list[str], presets: list[str], repeats: int) -> None:
    quality, compile_rows, speed, fidelity = [], [], [], []
    for name in names:
        spec = resolve(name)
        model, example = spec.factory()
        times = StageTimes()
        t0 = time.perf_counter()
        qm = quantize(model, example, calibration_data=spec.calibration_data(CALIBRATION),
                      config=default_config(name), calibration_samples=CALIBRATION)
        times.record("frontend+quantise", t0)
        t0 = time.perf_counter()
        ep = torch.export.export(model, example, strict=False).run_decompositions()
        export_s = time.perf_counter() - t0
        del ep
        x = [t.numpy() for t in example]
        for p in presets:
            arch = load_preset(p)
            try:
                bt = StageTimes()
                t0 = time.perf_counter()
                cm = compile_graph(qm.graph, arch, name=name, times=bt)
                backend_s = time.perf_counter() - t0
            except Exception as exc:  # noqa: BLE001 - a table cell, e.g. does not fit
                quality.append(f"| {name} | {p} | {type(exc).__name__}: {str(exc)[:80]} "
                               "| | | | | | |")
                continue
            prof = cm.profile
            fidelity.append(_fidelity_row(name, p, prof))
            bound = roofline_bound(qm.graph, cm, arch)
            rd, wr = sum(prof.bytes_read.values()), sum(prof.bytes_written.values())
            quality.append(
                f"| {name} | {p} | {prof.cycles:,} | {prof.latency_ms:.3f} | "
                f"{100 * prof.mac_utilisation:.1f} % | {rd / 1e6:.2f} / {wr / 1e6:.2f} | "
                f"{prof.energy_uj / 1e3:.3f} | {bound:,} | {bound / prof.cycles:.3f} |")
            if p == presets[0]:
                whole = times.seconds["frontend+quantise"] + backend_s
                stages = ", ".join(f"{k} {v:.2f}" for k, v in bt.seconds.items())
                compile_rows.append(
                    f"| {name} | {whole:.1f} | {times.seconds['frontend+quantise']:.1f} | "
                    f"{backend_s:.2f} ({stages}) | {export_s:.2f} |")
                sim_s = _median(lambda cm=cm, x=x: cm.run(*x), repeats)
                with torch.no_grad():
                    eager_s = _median(lambda m=model, ex=example: m(*ex), repeats)
                speed.append(f"| {name} | {p} | {sim_s:.3f} | {eager_s:.3f} | "
                             f"{sim_s / eager_s:.1f}x |")
        print(f"done {name}", flush=True)
    print("\n### Code quality (simulated)\n")
    print("| model | preset | cycles | latency ms | MAC util | DRAM MB rd / wr | energy mJ | "
          "roofline bound (cycles) | roofline efficiency |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(quality))
    print("\n### Estimation fidelity: analytical model (the search's estimate) vs simulator\n")
    print("| model | preset | sum of layer estimates | simulated | whole model | per layer: "
          "median | p90 | max |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(fidelity))
    print(f"\n### Compile time (seconds; {CALIBRATION} calibration samples; preset "
          f"{presets[0]})\n")
    print("| model | whole compile | frontend + quantise | backend (stages) | torch.export + "
          "run_decompositions |")
    print("|---|---|---|---|---|")
    print("\n".join(compile_rows))
    print(f"\n### Simulator speed (seconds, median of {repeats} after a warm-up)\n")
    # (cycles and energy are data-independent: CompiledModel.profile, computed once per binary)
    print("| model | preset | functional run | torch fp32 eager | ratio |")
    print("|---|---|---|---|---|")
    print("\n".join(speed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default=",".join(["tnpu-s", "u65-512"] + [
        p for p in list_presets() if p not in ("tnpu-s", "u65-512")]))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0)
    with threadpool_limits(1):
        bench(args.models, args.presets.split(","), args.repeats)


if __name__ == "__main__":
    main()
