"""Code quality, estimation fidelity, compile time and simulator speed of the zoo models
(definitions: docs/figures.md).

Run: ``python -m benchmarks.bench_models [MODEL ...] [--presets a,b] [--repeats N]``; prints
markdown tables:
1. per model and preset: simulated cycles, latency, MAC utilisation, DRAM traffic, energy
   per inference (dynamic and static, `CompiledModel.profile`), roofline
   bound and roofline efficiency (= bound / simulated cycles);
2. per model and preset: the sum of the analytical layer estimates vs the simulated cycles;
3. compile time: whole compile (calibration included) split by stage, backend compile
   (integer IR -> binary bytes), and torch.export + run_decompositions as the reference;
4. simulator speed: functional run vs torch fp32 eager, same input, same process.
BLAS and torch are held to one thread so that ratios are stable on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from benchmarks.report import Section
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
    bytes / activation-memory B/cycle (docs/figures.md)."""
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


def _fidelity(prof) -> dict[str, float]:
    """Whole-model and per-layer (p50, p90 nearest rank, max) errors in %, as bench_estimate."""
    est = sum(layer.estimated_cycles for layer in prof.layers)
    errs = sorted(abs(layer.estimated_cycles - layer.cycles) / layer.cycles
                  for layer in prof.layers if layer.cycles)
    pick = lambda q: 100 * errs[min(len(errs) - 1, int(q * len(errs)))]  # noqa: E731
    return {"estimate": est, "whole": 100 * (est - prof.cycles) / prof.cycles,
            "p50": pick(0.5), "p90": pick(0.9), "max": 100 * errs[-1]}


def _fidelity_row(name: str, preset: str, prof, f: dict[str, float]) -> str:
    return (f"| {name} | {preset} | {f['estimate']:,} | {prof.cycles:,} | {f['whole']:+.1f} % | "
            f"{f['p50']:.1f} % | {f['p90']:.1f} % | {f['max']:.1f} % |")


def _median(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


QUALITY_HEAD = ("| model | preset | cycles | latency ms | MAC util | DRAM MB rd / wr | energy mJ | "
                "roofline bound (cycles) | roofline efficiency |\n|---|---|---|---|---|---|---|---|---|")
FIDELITY_HEAD = ("| model | preset | sum of layer estimates | simulated | whole model | per layer: "
                 "median | p90 | max |\n|---|---|---|---|---|---|---|---|")
COMPILE_HEAD = ("| model | whole compile | frontend + quantise | backend (stages) | backend CPU s | "
                "torch.export + run_decompositions |\n|---|---|---|---|---|---|")
SPEED_HEAD = "| model | preset | functional run | torch fp32 eager | ratio |\n|---|---|---|---|---|"


@dataclass
class _Rows:
    quality: list[str] = field(default_factory=list)
    fidelity: list[str] = field(default_factory=list)
    compile: list[str] = field(default_factory=list)
    speed: list[str] = field(default_factory=list)
    backend_s: dict[str, float] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)  # fidelity: the worst over rows


def _quality_row(name: str, preset: str, graph: Graph, cm, arch: NpuArch) -> str:
    prof = cm.profile
    bound = roofline_bound(graph, cm, arch)
    rd, wr = sum(prof.bytes_read.values()), sum(prof.bytes_written.values())
    return (f"| {name} | {preset} | {prof.cycles:,} | {prof.latency_ms:.3f} | "
            f"{100 * prof.mac_utilisation:.1f} % | {rd / 1e6:.2f} / {wr / 1e6:.2f} | "
            f"{prof.energy_uj / 1e3:.3f} | {bound:,} | {bound / prof.cycles:.3f} |")


def _first_preset_rows(rows: _Rows, name: str, preset: str, cm, spent: dict[str, float],
                       model, example, repeats: int) -> None:
    """Compile-time and simulator-speed rows (the first preset only)."""
    stages = ", ".join(f"{k} {v:.2f}" for k, v in spent["stages"].items())
    rows.compile.append(
        f"| {name} | {spent['quantise'] + spent['backend']:.1f} | {spent['quantise']:.1f} | "
        f"{spent['backend']:.2f} ({stages}) | {spent['backend_cpu']:.2f} | "
        f"{spent['export']:.2f} |")
    rows.backend_s[name] = spent["backend_cpu"]
    x = [t.numpy() for t in example]
    sim_s = _median(lambda: cm.run(*x), repeats)
    with torch.no_grad():
        eager_s = _median(lambda: model(*example), repeats)
    rows.speed.append(f"| {name} | {preset} | {sim_s:.3f} | {eager_s:.3f} | "
                      f"{sim_s / eager_s:.1f}x |")


