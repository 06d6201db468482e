"""How fast the CLI refuses an unwritable destination (issue 14: "< 1 s, one line"): wall time
of `tessel compile mobilenet_v2 -o /nonexistent/x.tsl` in a fresh process (interpreter start,
argument parsing, the destination check; no import of torch), median of N runs.

Run: ``python -m benchmarks.bench_cli_fail_fast [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ARGV = ["compile", "mobilenet_v2", "-o", "/nonexistent/x.tsl"]
SCRIPT = "import sys\nfrom tessel.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    times, lines = [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", SCRIPT, *ARGV], capture_output=True,
                              text=True)
        times.append(time.perf_counter() - t0)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    print("| command | exit | stderr lines | median s | max s |\n|---|---|---|---|---|")
    print(f"| tessel {' '.join(ARGV)} | 1 | {len(lines)} | {statistics.median(times):.2f} | "
          f"{max(times):.2f} |")


if __name__ == "__main__":
    main()
