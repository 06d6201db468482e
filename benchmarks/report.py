"""The page `make bench` writes (docs/benchmarks.md): a fixed header, the run's machine and
commit, the targets table and one section per benchmark, each under the command that produced
it. The benchmark modules return `Section`s; this module only assembles and judges them.
"""

from __future__ import annotations

import datetime
import operator
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Section:
    """One benchmark's tables: `command` reproduces them alone; `figures` are the numbers the
    targets read (keys such as ``"sim_vs_eager_cpu/resnet18"``)."""

    title: str
    command: str
    markdown: str
    figures: dict[str, float] = field(default_factory=dict)

    def print(self) -> None:
        """The tables, then one ``key = value`` line per figure (a benchmark run alone)."""
        print(self.markdown)
        for key, value in self.figures.items():
            print(f"{key} = {value:.4f}")


@dataclass(frozen=True)
class Target:
    """A goal on one figure: ``figure <op> bound`` (op ``"<="``, ``"<"`` or ``">="``)."""

    goal: str  # what the row says, e.g. "simulation <= 2x torch fp32 eager"
    subject: str  # the model or configuration the figure is of
    key: str  # the figure's key in the sections' `figures`
    op: str
    bound: float
    unit: str = ""  # appended to the figure, e.g. "x" or " s"
    basis: str = ""  # how it is measured, e.g. "CPU s, 1 thread"

    def verdict(self, figures: dict[str, float]) -> tuple[str, str]:
        """(the figure as text, "met" / "**NOT met**" / "not measured")."""
        if self.key not in figures:
            return "-", "not measured"
        value = figures[self.key]
        ok = _OPS[self.op](value, self.bound)
        return f"{value:.2f}{self.unit}", "met" if ok else "**NOT met**"


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge}

SIM_MODELS = ["resnet18", "mobilenet_v2", "vit_small", "minilm"]
CLI_MODELS = ["ds_cnn", "mobilenet_v2", "resnet18", "vit_small", "minilm"]

TARGETS: list[Target] = (
    [Target("simulation <= 2x torch fp32 eager", m, f"sim_vs_eager_cpu/{m}", "<=", 2.0, "x",
            "CPU s, one input, 1 thread each") for m in SIM_MODELS]
    + [Target("batch of 64 <= 1.5x torch fp32 eager", "resnet18", "batch_vs_eager_cpu/resnet18",
              "<=", 1.5, "x", "CPU s, 64 inputs, 1 thread each")]
    + [Target("whole `tessel compile` <= 2x torch.export", m, f"compile_vs_export_cpu/{m}", "<=",
              2.0, "x", "CPU s of fresh processes") for m in CLI_MODELS]
    + [Target("`tessel run --check` <= 2x `tessel run`", m, f"check_vs_run_cpu/{m}", "<=", 2.0,
              "x", "CPU s of fresh processes") for m in CLI_MODELS]
    + [Target("`tessel --help` < 0.5 s", "-", "help_wall", "<", 0.5, " s",
              "median wall s of fresh processes")]
    + [Target("refusing an unwritable destination < 1 s", "tessel compile ... -o /nonexistent/",
              "fail_fast_wall", "<", 1.0, " s", "median wall s of fresh processes")]
    + [Target("backend compile <= 1 s", m, f"backend_s/{m}", "<=", 1.0, " s",
              "CPU s, first compile in the process, tnpu-s") for m in ("mobilenet_v2",
                                                                         "resnet18")]
    + [Target(f"estimate vs simulated: {what} <= {bound:g} %", "worst zoo model x preset",
              f"fidelity_{k}", "<=", bound, " %", "bench_models' fidelity table")
       for k, what, bound in (("p90", "per-layer p90", 5.0), ("max", "per-layer max", 15.0),
                              ("whole", "whole-model error", 2.0))]
    + [Target("MiniLM constants >= 35 % smaller with --weights auto (cosine budget 0.01)",
              "minilm, u55-256", "auto_bytes_saved/minilm", ">=", 0.35, "",
              "fraction of int8's constants bytes")]
    + [Target("MiniLM --weights auto within its cosine budget (0.01 below int8's)", "minilm",
              "auto_metric_loss/minilm", "<=", 0.01, "", "8 held-out sentences")]
    + [Target("MiniLM constants >= 35 % smaller with --weights auto --activations auto "
              "(cosine budget 0.01)", "minilm, u55-256", "auto16_bytes_saved/minilm", ">=", 0.35,
              "", "fraction of int8's constants bytes"),
       Target("MiniLM --weights auto --activations auto within its cosine budget",
              "minilm", "auto16_metric_loss/minilm", "<=", 0.01, "", "8 held-out sentences")]
    + [Target("2:4 MiniLM fits tnpu-xs's flash with --weights auto",
              "minilm pruned 2:4, tnpu-xs, weight decoder on", "fit_vs_memory/minilm", "<=",
              1.0, "x",
              "compiled constants / flash bytes")]
    + [Target("ResNet-18 energy >= 25 % below int8 with --weights auto (sqnr budget 1 dB)",
              "resnet18, tnpu-s", "auto_energy_saved/resnet18", ">=", 0.25, "",
              "fraction of int8's energy")]
    + [Target("compressed MiniLM int8 weights <= 1.1x zstd's bytes", "minilm",
              "wcodec_vs_zstd/minilm", "<=", 1.1, "x", "zstd level 22, one frame per layer")]
    + [Target("weight compression on the NPU never slower", "resnet18, u55-256",
              "wcodec_npu_cycles/resnet18", "<=", 1.0, "x",
              "simulated cycles with the weight decoder / without")]
    + [Target("random weights never grow when compressed", "1 MiB uniform random bytes",
              "wcodec_random_ratio", "<=", 1.0, "", "stored bytes / raw bytes")]
    + [Target("2:4-sparse ResNet-18 >= 1.6x fewer matrix cycles on its convs", f"resnet18, {p}",
              f"sparse_conv_matrix_speedup/resnet18/{p}", ">=", 1.6, "x",
              "matrix busy cycles of the conv layers, dense / 2:4 (pruned, int8)")
       for p in ("u55-256", "tnpu-s")]
    + [Target("2:4-sparse ResNet-18 constants <= 0.65x dense (5/8 of the conv weights)",
              "resnet18, u55-256", "sparse_bytes_ratio/resnet18/u55-256", "<=", 0.65, "x",
              "constants bytes, 2:4 / dense, int8")]
    + [Target("int4 + 2:4 ResNet-18 fits tnpu-xs's 4 MiB flash",
              "resnet18, tnpu-xs, weight decoder on", "sparse_int4_constants/resnet18/tnpu-xs",
              "<=", 4194304, " B", "constants bytes of the compiled binary")]
    + [Target("2:4 ResNet-18 fits tnpu-xs's flash with --weights auto",
              "resnet18 pruned 2:4, tnpu-xs, weight decoder on", "fit_vs_memory/resnet18",
              "<=", 1.0, "x", "compiled constants / flash bytes")]
    + [Target("DSE >= 4 points/s per worker", "mobilenet_v2, 16 points, 1 local worker",
              "dse_per_worker/16", ">=", 4.0, "",
              "points per CPU s of the sweep's processes, median of the rounds")]
    + [Target("DSE scaling >= 0.85", f"mobilenet_v2, 64 points, {who}", f"dse_scaling_{k}/64",
              ">=", 0.85, "", "throughput with 2 / (2 x throughput with 1)")
       for k, who in (("local", "2 local workers"), ("ray", "local Ray, 2 CPUs"))]
    + [Target("`explore --scenario` >= 30 % below tnpu-s's nominal power, within its area",
              "xr_glasses", "xr_explore_saving", ">=", 0.30, "",
              "fraction of the average power saved, best design confirmed")]
)


