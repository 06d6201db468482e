"""The Python flows docs/python.md and the README show, run on a tiny model: the README's
golden model and binary calibrated on the same samples are bit-exact; a bring-your-own pt2e
flow (own calibration loop) and QAT (a few training steps) compile to binaries that equal
their golden models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessel
from tessel.arch import load_preset
from tessel.driver import compile_graph


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = Tiny().eval()
    calib = [(torch.randn(1, 3, 8, 8),) for _ in range(4)]
    return model, calib[0], calib


@pytest.mark.slow
def test_readme_flow_golden_equals_binary(setup):
    model, inputs, calib = setup
    cm = tessel.compile(model, inputs, target="tnpu-s", calibration_data=calib)
    qm = tessel.quantize(model, inputs, calibration_data=calib)
    x = inputs[0].numpy()
    assert np.array_equal(cm.run(x)[0], qm.run(x)[0])
    # the README's run_batch line: 8 copies at once equal the single run, bit for bit
    many, = cm.run_batch(*[x[None].repeat(8, *[1] * x.dim()) for x in inputs])
    assert many.shape[0] == 8 and all(np.array_equal(m, cm.run(x)[0]) for m in many)


@pytest.mark.slow
def test_bring_your_own_pt2e(setup):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from tessel.quant.api import from_pt2e
    from tessel.quant.config import QuantConfig
    from tessel.quant.pt2e import export_for_quant
    from tessel.quant.quantizer import TesselQuantizer

    model, inputs, calib = setup
    config = QuantConfig()
    prepared = prepare_pt2e(export_for_quant(model, inputs), TesselQuantizer(config))
    with torch.no_grad():  # your own calibration loop; here in the batches tessel.quantize
        prepared(*calib[0])  # runs (docs/frontend.md: the first sample alone, then batches of
        prepared(torch.cat([s[0] for s in calib]))  # 8 starting with it), so they must agree
    qm = from_pt2e(convert_pt2e(prepared), inputs, config, calibration_samples=len(calib))
    cm = compile_graph(qm.graph, load_preset("tnpu-s"))
    x = inputs[0].numpy()
    assert np.array_equal(cm.run(x)[0], qm.run(x)[0])
    # the README's run_batch line: 8 copies at once equal the single run, bit for bit
    many, = cm.run_batch(*[x[None].repeat(8, *[1] * x.dim()) for x in inputs])
    assert many.shape[0] == 8 and all(np.array_equal(m, cm.run(x)[0]) for m in many)
    ref = tessel.quantize(model, inputs, calibration_data=calib)  # the same flow, built in
    assert ref.calibration_samples == len(calib)
    assert np.array_equal(ref.run(x)[0], qm.run(x)[0])


@pytest.mark.slow
def test_qat(setup):
    from tessel.quant.api import prepare_quantize_qat, quantize_qat

    model, inputs, calib = setup
    torch.manual_seed(1)
    prepared = prepare_quantize_qat(Tiny(), inputs)
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-2)
    for (x,) in calib:  # a few steps of training with the fake-quant graph
        loss = torch.nn.functional.cross_entropy(prepared(x), torch.tensor([3]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    qm = quantize_qat(prepared, inputs, name="tiny_qat")
    cm = compile_graph(qm.graph, load_preset("tnpu-s"))
    x = inputs[0].numpy()
    assert np.array_equal(cm.run(x)[0], qm.run(x)[0])
    # the README's run_batch line: 8 copies at once equal the single run, bit for bit
    many, = cm.run_batch(*[x[None].repeat(8, *[1] * x.dim()) for x in inputs])
    assert many.shape[0] == 8 and all(np.array_equal(m, cm.run(x)[0]) for m in many)
