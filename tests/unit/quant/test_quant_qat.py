"""QAT with TesselQuantizer: a tiny CNN trained on scikit-learn's digits with fake-quant, then
converted to the QDQ graph, stays accurate; conv -> batch norm chains get fused and a bias."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torchao.quantization.pt2e import FakeQuantizeBase

from tessel.quant.pt2e import convert_qat, prepare_qat

BATCH = 64
qd = torch.ops.quantized_decomposed


class TinyCnn(nn.Module):
    def __init__(self, bn: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=not bn)
        self.bn2 = nn.BatchNorm2d(16) if bn else nn.Identity()
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, ...]:
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    return x[:1344], y[:1344], x[1344:1728], y[1344:1728]  # whole batches of 64


def _accuracy(model, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + BATCH]) for i in range(0, len(x), BATCH)])
    return float((logits.argmax(1) == y).float().mean())


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, epochs: int) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _epoch in range(epochs):
        for i in range(0, len(x), BATCH):
            opt.zero_grad()
            F.cross_entropy(model(x[i : i + BATCH]), y[i : i + BATCH]).backward()
            opt.step()


def test_qat_digits_cnn_trains_converts_and_is_accurate(digits) -> None:
    # the usual recipe: a short float training, then QAT fine-tuning with fake-quant
    xtr, ytr, xte, yte = digits
    torch.manual_seed(0)
    model = TinyCnn()
    _train(model, xtr, ytr, lr=1e-2, epochs=3)
    float_acc = _accuracy(model.eval(), xte, yte)
    prepared = prepare_qat(model, (xtr[:BATCH],))
    assert any(isinstance(m, FakeQuantizeBase) for m in prepared.modules())
    _train(prepared, xtr, ytr, lr=1e-3, epochs=1)
    converted = convert_qat(prepared)
    targets = {n.target for n in converted.graph.nodes}
    assert {qd.quantize_per_tensor.default, qd.dequantize_per_channel.default} <= targets
    acc = _accuracy(converted, xte, yte)
    assert acc >= 0.9 and acc >= float_acc - 0.03, f"int8 QDQ {acc:.3f}, float {float_acc:.3f}"


def test_qat_conv_bn_gets_zero_bias_and_fused_fake_quant(digits) -> None:
    xtr = digits[0]
    prepared = prepare_qat(TinyCnn(bn=True), (xtr[:BATCH],))
    assert hasattr(prepared, "conv2d_1_zero_bias")  # bias-less conv before batch norm
    out = prepared(xtr[:BATCH])
    assert out.shape == (BATCH, 10)
    fqs = [m for m in prepared.modules() if isinstance(m, FakeQuantizeBase)]
    per_channel = [m for m in fqs if m.qscheme == torch.per_channel_symmetric]
    assert len(per_channel) == 3  # conv1, conv2 and fc weights
    assert all(m.quant_min == -127 and m.quant_max == 127 for m in per_channel)