def targets_table(figures: dict[str, float]) -> tuple[str, int]:
    """The targets as a markdown table, and how many were measured and not met."""
    lines = ["| goal | of | measured | basis | |", "|---|---|---:|---|---|"]
    failed = 0
    for t in TARGETS:
        value, verdict = t.verdict(figures)
        failed += verdict.startswith("**NOT")
        lines.append(f"| {t.goal} | {t.subject} | {value} | {t.basis} | {verdict} |")
    return "\n".join(lines), failed


def commit() -> str:
    """The short hash of HEAD, with "+dirty" when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+dirty" if dirty else "")


def machine() -> str:
    """CPU count and model, Python and torch versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy
    import torch
    return (f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
            f"torch {torch.__version__}, numpy {numpy.__version__}")


HEADER = """\
# Benchmarks

This page is written by `make bench` (`python -m benchmarks.run`); do not edit it by hand.
To regenerate it, run `make bench` in a clean checkout and commit the page: the run's commit is
below, and earlier figures live in git's history of this file.

What the figures mean is defined in [How the figures are defined](figures.md): cycles, latency,
MAC utilisation, roofline bound and efficiency, DRAM traffic, estimation fidelity, compile
time, simulator speed and design-space exploration throughput and scaling. Simulated figures
(cycles, utilisation, traffic, energy, estimate errors) are deterministic: they change only
when the compiler or the timing model does. Times are medians of several runs on a machine
that may be shared, so only ratios measured side by side in one run are meaningful; the
target rows use CPU seconds where a shared machine makes wall time measure the other tenants.
torch and BLAS are held to one thread wherever the simulator is compared with eager PyTorch.
`make bench` exits with status 1 when a measured target is not met.

Measured elsewhere, by their own commands:
`make fuzz-models` (random models compiled and simulated against the golden model; it prints
its counts), `make fuzz` (docs/reliability.md), `python -m benchmarks.bench_estimate`
(per-layer estimation errors with the worst layer named), `python -m benchmarks.bench_residency`
(on-chip residency off and on), `python -m benchmarks.scalesim_golden` (the matrix engine
against SCALE-Sim's cycle formula) and `python -m benchmarks.binary_digests` (binaries
byte-identical to another tree's).
"""


def page(sections: list[Section], revision: str, started: datetime.datetime, seconds: float,
         quick: bool) -> tuple[str, int]:
    """The whole page, and the number of measured targets not met (`revision`: `commit()`
    taken when the run started)."""
    figures: dict[str, float] = {}
    for s in sections:
        figures.update(s.figures)
    table, failed = targets_table(figures)
    parts = [HEADER,
             f"- Commit: `{revision}`\n"
             f"- Run: {started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.1f} min, "
             "`TESSEL_CACHE_DIR=off` (no quantised graph reused from an earlier run)\n"
             f"- Machine: {machine()}\n"]
    if quick:
        parts.append("**Quick mode** (`python -m benchmarks.run --quick`): a test of this "
                     "page's writer on small models; these figures are not the record.\n")
    parts += ["## Targets\n", table + "\n"]
    for s in sections:
        parts += [f"## {s.title}: `{s.command}`\n", s.markdown.strip() + "\n"]
    return "\n".join(parts), failed
