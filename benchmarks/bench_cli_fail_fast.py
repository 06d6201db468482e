"""How fast the CLI refuses an unwritable destination (the goal: under a second, one line on
stderr): wall time of `tessel compile mobilenet_v2 -o /nonexistent/x.tsl` in a fresh process
(interpreter start, argument parsing, the destination check; no import of torch), median of N
runs.

Run: ``python -m benchmarks.bench_cli_fail_fast [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from benchmarks.report import Section

ARGV = ["compile", "mobilenet_v2", "-o", "/nonexistent/x.tsl"]
SCRIPT = "import sys\nfrom tessel.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def run(runs: int = 5) -> Section:
    """The table (figure ``fail_fast_wall``, the median); asserts that the refusal is exit
    status 1 and one line on stderr."""
    times, lines = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", SCRIPT, *ARGV], capture_output=True,
                              text=True)
        times.append(time.perf_counter() - t0)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    table = ("| command | exit | stderr lines | median s | max s |\n|---|---|---|---|---|\n"
             f"| tessel {' '.join(ARGV)} | 1 | {len(lines)} | {statistics.median(times):.2f} | "
             f"{max(times):.2f} |")
    command = "python -m benchmarks.bench_cli_fail_fast" + (f" --runs {runs}" if runs != 5 else "")
    return Section("Command line: refusing an unwritable destination", command,
                   f"Wall seconds, {runs} fresh process(es).\n\n" + table,
                   {"fail_fast_wall": statistics.median(times)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    print(run(ap.parse_args().runs).markdown)


if __name__ == "__main__":
    main()
