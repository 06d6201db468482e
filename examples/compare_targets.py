"""Compare NPU targets side by side for one or more models: latency, energy, area at each
target's process node, MAC utilisation, off-chip traffic, and the layers whose bound changes.

    python examples/compare_targets.py [MODEL ...] [--targets A,B,...] [--html compare.html]

The command line: `tessel compare resnet18 mobilenet_v2 --targets tnpu-s,tnpu-m,u55-256`.
"""

from __future__ import annotations

import argparse

import tessel
from tessel.analysis.compare_html import write_compare_html
from tessel.arch import load_target
from tessel.models import resolve


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["ds_cnn"])
    ap.add_argument("--targets", default="tnpu-s,tnpu-m,u55-256")
    ap.add_argument("--html", default="compare.html")
    args = ap.parse_args(argv)

    graphs = {}
    for name in args.models:
        spec = resolve(name)
        model, inputs = spec.factory()
        graphs[spec.name] = tessel.quantize(model, inputs,
                                            calibration_data=spec.calibration_data(8)).graph
    comparison = tessel.compare_targets(graphs, [load_target(t) for t in
                                                 args.targets.split(",")])
    print(comparison.text(100))
    print(f"wrote {write_compare_html(comparison, args.html)}")


if __name__ == "__main__":
    main()
