"""Compile a model, simulate it, check the simulator against the integer golden model (bit for
bit) and the float model (SQNR), save the binary.

    python examples/compile_and_check.py [MODEL] [--target TARGET] [-o FILE.tsl]

MODEL: a zoo name (default ds_cnn) or path/to/file.py:factory. The command line does the same:
`tessel compile MODEL -o m.tsl && tessel run m.tsl --check`.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import tessel
from tessel.analysis.accuracy import sqnr_db
from tessel.models import resolve


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="ds_cnn")
    ap.add_argument("--target", default="tnpu-s")
    ap.add_argument("-o", "--output", default="model.tsl")
    args = ap.parse_args(argv)

    spec = resolve(args.model)
    model, inputs = spec.factory()
    calibration = spec.calibration_data(8)  # the same samples for both calls below
    cm = tessel.compile(model, inputs, target=args.target, calibration_data=calibration)
    qm = tessel.quantize(model, inputs, calibration_data=calibration)
    simulated = cm.run(*inputs)
    golden = qm.run(*inputs)
    with torch.no_grad():
        reference = model(*inputs)
    reference = [reference] if isinstance(reference, torch.Tensor) else list(reference)
    for name, s, g, f in zip(cm.output_names, simulated, golden, reference, strict=True):
        exact = np.array_equal(s, g)
        print(f"{name}: bit-exact {exact}, SQNR vs float {sqnr_db(f.numpy(), s):.1f} dB")
    cm.save(args.output)
    print(f"wrote {args.output}: {cm.profile.cycles:,} cycles on {args.target}")


if __name__ == "__main__":
    main()
