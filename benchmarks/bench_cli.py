"""CLI start-up, whole `tessel compile` and `run --check`, as a user would time them.

Run: ``python -m benchmarks.bench_cli [--compile-only] [MODEL ...]`` (default ds_cnn and the
four models of the simulation target: mobilenet_v2 resnet18 vit_small minilm;
``--compile-only``: no ``tessel run`` rows); prints a markdown table. Each
command runs in a fresh process; both wall seconds and CPU seconds (user + system of the child,
``resource.getrusage``) are reported, CPU being the meaningful one on a shared machine. The
export baseline is ``torch.export.export(...).run_decompositions()`` of the same model, timed in
a fresh process from its start (torch import and the zoo factory included, like the CLI).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXPORT = """
import sys, torch
from tessel.models import resolve
model, ex = resolve(sys.argv[1]).factory()
torch.export.export(model.eval(), ex, strict=False).run_decompositions()
"""


DEFAULT_MODELS = ["ds_cnn", "mobilenet_v2", "resnet18", "vit_small", "minilm"]


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    args = sys.argv[1:]
    compile_only = "--compile-only" in args
    models = [a for a in args if a != "--compile-only"] or DEFAULT_MODELS
    script = Path(sys.executable).parent / "tessel"  # the console script a user runs
    tessel = [str(script)] if script.exists() else [
        sys.executable, "-c", "import sys; from tessel.cli import main; sys.exit(main())"]
    print("| command | wall s | CPU s |\n|---|---:|---:|")
    for args in (["--help"], ["targets"]):
        wall, cpu = timed(tessel + args)
        print(f"| tessel {' '.join(args)} | {wall:.2f} | {cpu:.2f} |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            out = str(Path(tmp) / f"{name}.tsl")
            cw, cc = timed(tessel + ["compile", name, "-o", out])
            ew, ec = timed([sys.executable, "-c", EXPORT, name])
            print(f"| tessel compile {name} (default calibration) | {cw:.1f} | {cc:.1f} |")
            print(f"| torch.export + run_decompositions {name} | {ew:.1f} | {ec:.1f} |")
            print(f"| ratio compile / export {name} | {cw / ew:.2f}x | {cc / ec:.2f}x |",
                  flush=True)
            if compile_only:
                continue
            rw, rc = timed(tessel + ["run", out])
            kw, kc = timed(tessel + ["run", out, "--check"])
            print(f"| tessel run {name} | {rw:.1f} | {rc:.1f} |")
            print(f"| tessel run --check {name} | {kw:.1f} | {kc:.1f} |")
            print(f"| ratio run --check / run {name} | {kw / rw:.2f}x | {kc / rc:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
