"""Whole int8 TFLite models (tflite_models.py: ResNet-18-, MobileNetV2- and DS-CNN-style) give
LiteRT's reference kernels' outputs bit for bit on random int8 inputs, and the compiled binary
on the simulator equals the golden model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_tflite_import import _inputs, litert
from tflite_models import MODELS

from tessel.arch import load_target
from tessel.driver import compile_graph
from tessel.frontend.ir_module import QDQModule
from tessel.frontend.tflite_import import import_tflite
from tessel.quant.api import quantize

INPUTS = 8


@pytest.mark.parametrize("name", list(MODELS))
def test_whole_model_equals_litert(name):
    net = MODELS[name](seed=7)
    model = net.build()
    xs = _inputs(net, 0)
    qm = quantize(QDQModule(import_tflite(model)), tuple(torch.from_numpy(x) for x in xs))
    cm = compile_graph(qm.graph, load_target("tnpu-s"))
    levels, equal = 0, 0
    for seed in range(INPUTS):
        xs = _inputs(net, 1000 + seed)
        refs, goldens, sims = litert(model, xs), qm.run(*xs), cm.run(*xs)
        for s, g in zip(sims, goldens, strict=True):
            np.testing.assert_array_equal(s, g)
        levels = max(levels, len(np.unique(refs[0])))
        same = [float(np.mean(g == r)) for g, r in zip(goldens, refs, strict=True)]
        equal += all(x == 1.0 for x in same)
        print(f"{name} input {seed}: fraction of outputs equal to LiteRT's {same}")
    assert levels > 3, f"degenerate first output ({levels} levels)"
    assert equal == INPUTS, f"{name}: {equal} of {INPUTS} inputs give LiteRT's outputs exactly"
