"""Recurrent keyword spotters in the zoo's style (MFCC frames -> recurrent layer -> linear
classifier; seeded random weights): GRU and LSTM layers (uni- and bidirectional) and cells run
on the NPU as their unrolled time steps (linear layers with resident weights, LUT gates,
element-wise products), calibrated on several samples (batched calibration never hands a
recurrent kernel a batch), bit-exact with the golden model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tessel

FRAMES, COEFFS, HIDDEN, CLASSES = 5, 10, 16, 12


class RecurrentKWS(nn.Module):
    """MFCC [1, frames, 10] -> GRU / LSTM layer -> the last step's state -> 12 logits."""

    def __init__(self, kind: str, bidirectional: bool = False):
        super().__init__()
        rnn = nn.GRU if kind == "gru" else nn.LSTM
        self.rnn = rnn(COEFFS, HIDDEN, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(HIDDEN * (2 if bidirectional else 1), CLASSES)

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:
        seq, _ = self.rnn(mfcc)
        return self.fc(seq[:, -1])


class CellKWS(nn.Module):
    """The same with a GRUCell / LSTMCell stepped in Python (a batch-1 state burnt in)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.cell = nn.GRUCell(COEFFS, HIDDEN) if kind == "gru" else nn.LSTMCell(COEFFS, HIDDEN)
        self.fc = nn.Linear(HIDDEN, CLASSES)

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:
        h = c = torch.zeros(1, HIDDEN)
        for t in range(mfcc.shape[1]):
            if self.kind == "gru":
                h = self.cell(mfcc[:, t], h)
            else:
                h, c = self.cell(mfcc[:, t], (h, c))
        return self.fc(h)


def _mfcc(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cumsum(torch.randn(1, FRAMES, COEFFS, generator=g), dim=1) * 0.3


@pytest.mark.slow
@pytest.mark.parametrize("make", [lambda: RecurrentKWS("gru"),
                                  lambda: RecurrentKWS("lstm", bidirectional=True),
                                  lambda: CellKWS("lstm")],
                         ids=["gru", "bilstm", "lstm_cell"])
def test_recurrent_kws_runs_on_the_npu_bit_exact(make):
    torch.manual_seed(0)
    model = make().eval()
    x = _mfcc(0)
    calib = [(_mfcc(k),) for k in range(1, 10)]  # > 1 batch: the batched-calibration path
    cm = tessel.compile(model, (x,), target="tnpu-s", calibration_data=calib)
    fallback = cm.program.metadata["fallback"]
    assert fallback["npu_macs"] >= 0.95 * fallback["total_macs"] > 0
    assert not cm.program.metadata["host_ops"], cm.program.metadata["host_ops"]
    qm = tessel.quantize(model, (x,), calibration_data=calib)
    got, = cm.run(x)
    np.testing.assert_array_equal(got, qm.run(x)[0])
    with torch.no_grad():
        ref = model(x).numpy()
    sqnr = 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))
    assert sqnr > 15, sqnr
