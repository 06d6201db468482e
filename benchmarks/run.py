"""`make bench`: every benchmark, as markdown (the figures docs/benchmarks.md reports)."""

from __future__ import annotations

import sys

from benchmarks import bench_cli_fail_fast, bench_dse, bench_models, bench_sim


def main() -> int:
    print("## Simulator micro-benchmark (python -m benchmarks.bench_sim)\n", flush=True)
    bench_sim.main()
    print("\n## Zoo models (python -m benchmarks.bench_models)\n", flush=True)
    sys.argv = sys.argv[:1]
    bench_models.main()
    print("\n## Design-space exploration (python -m benchmarks.bench_dse)\n", flush=True)
    bench_dse.main()
    print("\n## CLI fail-fast (python -m benchmarks.bench_cli_fail_fast)\n", flush=True)
    bench_cli_fail_fast.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
