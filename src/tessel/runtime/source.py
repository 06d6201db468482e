"""Rebuild what a binary was compiled from: its metadata names the model (a zoo name, or a
file.py:factory relative to the model's folder with the file's sha256) and the calibration
count, and quantisation is deterministic. A model file is looked for next to the binary and in
the working directory (or given explicitly), and must have the recorded content."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tessel.errors import TesselError


def recorded_model(source: dict[str, Any] | None, why: str, binary: str | Path | None = None,
                   override: str | None = None) -> str:
    """The model spec (zoo name or path.py:factory) that rebuilds a binary's model."""
    from tessel.models.digest import find_recorded

    if not source or not isinstance(source, dict):
        raise TesselError(f"{why} needs the model: this binary's metadata has no 'source'")
    search = ([Path(binary).resolve().parent] if binary is not None else []) + [Path.cwd()]
    return find_recorded(source, search, override)


def requantize_source(source: dict[str, Any] | None, why: str, binary: str | Path | None = None,
                      override: str | None = None) -> tuple[Any, Any, Any]:
    """(float model, example inputs, QuantizedModel) of a binary's `metadata.source`."""
    from tessel.frontend.cut import recut
    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    spec = resolve(recorded_model(source, why, binary, override))
    model, example = spec.factory()
    model = recut(model, source)
    n = source["calibration"]
    qm = quantize(model, example, calibration_data=spec.calibration_data(n),
                  quant_config=default_config(spec.name, source), calibration_samples=n)
    return model, example, qm
