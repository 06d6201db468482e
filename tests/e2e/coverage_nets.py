"""Small networks nobody on the project tuned the compiler for (graph-coverage cases) and an
audio TCN: a stack of dilated causal conv1d residual blocks, the shape of keyword-spotting
and speech-enhancement front ends."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalBlock(nn.Module):
    """x + relu(bn(conv1d(pad_left(x), dilation d)))."""

    def __init__(self, channels: int, dilation: int, kernel: int = 3, groups: int = 1) -> None:
        super().__init__()
        self.pad = dilation * (kernel - 1)
        self.conv = nn.Conv1d(channels, channels, kernel, dilation=dilation, groups=groups)
        self.bn = nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.bn(self.conv(F.pad(x, (self.pad, 0)))))


class AudioTCN(nn.Module):
    """40 mel bands x 128 frames -> 12 classes: 1x1 stem, dilated causal blocks, 1x1 head,
    mean over time (6.7 M MACs with the defaults)."""

    def __init__(self, bands: int = 40, channels: int = 64, dilations=(1, 2, 4, 8),
                 classes: int = 12, groups: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv1d(bands, channels, 1)
        self.blocks = nn.Sequential(*[CausalBlock(channels, d, groups=groups) for d in dilations])
        self.head = nn.Conv1d(channels, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(F.relu(self.stem(x)))).mean(-1)


def randomise_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial batch-norm statistics (as a trained model has), in eval mode."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) * 0.2 - 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) * 1.5 + 0.5)
    return model.eval()


class Conv1dMix(nn.Module):
    """Dilated, grouped, strided conv1d with causal padding."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(8, 16, 3, dilation=2)
        self.b = nn.Conv1d(16, 16, 3, groups=4, padding=1)
        self.c = nn.Conv1d(16, 8, 5, stride=2, padding=2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.a(F.pad(x, (4, 0))))
        return self.c(F.relu6(self.b(y)))


class ScalarParam(nn.Module):
    """conv(x) * (s * 2) with a rank-0 parameter s."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.s = nn.Parameter(torch.tensor(0.7))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * (self.s * 2)


class CatCycle(nn.Module):
    """y = cat([a, b]); return cat([y, a]), relu(y): shared-scale groups that form a cycle
    (DenseNet-like)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor):
        a, b = self.a(x), self.b(x)
        y = torch.cat([a, b], dim=1)
        return torch.cat([y, a], dim=1), F.relu(y)


class BatchNet(nn.Module):
    """conv, max + avg pool, depthwise (strided), pointwise, mean, linear: every NPU op kind a
    CNN uses, run on a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.d = nn.Conv2d(8, 8, 3, groups=8, stride=2)
        self.p = nn.Conv2d(8, 16, 1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.c(x))
        y = F.max_pool2d(y, 2) + F.avg_pool2d(y, 2)
        y = F.relu(self.p(F.relu(self.d(y))))
        return self.fc(y.mean((2, 3)))


class WideDilation(nn.Module):
    """A conv1d whose dilation (16) is beyond the CONV instruction's 4-bit field."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(4, 8, 3, dilation=16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x))