def _one_model(rows: _Rows, name: str, presets: list[str], repeats: int) -> None:
    spec = resolve(name)
    model, example = spec.factory()
    t0 = time.perf_counter()
    qm = quantize(model, example, calibration_data=spec.calibration_data(CALIBRATION),
                  quant_config=default_config(name), calibration_samples=CALIBRATION)
    spent: dict = {"quantise": time.perf_counter() - t0}
    t0 = time.perf_counter()
    torch.export.export(model, example, strict=False).run_decompositions()
    spent["export"] = time.perf_counter() - t0
    for p in presets:
        arch = load_preset(p)
        try:
            bt = StageTimes()
            t0, c0 = time.perf_counter(), time.process_time()
            cm = compile_graph(qm.graph, arch, name=name, times=bt)
            spent["backend"], spent["stages"] = time.perf_counter() - t0, bt.seconds
            spent["backend_cpu"] = time.process_time() - c0
        except Exception as exc:  # noqa: BLE001 - a table cell, e.g. does not fit
            rows.quality.append(f"| {name} | {p} | {type(exc).__name__}: {str(exc)[:80]} "
                                "| | | | | | |")
            continue
        f = _fidelity(cm.profile)
        rows.fidelity.append(_fidelity_row(name, p, cm.profile, f))
        for k, v in (("p90", f["p90"]), ("max", f["max"]), ("whole", abs(f["whole"]))):
            rows.worst[k] = max(rows.worst.get(k, 0.0), v)
        rows.quality.append(_quality_row(name, p, qm.graph, cm, arch))
        if p == presets[0]:
            _first_preset_rows(rows, name, p, cm, spent, model, example, repeats)


def bench(names: list[str], presets: list[str], repeats: int) -> list[Section]:
    """Four sections: code quality, estimation fidelity, compile time, simulator speed.
    Figures: ``backend_s/NAME``, the backend compile CPU seconds on the first preset;
    ``fidelity_p90`` / ``fidelity_max`` / ``fidelity_whole``, the worst over every row (%)."""
    rows = _Rows()
    for name in names:
        _one_model(rows, name, presets, repeats)
        print(f"done {name}", file=sys.stderr, flush=True)
    cmd = "python -m benchmarks.bench_models" + (
        "" if names == MODELS else " " + " ".join(names))
    if presets != default_presets():
        cmd += f" --presets {','.join(presets)}"
    return [
        Section("Code quality (simulated)", cmd, QUALITY_HEAD + "\n" + "\n".join(rows.quality)),
        Section("Estimation fidelity: the analytical model (the search's estimate) vs the "
                "simulator", cmd, FIDELITY_HEAD + "\n" + "\n".join(rows.fidelity),
                {f"fidelity_{k}": v for k, v in rows.worst.items()}),
        Section(f"Compile time (seconds; {CALIBRATION} calibration samples; preset "
                f"{presets[0]})", cmd,
                "The backend columns are the first compile of the model in the process, wall "
                "seconds (by stage) and CPU seconds (this process's: on a shared machine its "
                "wall seconds also count the other tenants); the whole compile is frontend + "
                "quantise + backend.\n\n"
                + COMPILE_HEAD + "\n" + "\n".join(rows.compile),
                {f"backend_s/{n}": v for n, v in rows.backend_s.items()}),
        Section(f"Simulator speed (seconds, median of {repeats} after a warm-up)", cmd,
                "Functional run of `CompiledModel.run` on one input, one thread; cycles and "
                "energy are data-independent (`CompiledModel.profile`, computed once per "
                "binary).\n\n" + SPEED_HEAD + "\n" + "\n".join(rows.speed)),
    ]


def default_presets() -> list[str]:
    """tnpu-s and u65-512 first, then every other preset."""
    first = ["tnpu-s", "u65-512"]
    return first + [p for p in list_presets() if p not in first]


def run(names: list[str], presets: list[str], repeats: int) -> list[Section]:
    """`bench` with torch, BLAS and numpy's seed fixed as the tables need."""
    torch.set_num_threads(1)
    np.random.seed(0)
    with threadpool_limits(1):
        return bench(names, presets, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default=",".join(default_presets()))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for section in run(args.models, args.presets.split(","), args.repeats):
        print(f"\n### {section.title}\n\n{section.markdown}")


if __name__ == "__main__":
    main()
