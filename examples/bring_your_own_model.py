"""Your own model, as Tessel takes it: a file with a factory returning (model in eval mode,
example inputs), and optionally calibration() yielding calibration samples.

    tessel compile examples/bring_your_own_model.py:make         # -> bring_your_own_model.tsl
    tessel estimate examples/bring_your_own_model.py:make --target tnpu-m
    python examples/bring_your_own_model.py                      # the same from Python

Its outputs are named after forward's return statement: `logits` and `features`.
"""

from __future__ import annotations

import torch
from torch import nn


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
                                   nn.Conv2d(16, 32, 1), nn.ReLU())
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.block(self.stem(x))
        logits = self.head(features.mean((2, 3)))
        return logits, features


def make() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return SmallNet().eval(), (torch.randn(1, 3, 16, 16),)


def calibration():
    """Calibration samples (here random; give real data for real scales)."""
    generator = torch.Generator().manual_seed(1)
    for _ in range(16):
        yield (torch.randn(1, 3, 16, 16, generator=generator),)


if __name__ == "__main__":
    import tessel

    model, inputs = make()
    cm = tessel.compile(model, inputs, target="tnpu-s", calibration_data=calibration())
    logits, features = cm.run(*inputs)
    print(cm.output_names, logits.shape, features.shape)
    print(cm.profile.summary())
