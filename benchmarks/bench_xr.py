"""The XR scenario's power (docs/figures.md, issue's "done means"): the shipped `xr_glasses`
scenario on tnpu-s at its nominal point, with each DVFS policy (race to idle, slowest point
meeting every deadline), and the design `tessel explore --scenario` finds within tnpu-s's area
(parameters and operating point), confirmed by running the scenario again from its preset
file, simulating every model's first frame and re-simulating the timeline with the simulated
cycles.

Run: ``python -m benchmarks.bench_xr [--out DIR]`` (the space: examples/xr_explore_space.toml).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.report import Section
from tessel.analysis.explore_space import load_space
from tessel.arch import load_preset
from tessel.arch.dvfs import DvfsPolicy
from tessel.codesign.dvfs import run_dvfs
from tessel.codesign.explore import explore_scenario
from tessel.scenario import load_scenario
from tessel.scenario.run import run_scenario

SPACE = Path(__file__).resolve().parents[1] / "examples" / "xr_explore_space.toml"
COMMAND = "python -m benchmarks.bench_xr"


def run(out: Path | None = None) -> Section:
    scenario, arch = load_scenario("xr_glasses"), load_preset("tnpu-s")
    rows = ["| configuration | operating point | average power mW | deadline misses | NPU busy % |",
            "|---|---|---:|---:|---:|"]
    nominal = run_scenario(scenario, arch)
    rows.append(f"| tnpu-s, nominal point, no idle gating | nominal | {nominal.power_mw:.3f} | "
                f"{nominal.misses} | {100 * nominal.busy:.2f} |")
    figures = {"xr_power_mw/nominal": nominal.power_mw}
    for policy in DvfsPolicy:
        d = run_dvfs(scenario, arch, policy)
        rows.append(f"| tnpu-s, DVFS {policy.value} | {d.choice.point.name} | "
                    f"{d.report.power_mw:.3f} | {d.report.misses} | "
                    f"{100 * d.report.busy:.2f} |")
        figures[f"xr_power_mw/{policy.value}"] = d.report.power_mw
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        res = explore_scenario(scenario, load_space(SPACE), arch, out or Path(tmp))
    seconds = time.perf_counter() - t0
    lines = ["\n".join(rows), ""]
    if res.best is None:
        lines.append(f"`tessel explore --scenario xr_glasses --space {SPACE.name}`: no design of "
                     f"the {len(res.runs)} meets every deadline within the area limit.")
    else:
        b, c = res.best, res.confirmation
        saving = 1 - b.power_mw / res.base_power_mw
        confirmed = c is not None and c.confirmed
        # (an unconfirmed design saves nothing the target may count)
        figures.update({"xr_explore_saving": saving if confirmed else 0.0,
                        "xr_explore_area_mm2": b.area_mm2})
        lines += [
            f"`tessel explore --scenario xr_glasses --space examples/{SPACE.name}` "
            f"({len(res.runs)} designs, {seconds:.0f} s): the best is `{b.name}`, "
            f"{b.power_mw:.3f} mW against tnpu-s's {res.base_power_mw:.3f} mW at its nominal "
            f"point ({100 * saving:.1f} % lower), {b.area_mm2:.4f} mm2 against "
            f"{res.base_area_mm2:.4f}, no deadline miss.", "",
            res.summary().splitlines()[-1].replace(str(c.preset), c.preset.name)
            if c is not None else "not confirmed"]
    return Section("XR scenario: operating points and co-design", COMMAND,
                   "\n".join(lines) + "\n", figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="keep the best design's preset file here")
    section = run(ap.parse_args().out)
    print(section.markdown)


if __name__ == "__main__":
    main()
