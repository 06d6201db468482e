"""The long fuzz run (``make fuzz``): N cases per harness, reporting non-Tessel exceptions,
hangs (a case running longer than --hang-seconds) and the process's peak RSS.

    PYTHONPATH=src python tests/fuzz/run_fuzz.py --cases 100000            # all harnesses
    PYTHONPATH=src python tests/fuzz/run_fuzz.py --harness ir --cases 5000 --seed 7

Each finding's input is saved under tests/fuzz/regressions/<harness>/ (one file per distinct
exception site), where tests/fuzz/test_fuzz_regressions.py replays it forever after. Exit code
1 if any finding or hang, else 0.
"""

from __future__ import annotations

import argparse
import random
import resource
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import HARNESSES, case_input, save_input  # noqa: E402


class Hang(BaseException):
    """Raised by the alarm: not an Exception, so no harness code can swallow it."""


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def _site(exc: BaseException) -> str:
    """file:line of the innermost Tessel frame of the traceback (the crash site)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/tessel/" in f.filename]
    where = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}@{Path(where.filename).name}:{where.lineno}"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_harness(name: str, cases: int, seed: int, hang_s: float, budget_s: float,
                save: bool, first: int = 0, report_every: int = 0) -> dict:
    """Cases first .. first + cases - 1 of `seed` (each case's input depends only on seed and
    case number, so shards of one range run in separate processes add up to the whole run)."""
    harness = HARNESSES[name]
    outcomes: Counter[str] = Counter()
    findings: dict[str, str] = {}
    hangs, slowest, done = 0, 0.0, 0
    start = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case in range(first, first + cases):
            if time.perf_counter() - start > budget_s:
                break
            if report_every and done and done % report_every == 0:
                found = sum(v for k, v in outcomes.items() if k.startswith("FINDING"))
                print(f"  {name}: {done} cases (up to case {case - 1}) in "
                      f"{time.perf_counter() - start:.0f} s, {found} non-Tessel exceptions, "
                      f"{hangs} hangs, peak RSS {peak_rss_mib():.0f} MiB", flush=True)
            rng = random.Random(seed * 1_000_003 + case)
            value = case_input(harness, rng)
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, hang_s)
            try:
                outcomes[harness.run(value)] += 1
            except Hang:
                hangs += 1
                outcomes["HANG"] += 1
                if save:
                    save_input(harness, value, f"hang_seed{seed}_case{case}")
            except Exception as exc:  # noqa: BLE001 - a finding, reported below
                site = _site(exc)
                outcomes["FINDING " + site] += 1
                if site not in findings:
                    findings[site] = f"case {case}: {type(exc).__name__}: {str(exc)[:200]}"
                    if save:
                        label = site.replace("@", "_").replace(":", "_").replace(".py", "")
                        save_input(harness, value, label)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                slowest = max(slowest, time.perf_counter() - t0)
            done += 1
    finally:
        signal.signal(signal.SIGALRM, old)
    return {"harness": name, "cases": done, "seconds": time.perf_counter() - start,
            "findings": findings, "finding_cases": sum(v for k, v in outcomes.items()
                                                       if k.startswith("FINDING")),
            "hangs": hangs, "slowest_s": slowest, "peak_rss_mib": peak_rss_mib(),
            "outcomes": outcomes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", choices=sorted(HARNESSES), action="append")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first-case", type=int, default=0,
                        help="run cases FIRST .. FIRST + CASES - 1 (to shard one run)")
    parser.add_argument("--report-every", type=int, default=0, metavar="N",
                        help="print a progress line every N cases")
    parser.add_argument("--hang-seconds", type=float, default=5.0)
    parser.add_argument("--budget-seconds", type=float, default=float("inf"),
                        help="stop a harness after this long (the report says how many ran)")
    parser.add_argument("--no-save", action="store_true", help="do not write regression files")
    args = parser.parse_args(argv)
    bad = 0
    for name in args.harness or ["ir", "asm", "tsl", "onnx", "tflite", "tosa", "pt2"]:
        r = run_harness(name, args.cases, args.seed, args.hang_seconds, args.budget_seconds,
                        not args.no_save, args.first_case, args.report_every)
        print(f"{name}: {r['cases']} cases from case {args.first_case} in {r['seconds']:.0f} s, "
              f"{r['finding_cases']} non-Tessel exceptions at {len(r['findings'])} sites, "
              f"{r['hangs']} hangs (> {args.hang_seconds} s), slowest case {r['slowest_s']:.2f} s, "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
        top = sorted(r["outcomes"].items(), key=lambda kv: -kv[1])[:8]
        print("  outcomes: " + ", ".join(f"{k} {v}" for k, v in top), flush=True)
        for site, first in r["findings"].items():
            print(f"  FINDING {site}: {first}", flush=True)
        bad += r["finding_cases"] + r["hangs"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
