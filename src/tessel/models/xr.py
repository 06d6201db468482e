"""Small XR workloads: the perception models an AR/VR headset runs at once (the tasks of
XRBench, Kwon et al., MLSys 2023), each a deterministic, random-weight reduction of a published
architecture, sized for a wearable NPU.

* ``eye_seg``: RITnet (Chaudhary et al., ICCVW 2019, arXiv:1910.00694): a U-Net whose blocks are
  DenseNet-style (each conv reads the concatenation of the block's earlier maps), average-pool
  down, nearest up, skip concatenation; 4 classes (background, sclera, iris, pupil) per pixel of
  a grey eye image. Here 3 levels of 12 channels at 64 x 96 (RITnet: 5 levels of 32 at 640 x
  400) and ReLU for its leaky ReLU.
* ``gaze``: GazeNet of MPIIGaze (Zhang et al., CVPR 2015): LeNet on a 36 x 60 grey eye image
  (conv 5x5 20, max-pool, conv 5x5 50, max-pool, linear 500), the head pose (2 angles)
  concatenated, linear to the gaze (yaw, pitch). Two inputs; as published.
* ``hand_det``: a CenterNet-style hand detector (Zhou et al., "Objects as Points", 2019): a
  depthwise-separable backbone to stride 8, one nearest up-sampling to stride 4, heads for the
  centre heat map (sigmoid), box size and centre offset; peaks are picked on the host.
* ``hand_pose``: Simple Baselines (Xiao et al., ECCV 2018): a strided conv backbone to stride 16,
  three ConvTranspose2d 4x4 stride-2 layers with BatchNorm + ReLU, a 1x1 conv to 21 hand-keypoint
  heat maps at stride 2 of a 96 x 96 crop.
* ``depth``: FastDepth (Wofk et al., ICRA 2019): a MobileNet (depthwise-separable) encoder to
  stride 32 and the NNConv5 decoder (5 x (5x5 depthwise + 1x1 pointwise, nearest up x2)) with
  additive skips from the encoder; one depth map at the input's 96 x 128 resolution.
* ``kws_res8``: res8-narrow (Tang and Lin, ICASSP 2018, arXiv:1710.10361): conv 3x3 of 19 maps,
  4x3 average pool, 3 residual blocks of two 3x3 convs, global average, linear to 12 keywords,
  on a 101-frame x 40-coefficient MFCC map. BatchNorm sits before ReLU (the paper: after), so
  that it folds into the conv.

Weights are random (``init_cnn``), BatchNorm statistics those of 8 of the models' own inputs,
so that every layer's activations are normalised; nothing is downloaded.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import nn

from tessel.models.calibration import mfcc_frames, smooth_image
from tessel.models.weights import calibrate_batchnorm, init_cnn, seeded

SEED = 44
Inputs = tuple[torch.Tensor, ...]


def _cbr(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


def _separable(cin: int, cout: int, stride: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(_cbr(cin, cin, k, stride, groups=cin), _cbr(cin, cout, 1))


class _Dense(nn.Module):
    """RITnet's dense block: conv 3x3 on x; 1x1 + 3x3 on [x, y1]; 1x1 + 3x3 on [x, y1, y2]."""

    def __init__(self, cin: int, c: int) -> None:
        super().__init__()
        self.c1 = _cbr(cin, c)
        self.c2 = nn.Sequential(_cbr(cin + c, c, 1), _cbr(c, c))
        self.c3 = nn.Sequential(_cbr(cin + 2 * c, c, 1), _cbr(c, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y1 = self.c1(x)
        y2 = self.c2(torch.cat([x, y1], 1))
        return self.c3(torch.cat([x, y1, y2], 1))


class EyeSeg(nn.Module):
    def __init__(self, c: int = 12, classes: int = 4) -> None:
        super().__init__()
        self.down = nn.ModuleList([_Dense(1, c), _Dense(c, c), _Dense(c, c)])
        self.pool = nn.AvgPool2d(2)
        self.up = nn.ModuleList([_Dense(2 * c, c), _Dense(2 * c, c)])
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        for block, skip in zip(self.up, reversed(skips[:-1]), strict=True):
            x = block(torch.cat([self.upsample(x), skip], 1))
        return self.head(x)


class Gaze(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5),
                                      nn.MaxPool2d(2))
        self.fc = nn.Sequential(nn.Linear(50 * 6 * 12, 500), nn.ReLU())
        self.out = nn.Linear(502, 2)

    def forward(self, eye: torch.Tensor, head_pose: torch.Tensor) -> torch.Tensor:
        x = self.fc(torch.flatten(self.features(eye), 1))
        return self.out(torch.cat([x, head_pose], 1))


class HandDet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(_cbr(3, 16, 3, 2), _separable(16, 24, 2),
                                      _separable(24, 32), _separable(32, 48, 2),
                                      _separable(48, 48))
        self.neck = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), _cbr(48, 32))
        self.heat = nn.Sequential(nn.Conv2d(32, 1, 1), nn.Sigmoid())
        self.size = nn.Conv2d(32, 2, 1)
        self.offset = nn.Conv2d(32, 2, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.neck(self.backbone(x))
        heat, size, offset = self.heat(f), self.size(f), self.offset(f)
        return heat, size, offset


class HandPose(nn.Module):
    def __init__(self, keypoints: int = 21) -> None:
        super().__init__()
        self.backbone = nn.Sequential(_cbr(3, 16, 3, 2), _separable(16, 32, 2),
                                      _separable(32, 64, 2), _separable(64, 96, 2))
        layers: list[nn.Module] = []
        cin = 96
        for cout in (64, 48, 32):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout),
                       nn.ReLU()]
            cin = cout
        self.deconv = nn.Sequential(*layers)
        self.heatmaps = nn.Conv2d(32, keypoints, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heatmaps(self.deconv(self.backbone(x)))


class Depth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        widths = (16, 24, 32, 48, 64)
        self.stem = _cbr(3, widths[0], 3, 2)
        self.enc = nn.ModuleList([_separable(widths[i], widths[i + 1], 2) for i in range(4)])
        dec = (48, 32, 24, 16, 8)
        self.dec = nn.ModuleList([_separable(c, d, 1, 5) for c, d in zip(
            (widths[-1],) + dec[:-1], dec, strict=True)])
        self.skip = nn.ModuleList([_cbr(w, d, 1) for w, d in zip(
            (widths[3], widths[2], widths[1], widths[0]), dec[:4], strict=True)])
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(dec[-1], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [self.stem(x)]
        for block in self.enc:
            feats.append(block(feats[-1]))
        y = feats[-1]
        for i, block in enumerate(self.dec):
            y = self.up(block(y))
            if i < 4:
                y = y + self.skip[i](feats[3 - i])
        return self.head(y)


class _Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.a = _cbr(c, c)
        self.b = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x + self.b(self.a(x)))


class KwsRes8(nn.Module):
    def __init__(self, maps: int = 19, classes: int = 12) -> None:
        super().__init__()
        self.conv = _cbr(1, maps)
        self.pool = nn.AvgPool2d((4, 3))
        self.blocks = nn.Sequential(*[_Residual(maps) for _ in range(3)])
        self.fc = nn.Linear(maps, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(self.conv(x)))
        return self.fc(x.mean((2, 3)))


def _grey(seed: int, i: int, h: int, w: int) -> torch.Tensor:
    return smooth_image(seed, i, max(h, w), channels=1)[:, :, :h, :w].contiguous()


def _colour(seed: int, i: int, h: int, w: int) -> torch.Tensor:
    return smooth_image(seed, i, max(h, w))[:, :, :h, :w].contiguous()


def _head_pose(seed: int, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + i)
    return (torch.rand(1, 2, generator=g) - 0.5) * 0.6  # yaw, pitch in radians, +-0.3


_INPUTS = {  # name -> one input tuple of sample i
    "eye_seg": lambda s, i: (_grey(s, i, 64, 96),),
    "gaze": lambda s, i: (_grey(s, i, 36, 60), _head_pose(s, i)),
    "hand_det": lambda s, i: (_colour(s, i, 128, 128),),
    "hand_pose": lambda s, i: (_colour(s, i, 96, 96),),
    "depth": lambda s, i: (_colour(s, i, 96, 128),),
    "kws_res8": lambda s, i: (mfcc_frames(s, i, frames=101, coeffs=40),),
}
_CLASSES = {"eye_seg": EyeSeg, "gaze": Gaze, "hand_det": HandDet, "hand_pose": HandPose,
            "depth": Depth, "kws_res8": KwsRes8}
DESCRIPTIONS = {
    "eye_seg": ("RITnet-like eye segmentation, 4 classes per pixel of a grey 64x96 eye image",
                "grey eye image [1, 1, 64, 96] float32, ImageNet-normalised"),
    "gaze": ("MPIIGaze GazeNet: gaze (yaw, pitch) from a 36x60 eye image and the head pose",
             "grey eye image [1, 1, 36, 60] float32 + head pose [1, 2] (radians)"),
    "hand_det": ("CenterNet-style hand detector: centre heat map, box size, offset at stride 4",
                 "image [1, 3, 128, 128] float32, ImageNet-normalised"),
    "hand_pose": ("Simple-Baselines hand pose: 21 keypoint heat maps (3 ConvTranspose2d)",
                  "hand crop [1, 3, 96, 96] float32, ImageNet-normalised"),
    "depth": ("FastDepth-like monocular depth (MobileNet encoder, NNConv5 decoder, skips)",
              "image [1, 3, 96, 128] float32, ImageNet-normalised"),
    "kws_res8": ("res8-narrow keyword spotting (19 maps, 3 residual blocks), 12 classes",
                 "MFCC map [1, 1, 101, 40] float32 (101 frames x 40 coeffs)"),
}
NAMES = tuple(_CLASSES)


def _seed(name: str) -> int:
    return SEED + NAMES.index(name)


def inputs(name: str, index: int) -> Inputs:
    """Input tuple ``index`` of the model's own input generator (0: the example)."""
    return _INPUTS[name](_seed(name), index)


@functools.lru_cache(maxsize=len(NAMES))
def _build(name: str) -> nn.Module:
    with seeded(_seed(name)):
        model = _CLASSES[name]()
        init_cnn(model)
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        (batch,) = (torch.cat(xs) for xs in zip(*(inputs(name, 1000 + i) for i in range(8)),
                                                strict=True))
        calibrate_batchnorm(model, batch)
    return model.eval()


def factory(name: str):
    """The zoo factory of ``name``: () -> (model in eval mode, example inputs)."""
    def make() -> tuple[nn.Module, Inputs]:
        return copy.deepcopy(_build(name)).eval(), inputs(name, 0)
    make.__name__ = name
    return make


def calibration(name: str):
    """The zoo calibration generator of ``name``: n -> n input tuples (1, 2, ...)."""
    def data(n: int) -> list[Inputs]:
        return [inputs(name, 1 + i) for i in range(n)]
    return data


def example(name: str):
    return lambda: inputs(name, 0)
