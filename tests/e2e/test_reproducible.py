"""The same model in two clones at different paths compiles to byte-identical binaries, and
`run --check` works from any directory (the model is found by name and content hash; without
it, against the references and example inputs the binary stores)."""

from __future__ import annotations

import json

import numpy as np

from tessel.cli import main

MODEL = '''import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)
    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc(torch.flatten(y, 1))
def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(1, 1, 8, 8),)
'''


def test_two_clones_give_identical_binaries(tmp_path, monkeypatch, capsys):
    one, two = tmp_path / "clone1", tmp_path / "deep" / "clone2"
    for d in (one, two):
        (d / "models").mkdir(parents=True)
        (d / "models" / "net.py").write_text(MODEL)
    monkeypatch.chdir(one)  # relative spec from inside clone 1
    assert main(["compile", "models/net.py:make", "-o", "net.tsl", "--calibration", "2"]) == 0
    monkeypatch.chdir(tmp_path)  # absolute spec from elsewhere for clone 2
    assert main(["compile", f"{two}/models/net.py:make", "-o", str(two / "models" / "net.tsl"),
                 "--calibration", "2"]) == 0
    first, second = (one / "net.tsl").read_bytes(), (two / "models" / "net.tsl").read_bytes()
    assert first == second
    assert str(tmp_path).encode() not in first
    capsys.readouterr()

    monkeypatch.chdir(one.parent)  # the binary lies next to the model: found from anywhere
    assert main(["run", str(two / "models" / "net.tsl"), "--check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["bit_exact"] is True

    # the model is not next to it: checked against the references the binary stores
    assert main(["run", str(one / "net.tsl"), "--check"]) == 0
    out = capsys.readouterr().out
    assert "simulator vs golden model: bit-exact" in out
    note = [x for x in out.splitlines() if x.startswith("note:")]
    assert len(note) == 1 and "net.py:make" in note[0] and "needs --model" in note[0]
    np.save(one / "x.npy", np.random.default_rng(0).random((1, 1, 8, 8), np.float32))
    assert main(["run", str(one / "net.tsl"), "--input", str(one / "x.npy"), "--check"]) == 1
    err = capsys.readouterr().err  # other inputs: the golden model must be rebuilt
    assert "pass --model" in err and "net.py:make" in err
    assert main(["run", str(one / "net.tsl"), "--check", "--json",
                 "--model", f"{one}/models/net.py:make"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["bit_exact"] is True

    (one / "models" / "net.py").write_text(MODEL.replace("seed(0)", "seed(1)"))
    assert main(["run", str(one / "net.tsl"), "--check",
                 "--model", f"{one}/models/net.py:make"]) == 1
    assert "content differs" in capsys.readouterr().err
