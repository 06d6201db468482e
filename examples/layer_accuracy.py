"""Where does quantisation lose precision? The SQNR of every quantised activation against the
float one, layer by layer, and the worst layers.

    python examples/layer_accuracy.py [MODEL]

For the whole model's accuracy on held-out data: `tessel accuracy MODEL`.
"""

from __future__ import annotations

import argparse

import tessel
from tessel.models import resolve


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="ds_cnn")
    args = ap.parse_args(argv)

    spec = resolve(args.model)
    model, inputs = spec.factory()
    qm = tessel.quantize(model, inputs, calibration_data=spec.calibration_data(8))
    report = tessel.layer_accuracy(qm, inputs)
    print(report.table().text(100))
    print("lowest SQNR:", ", ".join(f"{x.layer} {x.sqnr_db:.1f} dB" for x in report.worst(3)))


if __name__ == "__main__":
    main()
