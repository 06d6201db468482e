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


XS_SPARSE = {"sparse.enabled": True, "wdecoder.enabled": True}  # tnpu-xs's params for it


@cache
def resnet18_2_4_int4() -> tuple[QuantizedModel, object, tuple[np.ndarray, ...], int]:
    """ResNet-18 pruned 2:4 with int4 weights (2 calibration samples), compiled for tnpu-xs
    with 2:4 sparsity and the weight decoder: (quantised model, compiled model, example inputs
    as numpy, number of layers pruned). The weight-stream and C-runtime tests share it (one
    xdist group)."""
    from dataclasses import replace

    import tessel
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.quant.config import WeightDtype

    spec = resolve("resnet18")
    model, example = spec.factory()
    pruned, report = tessel.prune_2_4(model)
    qm = quantize(pruned, example, calibration_data=spec.calibration_data(2),
                  quant_config=replace(default_config("resnet18"), weights=WeightDtype.INT4),
                  calibration_samples=2)
    cm = compile_graph(qm.graph, load_preset("tnpu-xs").with_params(XS_SPARSE), name="resnet18")
    return qm, cm, tuple(x.numpy() for x in example), len(report.pruned)
