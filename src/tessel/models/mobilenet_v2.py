"""MobileNetV2 1.0 at 224x224, 1000 classes (Sandler et al., CVPR 2018), in plain torch.nn.

The standard inverted-residual configuration with BatchNorm and ReLU6, laid out like
torchvision's implementation (no weights are downloaded: they are initialised
deterministically, see tessel.models.weights).
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

SEED = 2
# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2
INVERTED_RESIDUAL_CONFIG = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class ConvBNReLU6(nn.Sequential):
    """conv (no bias) -> BatchNorm -> ReLU6; groups == channels makes it depthwise."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=False),
        )


class InvertedResidual(nn.Module):
    """1x1 expand -> 3x3 depthwise -> 1x1 linear projection, residual when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNReLU6(cin, hidden, kernel=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 with width multiplier 1.0."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        cin = 32
        layers: list[nn.Module] = [ConvBNReLU6(3, cin, stride=2)]
        for t, c, n, s in INVERTED_RESIDUAL_CONFIG:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(ConvBNReLU6(cin, 1280, kernel=1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
    """n smooth ImageNet-normalised [1, 3, 224, 224] images."""
    return smooth_images(n, seed=SEED)


@functools.lru_cache(maxsize=1)
def _build() -> MobileNetV2:
    with seeded(SEED):
        model = MobileNetV2()
        init_cnn(model)
    stats_batch = torch.cat([smooth_image(SEED + 1000, i) for i in range(8)])
    align_and_calibrate_batchnorm(model, stats_batch)
    calibrate_head(model, model.classifier[1], stats_batch)
    return model


def example_inputs() -> tuple[torch.Tensor, ...]:
    """The factory's example inputs: (one [1, 3, 224, 224] image,)."""
    return (smooth_image(SEED + 2000, 0),)


def mobilenet_v2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Zoo factory: (MobileNetV2 in eval mode, (one [1, 3, 224, 224] image,))."""
    return copy.deepcopy(_build()).eval(), example_inputs()
