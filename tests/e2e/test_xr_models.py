"""The XR zoo models (tessel.models.xr) compile for tnpu-s with every op on the NPU, and the
simulator equals the golden model bit for bit on their example and a held-out input."""

from __future__ import annotations

import numpy as np
import pytest

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.models import resolve, xr
from tessel.quant.api import quantize


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(f"xr-{n}"))
                                  for n in xr.NAMES])
def test_xr_model_runs_on_the_npu_bit_exact(name):
    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, spec.calibration_data(4), calibration_samples=4)
    cm = compile_graph(qm.graph, load_preset("tnpu-s"), name=name)
    assert not cm.profile.host_ops, cm.profile.host_ops
    for sample in (example, xr.inputs(name, 99)):
        arrays = [x.numpy() for x in sample]
        for got, want in zip(cm.run(*arrays), qm.run(*arrays), strict=True):
            np.testing.assert_array_equal(got, want)
    assert cm.profile.cycles > 0
