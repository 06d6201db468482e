"""Every way a user holds a model: nn.Module, torch.export.ExportedProgram, its GraphModule
(`ep.module()`, whose .eval() raises), a program saved with torch.export.save; training-mode
models refused in each form; example inputs and calibration data from files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tessel
from tessel.errors import TesselConfigError, TesselError
from tessel.frontend import import_model
from tessel.frontend.model_input import example_inputs_of, inputs_from_signature
from tessel.models.data_files import read_calibration, read_inputs


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.fc(y.mean((2, 3)))


X = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
CALIB = [(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(i)),) for i in range(4)]


def _net() -> nn.Module:
    torch.manual_seed(0)
    return Net().eval()


def test_exported_program_and_its_module_compile_like_the_module(tmp_path):
    model = _net()
    want = tessel.compile(model, (X,), calibration_data=CALIB).run(X)[0]
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (X,)), path)
    ep = torch.export.load(path)
    with pytest.raises(NotImplementedError):
        ep.module().eval()  # what tessel must never call
    for given in (ep, ep.module()):
        cm = tessel.compile(given, (X,), calibration_data=CALIB)
        assert np.array_equal(cm.run(X)[0], want)
    qm = tessel.quantize(ep, calibration_data=CALIB)  # example inputs from the program
    assert np.array_equal(qm.run(X)[0], want)
    assert import_model(ep, (X,)).nodes  # the float import takes it too


def test_training_mode_is_refused_in_every_form():
    model = _net().train()
    with pytest.raises(TesselError, match=r"training mode.*model\.eval\(\)"):
        tessel.quantize(model, (X,))
    ep = torch.export.export(model, (X,))
    for given in (ep, ep.module()):
        with pytest.raises(TesselError, match=r"exported in training mode.*batch_norm"):
            tessel.compile(given, (X,))
    with pytest.raises(TesselConfigError, match="expected a torch.nn.Module"):
        tessel.quantize(lambda x: x, (X,))


def test_example_inputs_of_a_program_without_stored_examples():
    ep = torch.export.export(_net(), (X,))
    assert example_inputs_of(ep, None)[0] is ep.example_inputs[0][0]
    stand_in = inputs_from_signature(ep)
    assert stand_in[0].shape == X.shape and stand_in[0].dtype == X.dtype
    assert torch.equal(stand_in[0], inputs_from_signature(ep)[0])  # deterministic
    with pytest.raises(TesselConfigError, match="example_inputs are needed"):
        example_inputs_of(_net(), None)


def test_inputs_and_calibration_files(tmp_path):
    like = (X,)
    np.savez(tmp_path / "x.npz", x=X.numpy().astype(np.float64))
    got = read_inputs(tmp_path / "x.npz", like)
    assert got[0].dtype == torch.float32 and torch.allclose(got[0], X)
    np.savez(tmp_path / "c.npz", *[c[0].numpy() for c in CALIB])
    assert len(read_calibration(tmp_path / "c.npz", like)) == 4
    d = tmp_path / "calib"
    d.mkdir()
    for i, c in enumerate(CALIB[:3]):
        np.save(d / f"{i:03d}.npy", c[0].numpy())
    samples = read_calibration(d, like)
    assert [torch.equal(s[0], c[0]) for s, c in zip(samples, CALIB, strict=False)] == [True] * 3
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(TesselConfigError, match=r"bad\.npy: shape \(1, 3, 4, 4\)"):
        read_inputs(tmp_path / "bad.npy", like)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(TesselConfigError, match="junk.npz"):
        read_calibration(tmp_path / "junk.npz", like)
    with pytest.raises(TesselConfigError, match="single-input"):
        read_calibration(tmp_path / "c.npz", (X, X))
