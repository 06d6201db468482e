"""The C runtime: the footprint of libtessel (code at -Os, the RAM it needs beside the arena) and
the speed of `--engine c` (libtessel + the C NPU model) against the Python simulator.

Run: ``python -m benchmarks.bench_c_runtime [--models resnet18 mobilenet_v2] [--repeats N]``.

Footprint: every file of tessel/runtime/c/src compiled alone with the system compiler at
``-std=c99 -Os -fno-pie`` for the host (x86-64 here; a Cortex-M build differs), sections summed from
``size -A``; ``sizeof(tsl_model)`` (the loaded model, static in firmware); the peak stack of
``tsl_load``, ``tsl_prepare`` and ``tsl_invoke`` measured by tools/stack_probe.c on a painted
stack with a driver that does nothing (the library's frames only), for DS-CNN. Speed: one
input, tnpu-s, the two engines interleaved, medians of N after a warm-up each, CPU seconds.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.report import Section

MODELS = ["resnet18", "mobilenet_v2"]
REPEATS = 3
PUBLISHED = (
    "Published footprints, for scale (other processors and scopes, not measured here): "
    "TensorFlow Lite Micro's \"core runtime just fits in 16 KB on an Arm Cortex M3\" "
    "(tensorflow.org/lite/microcontrollers and the TFLM README), and TFLM \"is designed to work "
    "with as little as 20 KB of flash and 4 KB of SRAM\" (P. Warden, D. Situnayake, *TinyML*, "
    "O'Reilly 2019, ch. 17). An Ethos-U system runs TFLM with Arm's Ethos-U core driver "
    "(ethos-u-core-driver) beside it; we found no code-size figure Arm publishes for the driver. "
    "libtessel's figures above are x86-64 code (Thumb-2 is denser) and include what TFLM leaves "
    "to its op kernels and to the converter: the host-op kernels, the JSON and IR parsers, and "
    "the validation of every rule of the format. Its RAM beside the arena is `tsl_model` (the "
    "`TSL_MAX_*` limits size it; lower them with -D for a small model) and the stack; "
    "`tsl_load`'s peak comes from the JSON reader's duplicate-key table and the loader's state.")


def _section_sizes(obj: Path) -> dict[str, int]:
    out = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True, check=True)
    sizes: dict[str, int] = {}
    for line in out.stdout.splitlines():
        m = re.match(r"^(\.\S+)\s+(\d+)", line)
        if m:
            sizes[m[1]] = sizes.get(m[1], 0) + int(m[2])
    return sizes


def footprint(binary: Path) -> tuple[str, dict[str, float]]:
    """The code and RAM table of libtessel (and the stack of running `binary`)."""
    from tessel.runtime.cbuild import C_ROOT, compiler, sources

    cc = compiler()
    totals = {".text": 0, ".rodata": 0, ".data": 0, ".bss": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for src in sources(("src",)):
            obj = Path(tmp) / (src.stem + ".o")
            subprocess.run([*cc.split(), "-std=c99", "-Os", "-fno-pie", f"-I{C_ROOT / 'include'}",
                            "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
            for name, size in _section_sizes(obj).items():
                for key in totals:
                    if name == key or name.startswith(key + "."):
                        totals[key] += size
        probe = Path(tmp) / "stack_probe"
        subprocess.run([*cc.split(), "-std=c99", "-Os", f"-I{C_ROOT / 'include'}",
                        *map(str, sources(("src",))), str(C_ROOT / "tools" / "stack_probe.c"),
                        "-o", str(probe), "-lm"], check=True, capture_output=True)
        line = subprocess.run([str(probe), str(binary)], capture_output=True, text=True,
                              check=True).stdout
    stack = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", line)}
    version = subprocess.run([*cc.split(), "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    rows = [f"libtessel (tessel/runtime/c/src, {len(sources(('src',)))} files) built by "
            f"`{cc} -std=c99 -Os -fno-pie` ({version}), x86-64 (not position-independent, as "
            "firmware links); the arena (tensors, host values, the "
            "NPU's off-chip windows) is the caller's and is not counted here.\n",
            "| figure | bytes |", "|---|---:|",
            f"| .text (code) | {totals['.text']:,} |",
            f"| .rodata (tables, strings) | {totals['.rodata']:,} |",
            f"| .data + .bss (static RAM of the library) | {totals['.data'] + totals['.bss']:,} |",
            f"| sizeof(tsl_model) (the loaded model; static in firmware) | {stack['model']:,} |",
            f"| peak stack, tsl_load (DS-CNN) | {stack['load']:,} |",
            f"| peak stack, tsl_prepare | {stack['prepare']:,} |",
            f"| peak stack, tsl_invoke (host parts; the driver's own frames not counted) | "
            f"{stack['invoke']:,} |",
            "", PUBLISHED]
    figures = {"c_text_os": float(totals[".text"]), "c_model_bytes": float(stack["model"]),
               "c_stack_load": float(stack["load"]), "c_stack_invoke": float(stack["invoke"])}
    return "\n".join(rows), figures


def speed(names: list[str], repeats: int, preset: str = "tnpu-s") -> tuple[str, dict[str, float]]:
    """The table of `--engine c` vs the Python simulator, one input, and the ratios."""
    import numpy as np

    from benchmarks.bench_sim import _interleaved, _one_blas_thread
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    rows = [f"{preset}, one input, CPU seconds, medians of {repeats} after a warm-up, the two "
            "engines interleaved; outputs equal bit for bit.\n",
            "| model | Python simulator | --engine c | C / Python |", "|---|---:|---:|---:|"]
    figures = {}
    for name in names:
        spec = resolve(name)
        model, example = spec.factory()
        qm = quantize(model, example, calibration_data=spec.calibration_data(4),
                      quant_config=default_config(name), calibration_samples=4)
        cm = compile_graph(qm.graph, load_preset(preset), name=name)
        x = [t.numpy() for t in example]
        for a, b in zip(cm.run(*x), cm.run(*x, engine="c"), strict=True):
            assert np.array_equal(a, b), f"{name}: --engine c differs from the simulator"
        with _one_blas_thread():
            (py, _), (c, _) = _interleaved([lambda cm=cm, x=x: cm.run(*x),
                                            lambda cm=cm, x=x: cm.run(*x, engine="c")], repeats)
        rows.append(f"| {name} | {py:.3f} | {c:.3f} | {c / py:.1f}x |")
        figures[f"c_vs_python_cpu/{name}"] = c / py
        print(rows[-1], file=sys.stderr, flush=True)
    return "\n".join(rows), figures


def run(names: list[str] = MODELS, repeats: int = REPEATS) -> Section:
    from tessel.driver import compile_graph  # noqa: F401 - torch first, as the other sections
    from tessel.models import resolve

    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "ds_cnn.tsl"
        _compile_ds_cnn(binary, resolve)
        size_md, size_fig = footprint(binary)
    speed_md, speed_fig = speed(names, repeats)
    command = "python -m benchmarks.bench_c_runtime" + (
        f" --models {' '.join(names)}" if names != MODELS else "") + (
        f" --repeats {repeats}" if repeats != REPEATS else "")
    return Section("C runtime: footprint and speed", command,
                   size_md + "\n\n" + speed_md, {**size_fig, **speed_fig})


def _compile_ds_cnn(path: Path, resolve) -> None:
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    spec = resolve("ds_cnn")
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(4),
                  quant_config=default_config("ds_cnn"), calibration_samples=4)
    compile_graph(qm.graph, load_preset("tnpu-s"), name="ds_cnn").save(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--repeats", type=int, default=REPEATS)
    args = ap.parse_args()
    section = run(args.models, args.repeats)
    print(f"## {section.title}: `{section.command}`\n\n{section.markdown}")


if __name__ == "__main__":
    main()
