"""On-chip residency probe: per zoo model and preset, cycles, roofline efficiency and DRAM
bytes written / read with `CompileOptions.on_chip_residency` off and on, and whether the
outputs are identical (off is bit-exact vs the golden model, tests/e2e/test_zoo_e2e.py).

    PYTHONPATH=src python -m benchmarks.bench_residency ds_cnn --presets tnpu-s,u65-512

`--why` also prints, per model and preset, the planner's spilled tensors with the reason and
the partly resident ones with their bytes on chip.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.bench_models import CALIBRATION, MODELS, roofline_bound
from tessel.arch import CompileOptions, load_preset
from tessel.driver import compile_graph
from tessel.models import resolve
from tessel.quant.api import quantize
from tessel.quant.config import default_config
from tessel.schedule import plan as schedule_plan


def _outputs(out) -> list[np.ndarray]:
    return [np.asarray(v) for v in (out if isinstance(out, (list, tuple)) else [out])]


class _Plans:
    """Records the residency plans of the compilations it wraps (for `--why`)."""

    def __init__(self):
        self.plans: list = []
        self._plan = schedule_plan.plan_step_residents

    def __enter__(self):
        def wrapped(*args, **kwargs):
            per_step, plan = self._plan(*args, **kwargs)
            self.plans.append(plan)
            return per_step, plan
        schedule_plan.plan_step_residents = wrapped
        return self

    def __exit__(self, *exc):
        schedule_plan.plan_step_residents = self._plan


def _why(plans: list) -> None:
    for plan in plans:
        for tensor, bytes_on_chip in sorted(plan.part.items()):
            print(f"    partly resident: {tensor}: {bytes_on_chip} bytes on chip")
        for tensor, reason in sorted(plan.spilled.items()):
            print(f"    spilled: {tensor}: {reason}")


def probe(name: str, presets: list[str], why: bool = False) -> None:
    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(CALIBRATION),
                  quant_config=default_config(name), calibration_samples=CALIBRATION)
    x = [t.numpy() for t in example]
    for p in presets:
        arch = load_preset(p)
        row, outs = [], []
        for on in (False, True):
            try:
                with _Plans() as rec:
                    cm = compile_graph(qm.graph, arch, name=name,
                                       options=CompileOptions(on_chip_residency=on))
            except Exception as exc:  # noqa: BLE001 - a table cell, e.g. does not fit
                row = [f"{type(exc).__name__}"]
                break
            outs.append(_outputs(cm.run(*x)))
            prof = cm.profile
            bound = roofline_bound(qm.graph, cm, arch)
            row += [f"{prof.cycles:,}", f"{bound / prof.cycles:.3f}",
                    f"{sum(prof.bytes_written.values()) / 1e6:.3f}"]
        same = len(outs) == 2 and all(np.array_equal(a, b) for a, b in zip(*outs, strict=True))
        print(f"| {name} | {p} | " + " | ".join(row) + f" | {'yes' if same else 'NO'} |",
              flush=True)
        if why:
            _why(rec.plans)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--presets", default="tnpu-s,u65-512,u55-256")
    ap.add_argument("--why", action="store_true", help="print why tensors stay in DRAM")
    args = ap.parse_args()
    print("| model | preset | cycles off | eff. off | DRAM MB wr off | cycles on | eff. on | "
          "DRAM MB wr on | same outputs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        probe(name, args.presets.split(","), args.why)


if __name__ == "__main__":
    main()
