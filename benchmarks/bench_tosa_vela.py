"""Tessel and Vela on the same integer graph: each zoo model is quantised once, exported as a
TOSA 1.0 file (`tessel export tosa`), and that one file is compiled by Tessel (`tessel compile
model.tosa`: imported as it is, no re-quantisation; cycles from the simulator's timing model)
and by Arm's Vela 5.2 (`vela model.tosa`, its cycle estimate `cycles_total`) for the Tessel
preset and the Vela system configuration the preset is matched to (the preset files name
them). Per layer, the Tessel layer and the Vela operator that end on the same TOSA tensor.

Vela's figures are its own performance estimate, not a measurement of silicon; Tessel's are its
simulator's. The two machines differ (Tessel's presets model an Ethos-U-like budget: MACs,
clock, SRAM and off-chip bandwidth, not the Ethos-U microarchitecture), so the ratio compares
two compilers each on its own machine model, on one graph.

Run: ``python -m benchmarks.bench_tosa_vela [--models ds_cnn,...] [--layers N]``.
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report import Section

# vit_small and minilm (cut) are not here: Vela 5.2 refuses the int32 GREATER of their softmax
# and layer-norm chains ("Non-passthrough operation (Greater) could not run on NPU")
MODELS = ["resnet18", "mobilenet_v2", "ds_cnn"]
CALIBRATION = 8
# Tessel preset -> (Vela accelerator, system config, memory mode): the matches the presets'
# descriptions name (src/tessel/arch/presets/u55-256.toml, u65-512.toml)
VELA = {
    "u55-256": ("ethos-u55-256", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
    "u65-512": ("ethos-u65-512", "Ethos_U65_Client_Server", "Dedicated_Sram_384KB"),
}


@dataclass
class Result:
    model: str
    preset: str
    tessel_cycles: int
    vela_cycles: int
    vela_npu_cycles: int
    tessel_layers: dict[str, int]
    vela_layers: dict[str, int]


def vela_tool() -> str:
    tool = shutil.which("vela") or str(Path(sys.executable).parent / "vela")
    if not Path(tool).exists():
        raise SystemExit("vela not found: pip install -e '.[bench]' (ethos-u-vela 5.2)")
    return tool


def export(model: str, folder: Path) -> Path:
    from tessel.frontend.tosa_export import export_tosa
    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    spec = resolve(model)
    module, inputs = spec.factory()
    qm = quantize(module, inputs, calibration_data=spec.calibration_data(CALIBRATION),
                  quant_config=default_config(model), calibration_samples=CALIBRATION)
    path = folder / f"{model}.tosa"
    path.write_bytes(export_tosa(qm.graph).to_bytes())
    return path


def tessel(path: Path, preset: str) -> tuple[int, dict[str, int]]:
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.frontend.tosa_import import import_tosa
    from tessel.passes.to_nhwc import to_nhwc
    from tessel.quant.lower import lower_qdq

    graph = to_nhwc(lower_qdq(import_tosa(path)))
    prof = compile_graph(graph, load_preset(preset), name=path.stem).profile
    return prof.cycles, {layer.name: layer.cycles for layer in prof.layers}


def vela(path: Path, preset: str, folder: Path) -> tuple[int, int, dict[str, int]]:
    accel, system, memory = VELA[preset]
    out = folder / f"vela-{path.stem}-{preset}"
    subprocess.run([vela_tool(), str(path), "--accelerator-config", accel, "--system-config",
                    system, "--memory-mode", memory, "--output-dir", str(out),
                    "--verbose-performance"], check=True, capture_output=True, text=True)
    summary = next(out.glob("*_summary_*.csv"))
    with summary.open() as f:
        row = next(csv.DictReader(f))
    layers: dict[str, int] = {}
    per_layer = next(out.glob("*_per-layer.csv"), None)
    if per_layer is not None:
        with per_layer.open() as f:
            for r in csv.DictReader(f):
                layers[r["Name"]] = layers.get(r["Name"], 0) + int(r["Op Cycles"])
    return int(float(row["cycles_total"])), int(float(row["cycles_npu"])), layers


def by_layer(vela_ops: dict[str, int], layers: list[str]) -> dict[str, int]:
    """Vela's operator cycles added up per Tessel layer: an operator belongs to the layer whose
    TOSA tensors it writes (the exporter names them `LAYER` or `LAYER[_part]__tN`; Vela may
    append its own suffix), the longest such layer name."""
    out: dict[str, int] = {}
    for name, cycles in vela_ops.items():
        owners = [t for t in layers if name == t or re.match(re.escape(t) + r"(_[a-z]+)?__t\d+",
                                                             name)]
        if owners:
            owner = max(owners, key=len)
            out[owner] = out.get(owner, 0) + cycles
    return out


def measure(models: list[str], presets: list[str]) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for model in models:
            path = export(model, folder)
            for preset in presets:
                t_cycles, t_layers = tessel(path, preset)
                v_cycles, v_npu, v_ops = vela(path, preset, folder)
                results.append(Result(model, preset, t_cycles, v_cycles, v_npu, t_layers,
                                      by_layer(v_ops, list(t_layers))))
    return results


def _layer_table(r: Result, top: int) -> str:
    both = [n for n in r.tessel_layers if n in r.vela_layers]
    both.sort(key=lambda n: -r.vela_layers[n])
    rows = [f"| {n} | {r.tessel_layers[n]:,} | {r.vela_layers[n]:,} | "
            f"{r.tessel_layers[n] / max(r.vela_layers[n], 1):.2f} |" for n in both[:top]]
    return (f"{r.model} on {r.preset}: the {min(top, len(both))} layers Vela spends most "
            f"cycles on (of {len(both)} layers; Vela's operators matched by the TOSA "
            "tensors they write)\n\n"
            "| layer | Tessel cycles | Vela cycles | Tessel / Vela |\n|---|---|---|---|\n"
            + "\n".join(rows))


def run(models: list[str] | None = None, presets: list[str] | None = None,
        layers: int = 5) -> Section:
    models = models or MODELS
    presets = presets or list(VELA)
    results = measure(models, presets)
    rows = [f"| {r.model} | {r.preset} | {' / '.join(VELA[r.preset][1:])} | "
            f"{r.tessel_cycles:,} | {r.vela_cycles:,} | {r.vela_npu_cycles:,} | "
            f"{r.tessel_cycles / r.vela_cycles:.2f} |" for r in results]
    table = ("| model | Tessel preset | Vela system / memory mode | Tessel cycles | Vela cycles "
             "(total) | Vela NPU cycles | Tessel / Vela |\n|---|---|---|---|---|---|---|\n"
             + "\n".join(rows))
    per_layer = "\n\n".join(_layer_table(r, layers) for r in results if r.vela_layers)
    figures = {f"tosa_vela_ratio/{r.model}/{r.preset}": r.tessel_cycles / r.vela_cycles
               for r in results}
    command = "python -m benchmarks.bench_tosa_vela"
    if models != MODELS:
        command += f" --models {','.join(models)}"
    if presets != list(VELA):
        command += f" --presets {','.join(presets)}"
    if layers != 5:
        command += f" --layers {layers}"
    text = ("One TOSA file per model (`tessel export tosa`, "
            f"{CALIBRATION} calibration samples), compiled by Tessel (`tessel compile "
            "model.tosa`, simulated cycles) and by Vela 5.2 (`vela model.tosa`, its estimate); "
            "lower is better. The machines are each compiler's own model of the system named "
            "(bench_tosa_vela.py's docstring).\n\n" + table + "\n\n" + per_layer)
    return Section("Tessel vs Vela on the same TOSA graph", command, text, figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--presets", default=",".join(VELA))
    ap.add_argument("--layers", type=int, default=5)
    args = ap.parse_args()
    print(run(args.models.split(","), args.presets.split(","), args.layers).markdown)


if __name__ == "__main__":
    main()
