"""Seeded random float PyTorch models (the float counterpart of random_models.py, which builds
integer IR): convolutions of every kind, batch norm, activations the NPU has LUTs for, pools,
residual adds, multiplies, concats, sometimes an op with no NPU lowering in the middle (cumsum,
sort, an FFT), sometimes two outputs; a mean + linear head. For frontend / .pt2 / partition
tests that must start from torch."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

_ACTS = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Sigmoid, nn.Tanh, nn.GELU, nn.Identity)


class _Block(nn.Module):
    """One random step on a [N, C, H, W] tensor; `kind` picks the op."""

    def __init__(self, kind: str, c: int, rng: np.random.Generator):
        super().__init__()
        self.kind = kind
        k = int(rng.choice([1, 3]))
        groups = {"dw": c, "grouped": 2 if c % 2 == 0 else 1}.get(kind, 1)
        cout = c if kind in ("dw", "residual", "mul") else int(rng.integers(4, 17)) * groups
        self.conv = nn.Conv2d(c, cout, k, padding=k // 2, groups=groups,
                              dilation=int(rng.choice([1, 2])) if k == 3 else 1)
        if self.conv.dilation[0] == 2:
            self.conv.padding = (2, 2)
        self.bn = nn.BatchNorm2d(cout)
        self.act = _ACTS[int(rng.integers(len(_ACTS)))]()
        self.out_channels = cout * (2 if kind == "cat" else 1)

    def forward(self, x):
        y = self.act(self.bn(self.conv(x)))
        if self.kind == "residual":
            return x + y
        if self.kind == "mul":
            return x * torch.sigmoid(y)
        if self.kind == "cat":
            return torch.cat([y, y * 0.5], dim=1)
        if self.kind == "pool":
            return nn.functional.max_pool2d(y, 2) if y.shape[-1] >= 4 else y
        if self.kind == "avgpool":
            return nn.functional.avg_pool2d(y, 2) if y.shape[-1] >= 4 else y
        if self.kind == "cumsum":
            return torch.cumsum(y, dim=1)  # no NPU lowering: a host op in the middle
        if self.kind == "fft":
            return torch.fft.irfft(torch.fft.rfft(y, dim=-1), n=y.shape[-1], dim=-1)
        return y


class RandomNet(nn.Module):
    def __init__(self, seed: int):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.channels = int(rng.integers(2, 9))
        self.size = int(rng.choice([8, 12, 16]))
        kinds = ["plain", "dw", "grouped", "residual", "mul", "cat", "pool", "avgpool"]
        if rng.random() < 0.3:
            kinds.append(str(rng.choice(["cumsum", "fft"])))
        c, blocks = self.channels, []
        for _ in range(int(rng.integers(2, 6))):
            block = _Block(str(rng.choice(kinds)), c, rng)
            blocks.append(block)
            c = block.out_channels
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(c, int(rng.integers(2, 11)))
        self.two_outputs = bool(rng.random() < 0.3)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        logits = self.head(x.mean((2, 3)))
        return (logits, x) if self.two_outputs else logits


def random_torch_model(seed: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """(model in eval mode with deterministic weights and BN statistics, example inputs)."""
    torch.manual_seed(seed)
    model = RandomNet(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, model.channels, model.size, model.size)
    return model.eval(), (x,)
