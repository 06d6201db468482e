"""DS-CNN (small) keyword spotting, as in ARM's ML-KWS-for-MCU (Zhang et al., 2017).

Input: one 49-frame x 10-coefficient MFCC map [1, 1, 49, 10]; output: 12 class logits
(silence, unknown and 10 keywords of Google Speech Commands). Layers: conv 64 @ 10x4 stride 2,
then 4 depthwise-separable blocks (3x3 depthwise + 1x1 pointwise, 64 channels, BN + ReLU each),
average pool over the 25x5 map, linear to 12. ARM's TensorFlow model pads the first conv
'SAME' (4 rows above, 5 below); here it pads symmetrically (5, 1), which gives the same 25x5
output with a one-row shift and needs no separate pad op. Dropout (training only) is omitted.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import nn

from tessel.models.calibration import mfcc_batch, mfcc_frames
from tessel.models.weights import (
    align_and_calibrate_batchnorm,
    calibrate_head,
    init_cnn,
    seeded,
)

SEED = 12
CHANNELS = 64
NUM_CLASSES = 12


def _conv_bn_relu(cin: int, cout: int, kernel: tuple[int, int], stride: int,
                  padding: tuple[int, int], groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class DSCNN(nn.Module):
    """DS-CNN small: 1 conv + 4 depthwise-separable blocks of 64 channels."""

    def __init__(self, num_classes: int = NUM_CLASSES, channels: int = CHANNELS):
        super().__init__()
        self.conv1 = _conv_bn_relu(1, channels, (10, 4), 2, (5, 1))
        self.blocks = nn.Sequential(*[
            nn.Sequential(
                _conv_bn_relu(channels, channels, (3, 3), 1, (1, 1), groups=channels),
                _conv_bn_relu(channels, channels, (1, 1), 1, (0, 0)),
            )
            for _ in range(4)
        ])
        self.pool = nn.AvgPool2d((25, 5))
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.blocks(self.conv1(x)))
        return self.fc(torch.flatten(x, 1))


def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
    """n MFCC-like [1, 1, 49, 10] inputs (a word inside silence, smooth in time)."""
    return mfcc_batch(n, seed=SEED)


@functools.lru_cache(maxsize=1)
def _build() -> DSCNN:
    with seeded(SEED):
        model = DSCNN()
        init_cnn(model)
    stats_batch = torch.cat([mfcc_frames(SEED + 1000, i) for i in range(64)])
    align_and_calibrate_batchnorm(model, stats_batch)
    calibrate_head(model, model.fc, stats_batch)
    return model


def ds_cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Zoo factory: (DS-CNN in eval mode, (one [1, 1, 49, 10] MFCC map,))."""
    return copy.deepcopy(_build()).eval(), example_inputs()


def example_inputs() -> tuple[torch.Tensor, ...]:
    """The factory's example inputs: (one [1, 1, 49, 10] MFCC map,)."""
    return (mfcc_frames(SEED + 2000, 0),)
