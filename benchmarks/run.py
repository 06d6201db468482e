"""`make bench`: every benchmark, as markdown (the figures docs/benchmarks.md reports), the
targets of the open issues included (simulation vs eager, one input and a batch of 64; whole
`tessel compile` vs torch.export; `run --check` vs `run`; CLI start-up; DSE)."""

from __future__ import annotations

import sys

from benchmarks import bench_cli, bench_cli_fail_fast, bench_dse, bench_models, bench_sim

SIM_MODELS = ["resnet18", "mobilenet_v2", "vit_small", "minilm"]


def main() -> int:
    print("## Simulator micro-benchmark (python -m benchmarks.bench_sim)\n", flush=True)
    bench_sim.main()
    # the zoo before anything else compiles a zoo model: its compile times are the first
    # compile of each model in the process (later ones reuse the instruction-cost memos)
    print("\n## Zoo models (python -m benchmarks.bench_models)\n", flush=True)
    sys.argv = sys.argv[:1]
    bench_models.main()
    print(f"\n## Simulation vs eager (python -m benchmarks.bench_sim --models "
          f"{' '.join(SIM_MODELS)})\n", flush=True)
    bench_sim.bench_models(SIM_MODELS)
    print("\n## A batch of 64 (python -m benchmarks.bench_sim --models resnet18 --batch 64)\n",
          flush=True)
    bench_sim.bench_models(["resnet18"], repeats=3, batch=64)
    print("\n## Design-space exploration (python -m benchmarks.bench_dse)\n", flush=True)
    bench_dse.main()
    # a sweep long enough that the workers' start (imports, the graphs' transfer) is not a
    # fifth of a 16-point run on two workers: the scaling figure
    print("\n## Design-space exploration, 64 points (python -m benchmarks.bench_dse --points "
          "64)\n", flush=True)
    sys.argv = [sys.argv[0], "--points", "64"]
    bench_dse.main()
    sys.argv = sys.argv[:1]
    print("\n## CLI: start-up, whole compile, run --check (python -m benchmarks.bench_cli)\n",
          flush=True)
    bench_cli.main()
    print("\n## CLI fail-fast (python -m benchmarks.bench_cli_fail_fast)\n", flush=True)
    bench_cli_fail_fast.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
