"""torch.compile(model, backend="tessel"): each captured graph compiled for the NPU and run on
the simulator. The digits CNN gives exactly tessel.compile(...).run's outputs and int8 accuracy
of float; a graph break gives two Tessel graphs; a host op inside a graph runs on the host;
the backend is declared as a torch_dynamo_backends entry point."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import tessel
from tessel.arch import CompileOptions
from tessel.models import resolve
from tessel.torch_backend import tessel_backend

ROOT = Path(__file__).resolve().parents[3]


def test_entry_point_declared_and_registered():
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = spec["project"]["entry-points"]["torch_dynamo_backends"]["tessel"]
    module, _, attr = target.partition(":")
    import importlib
    assert getattr(importlib.import_module(module), attr) is tessel_backend
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("tessel") is not None


def test_digits_equals_tessel_compile_and_float():
    torch._dynamo.reset()
    spec = resolve("digits_cnn")
    model, x = spec.factory()
    calib = spec.calibration_data(8)
    compiled = torch.compile(model, backend="tessel", options={
        "target": "tnpu-s", "calibration_data": calib, "calibration_samples": 8})
    cm = tessel.compile(model, x, calibration_data=calib,
                        options=CompileOptions(calibration_samples=8))
    _, held_out, labels = _digits_eval(16)
    agree = 0
    for k in range(len(held_out)):
        xi = held_out[k:k + 1]
        got = compiled(xi)
        assert isinstance(got, torch.Tensor)
        assert np.array_equal(got.numpy(), cm.run(xi)[0])
        with torch.no_grad():
            ref = model(xi)
        agree += int(got.argmax() == ref.argmax())
    assert agree >= 15, f"top-1 agreement with float {agree}/16"


@pytest.mark.slow
def test_mobilenet_v2_equals_tessel_compile_and_keeps_top1():
    """MobileNetV2: two held-out images through torch.compile(backend="tessel")
    equal tessel.compile(...).run bit for bit, and int8 keeps float's top-1 on them."""
    torch._dynamo.reset()
    spec = resolve("mobilenet_v2")
    model, x = spec.factory()
    calib = spec.calibration_data(4)
    compiled = torch.compile(model, backend="tessel", options={
        "target": "tnpu-s", "calibration_data": calib, "calibration_samples": 4})
    cm = tessel.compile(model, x, calibration_data=calib,
                        options=CompileOptions(calibration_samples=4))
    held_out = spec.evaluation_data(2) if spec.evaluation_data else [
        (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(k)),)
        for k in (101, 102)]
    for (xi,) in held_out:
        got = compiled(xi)
        assert np.array_equal(got.numpy(), cm.run(xi)[0])
        with torch.no_grad():
            ref = model(xi)
        assert int(got.argmax()) == int(ref.argmax())


def _digits_eval(n):
    from tessel.models.digits import load_split
    _, _, xs, ys = load_split()
    return None, xs[:n], ys[:n]


class BreakAndHost(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(torch.cumsum(y, dim=-1))  # cumsum: no NPU lowering -> host


def test_graph_break_and_host_op():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = BreakAndHost().eval()
    x = torch.randn(1, 3, 8, 8)
    seen = []

    def spy(gm, example_inputs, **kw):
        fn = tessel_backend(gm, example_inputs, **kw)
        seen.append(fn)
        return fn

    calib = [(torch.randn(1, 3, 8, 8),) for _ in range(4)] + [(x,)]
    compiled = torch.compile(model, backend=spy, options={"calibration_data": calib})
    with pytest.warns(UserWarning, match="first call only"):
        got = compiled(x)
    assert len(seen) == 2  # one Tessel graph per side of the break
    second = seen[1].compiled_model
    assert "aten.cumsum.default" in str(second.program.metadata["host_ops"])
    with torch.no_grad():
        ref = model(x)
    err = (got - ref).abs().max() / ref.abs().max()
    assert err < 0.1, f"relative error {err:.3f}"
