"""ResNet-18 at 224x224, 1000 classes (He et al., CVPR 2016), in plain torch.nn.

BasicBlocks with BatchNorm, laid out like torchvision's resnet18 (no weights are downloaded:
they are initialised deterministically, see tessel.models.weights).
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import nn

from tessel.models.calibration import smooth_image, smooth_images
from tessel.models.weights import (
    align_and_calibrate_batchnorm,
    calibrate_head,
    init_cnn,
    seeded,
)

SEED = 18


class BasicBlock(nn.Module):
    """3x3 conv-BN-ReLU -> 3x3 conv-BN, plus the (projected) input, then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + self.downsample(x))


class ResNet18(nn.Module):
    """ResNet-18: stem, four stages of two BasicBlocks, global average pool, fc."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 64, 1))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256, 1))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512, 1))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
    """n smooth ImageNet-normalised [1, 3, 224, 224] images."""
    return smooth_images(n, seed=SEED)


@functools.lru_cache(maxsize=1)
def _build() -> ResNet18:
    with seeded(SEED):
        model = ResNet18()
        init_cnn(model)
    stats_batch = torch.cat([smooth_image(SEED + 1000, i) for i in range(8)])
    align_and_calibrate_batchnorm(model, stats_batch)
    calibrate_head(model, model.fc, stats_batch)
    return model


def resnet18() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Zoo factory: (ResNet-18 in eval mode, (one [1, 3, 224, 224] image,))."""
    return copy.deepcopy(_build()).eval(), example_inputs()


def example_inputs() -> tuple[torch.Tensor, ...]:
    """The factory's example inputs: (one [1, 3, 224, 224] image,)."""
    return (smooth_image(SEED + 2000, 0),)
