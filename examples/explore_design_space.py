"""Explore NPU design points around a preset: the Pareto front of latency, energy per
inference and area (the compiler in the loop on every point).

    python examples/explore_design_space.py [MODEL] [--out explore-out]

The command line: `tessel explore MODEL --space space.toml`; `tessel advise MODEL` says which
single parameter to change first.
"""

from __future__ import annotations

import argparse

import tessel


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="ds_cnn")
    ap.add_argument("--out", default="explore-out")
    args = ap.parse_args(argv)

    space = {"matrix": {"rows": [8, 16, 32]}}  # or a space.toml (docs/analysis.md)
    result = tessel.explore([args.model], space, target="tnpu-s", out=args.out, workers=0,
                            calibration_samples=8)
    print(result.summary())
    print(result.front_table().text(100))


if __name__ == "__main__":
    main()
