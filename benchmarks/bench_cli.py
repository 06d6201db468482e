"""CLI start-up, whole `tessel compile` and `run --check`, as a user would time them.

Run: ``python -m benchmarks.bench_cli [--compile-only] [MODEL ...]`` (default ds_cnn and the
four models of the simulation target: mobilenet_v2 resnet18 vit_small minilm;
``--compile-only``: no ``tessel run`` rows); prints a markdown table. Each
command runs in a fresh process; both wall seconds and CPU seconds (user + system of the child,
``resource.getrusage``) are reported, CPU being the meaningful one on a shared machine. The
export baseline is ``torch.export.export(...).run_decompositions()`` of the same model, timed in
a fresh process from its start (torch import and the zoo factory included, like the CLI). The
start-up commands (`--help`, `targets`) run ``STARTS`` times each, the median reported.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import Section

EXPORT = """
import sys, torch
from tessel.models import resolve
model, ex = resolve(sys.argv[1]).factory()
torch.export.export(model.eval(), ex, strict=False).run_decompositions()
"""


DEFAULT_MODELS = ["ds_cnn", "mobilenet_v2", "resnet18", "vit_small", "minilm"]
STARTS = 5  # runs of each start-up command (`--help`, `targets`): the median is reported


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _tessel() -> list[str]:
    script = Path(sys.executable).parent / "tessel"  # the console script a user runs
    return [str(script)] if script.exists() else [
        sys.executable, "-c", "import sys; from tessel.cli import main; sys.exit(main())"]


def _model_rows(tessel: list[str], name: str, tmp: str, compile_only: bool,
                figures: dict[str, float]) -> list[str]:
    out = str(Path(tmp) / f"{name}.tsl")
    cw, cc = timed(tessel + ["compile", name, "-o", out])
    ew, ec = timed([sys.executable, "-c", EXPORT, name])
    figures[f"compile_vs_export_cpu/{name}"] = cc / ec
    rows = [f"| tessel compile {name} (default calibration) | {cw:.1f} | {cc:.1f} |",
            f"| torch.export + run_decompositions {name} | {ew:.1f} | {ec:.1f} |",
            f"| ratio compile / export {name} | {cw / ew:.2f}x | {cc / ec:.2f}x |"]
    if not compile_only:
        rw, rc = timed(tessel + ["run", out])
        kw, kc = timed(tessel + ["run", out, "--check"])
        figures[f"check_vs_run_cpu/{name}"] = kc / rc
        rows += [f"| tessel run {name} | {rw:.1f} | {rc:.1f} |",
                 f"| tessel run --check {name} | {kw:.1f} | {kc:.1f} |",
                 f"| ratio run --check / run {name} | {kw / rw:.2f}x | {kc / rc:.2f}x |"]
    return rows


def run(models: list[str], compile_only: bool = False) -> Section:
    """The table; figures ``help_wall``, ``compile_vs_export_cpu/NAME`` and
    ``check_vs_run_cpu/NAME`` (CPU ratios)."""
    tessel = _tessel()
    rows = ["| command | wall s | CPU s |", "|---|---:|---:|"]
    figures: dict[str, float] = {}
    for args in (["--help"], ["targets"]):  # quick commands: medians of STARTS runs
        runs = [timed(tessel + args) for _ in range(STARTS)]
        wall, cpu = (statistics.median(r[i] for r in runs) for i in (0, 1))
        rows.append(f"| tessel {' '.join(args)} (median of {STARTS}) | {wall:.2f} | {cpu:.2f} |")
        if args == ["--help"]:
            figures["help_wall"] = wall
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            rows += _model_rows(tessel, name, tmp, compile_only, figures)
            print(f"done {name}", file=sys.stderr, flush=True)
    command = "python -m benchmarks.bench_cli" + (" --compile-only" if compile_only else "") + (
        "" if models == DEFAULT_MODELS else " " + " ".join(models))
    return Section("Command line: start-up, whole compile, run --check", command,
                   "Each command in a fresh process; CPU = user + system of the child.\n\n"
                   + "\n".join(rows), figures)


def main() -> None:
    args = sys.argv[1:]
    compile_only = "--compile-only" in args
    models = [a for a in args if a != "--compile-only"] or DEFAULT_MODELS
    print(run(models, compile_only).markdown)


if __name__ == "__main__":
    main()
