"""Quantised zoo models, built once per test process (xdist groups keep a model on one worker)."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from tessel.models import resolve
from tessel.quant.api import QuantizedModel, quantize
from tessel.quant.config import default_config

CALIBRATION = 4


@cache
def quantized(name: str) -> tuple[QuantizedModel, tuple[np.ndarray, ...], np.ndarray]:
    """(quantised model, example inputs as numpy, float torch output)."""
    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(CALIBRATION),
                  quant_config=default_config(name), calibration_samples=CALIBRATION)
    with torch.no_grad():
        ref = model(*example)
    return qm, tuple(x.numpy() for x in example), ref.numpy()


@cache
def golden(name: str) -> tuple[np.ndarray, ...]:
    qm, inputs, _ = quantized(name)
    return tuple(qm.run(*inputs))
