"""`make bench`: run every benchmark and write docs/benchmarks.md (benchmarks.report): each
table under the command that produced it, the run's commit and machine, and the targets, each
judged met or not met from the figures of this run.

Run: ``python -m benchmarks.run [--out FILE] [--quick]``. ``--quick`` runs each benchmark on
small models with few repeats (a minute or two; a test of the page, not figures of record) and
writes build/benchmarks-quick.md unless ``--out`` says otherwise. Exit status 1 when a measured
target is not met (the page is written first; not in quick mode).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from benchmarks import (
    bench_accuracy,
    bench_c_runtime,
    bench_cli,
    bench_cli_fail_fast,
    bench_dse,
    bench_models,
    bench_precision,
    bench_scenario,
    bench_sim,
    bench_sparsity,
    bench_tosa_vela,
    bench_weight_codec,
    bench_xr,
    report,
)
from benchmarks.report import CLI_MODELS, SIM_MODELS, Section


def full() -> list[Section]:
    sections = [bench_sim.micro()]
    # the zoo before anything else compiles a zoo model: its compile times are the first
    # compile of each model in the process (later ones reuse the instruction-cost memos)
    sections += bench_models.run(bench_models.MODELS, bench_models.default_presets(), 5)
    sections.append(bench_sim.versus_eager(SIM_MODELS))
    sections.append(bench_sim.versus_eager(["resnet18"], repeats=3, batch=64))
    sections.append(bench_accuracy.run(bench_accuracy.MODELS))
    sections.append(bench_precision.run(bench_precision.MODELS))
    sections.append(bench_weight_codec.run(bench_weight_codec.MODELS))
    sections.append(bench_sparsity.run())
    sections.append(bench_dse.run(points=16))
    # a sweep long enough that the workers' start (imports, the graphs' transfer) is a small
    # part of it: the scaling figure
    sections.append(bench_dse.run(points=64))
    sections.append(bench_scenario.run())
    sections.append(bench_xr.run())
    sections.append(bench_cli.run(CLI_MODELS))
    sections.append(bench_cli_fail_fast.run())
    if _c_engine_available():
        sections.append(bench_c_runtime.run())
    if _vela_available():
        sections.append(bench_tosa_vela.run())
    return sections


def _vela_available() -> bool:
    """Vela is the `bench` extra (`make bench` installs it)."""
    import shutil

    found = shutil.which("vela") or (Path(sys.executable).parent / "vela").exists()
    if not found:
        print("Tessel vs Vela section left out: vela not installed (pip install -e "
              "'.[bench]')", file=sys.stderr)
    return bool(found)


def _c_engine_available() -> bool:
    from tessel.runtime.cengine import available

    reason = available()
    if reason is not None:
        print(f"C runtime section left out: {reason}", file=sys.stderr)
    return reason is None


def quick() -> list[Section]:
    small = ["ds_cnn", "digits_cnn"]
    sections = [bench_sim.micro(tiles=20)]
    sections += bench_models.run(small, ["tnpu-s", "u65-512"], 1)
    sections.append(bench_sim.versus_eager(small, repeats=1))
    sections.append(bench_sim.versus_eager(["ds_cnn"], repeats=1, batch=4))
    sections.append(bench_accuracy.run(["ds_cnn"], calibration=4, samples=4))
    sections.append(bench_precision.run({"ds_cnn": "sqnr=1"}, "tnpu-s"))
    sections.append(bench_weight_codec.run(["digits_cnn"], int4=False,
                                           npu=[("digits_cnn", "tnpu-s")]))
    sections.append(bench_sparsity.run("ds_cnn", ["tnpu-s"], []))
    sections.append(bench_dse.run(points=4, rounds=1, models="ds_cnn", ray=False))
    sections.append(bench_scenario.run(presets=["tnpu-s"]))
    sections.append(bench_cli.run(["ds_cnn"]))
    sections.append(bench_cli_fail_fast.run(runs=1))
    if _c_engine_available():
        sections.append(bench_c_runtime.run(["ds_cnn"], repeats=1))
    if _vela_available():
        sections.append(bench_tosa_vela.run(["ds_cnn"], ["u55-256"], layers=3))
    return sections


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="the page (default docs/benchmarks.md; --quick: "
                         "build/benchmarks-quick.md)")
    ap.add_argument("--quick", action="store_true", help="small models, few repeats")
    args = ap.parse_args(argv)
    out = args.out or report.ROOT / ("build/benchmarks-quick.md" if args.quick
                                     else "docs/benchmarks.md")
    # the graph cache would make a second run's quantisation free: every figure is measured cold
    os.environ["TESSEL_CACHE_DIR"] = "off"
    revision = report.commit()  # before anything is written
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    sections = quick() if args.quick else full()
    text, failed = report.page(sections, revision, started, time.perf_counter() - t0,
                               args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({len(text.splitlines())} lines); targets not met: {failed}",
          file=sys.stderr)
    return 1 if failed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
