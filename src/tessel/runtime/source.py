"""Rebuild what a binary was compiled from: its metadata names the model (zoo name or
file.py:factory) and the calibration count, and quantisation is deterministic."""

from __future__ import annotations

from typing import Any

from tessel.errors import TesselError


def requantize_source(source: dict[str, Any] | None, why: str) -> tuple[Any, Any, Any]:
    """(float model, example inputs, QuantizedModel) of a binary's `metadata.source`."""
    from tessel.models import resolve
    from tessel.quant.accuracy import default_config
    from tessel.quant.api import quantize

    if not source:
        raise TesselError(f"{why} needs the model: this binary's metadata has no 'source'")
    spec = resolve(source["model"])
    model, example = spec.factory()
    n = source["calibration"]
    qm = quantize(model, example, calibration_data=spec.calibration_data(n),
                  config=default_config(spec.name), calibration_samples=n)
    return model, example, qm
