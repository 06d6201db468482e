"""MobileNetV3- and EfficientNet-style networks in plain torch.nn (no torchvision / timm), at
small sizes: the building blocks of the real models (hard-swish / SiLU, squeeze-and-excite,
inverted residuals with depthwise convolutions) with seeded weights and batch-norm statistics.

``mobilenet_v3()`` / ``efficientnet()`` return ``(model, example)``, the form
``tessel accuracy path/to/vision_nets.py:mobilenet_v3`` takes.
"""

from __future__ import annotations

import torch
from torch import nn

SEED = 7
SIZE = 64  # input height and width
SCALE_SPREAD = 1.0  # std of the log of batch-norm scales


def _init(model: nn.Module, seed: int) -> nn.Module:
    """Weights with the statistics of a trained model's, eval mode: convolutions initialised as
    torchvision does (Kaiming normal, fan out), batch-norm scales spread over two orders of
    magnitude across channels (log-normal) with shifted means: per-tensor int8 activations
    then lose the channels of small range, as they do in trained MobileNets."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", generator=g)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.weight.data.copy_(torch.exp(torch.randn(n, generator=g) * SCALE_SPREAD))
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.5)
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.2)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
    return model.eval()


class ConvBNAct(nn.Sequential):
    """conv (no bias) -> BatchNorm -> activation (None: linear); groups == channels is
    depthwise."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
                 act: type[nn.Module] | None = nn.ReLU) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class SqueezeExcite(nn.Module):
    """x * gate(fc2(act(fc1(mean over H, W)))): MobileNetV3's (ReLU, hard-sigmoid) or
    EfficientNet's (SiLU, sigmoid)."""

    def __init__(self, channels: int, squeezed: int, act: type[nn.Module],
                 gate: type[nn.Module]) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.act = act()
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    """1x1 expand -> k x k depthwise -> (squeeze-excite) -> 1x1 linear projection, a residual
    add when the shapes match."""

    def __init__(self, cin: int, hidden: int, cout: int, kernel: int, stride: int,
                 se: SqueezeExcite | None, act: type[nn.Module]) -> None:
        super().__init__()
        self.use_residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(ConvBNAct(cin, hidden, 1, act=act))
        layers.append(ConvBNAct(hidden, hidden, kernel, stride, groups=hidden, act=act))
        if se is not None:
            layers.append(se)
        layers.append(ConvBNAct(hidden, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_residual else self.block(x)


# MobileNetV3-small's blocks (Howard et al., ICCV 2019, Table 2), channels halved:
# (kernel, expanded, out, squeeze-excite, hard-swish, stride)
MOBILENET_V3_BLOCKS = (
    (3, 16, 8, True, False, 2),
    (3, 36, 12, False, False, 2),
    (3, 44, 12, False, False, 1),
    (5, 48, 20, True, True, 2),
    (5, 120, 20, True, True, 1),
    (5, 60, 24, True, True, 1),
    (5, 72, 24, True, True, 1),
    (5, 144, 48, True, True, 2),
    (5, 288, 48, True, True, 1),
)


class MobileNetV3(nn.Module):
    """MobileNetV3-small's structure at half width: hard-swish stem, inverted residuals with
    hard-sigmoid squeeze-excite, 1x1 head, global average pool, hard-swish classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 8, 3, 2, act=nn.Hardswish)]
        cin = 8
        for k, hidden, cout, se, hs, stride in MOBILENET_V3_BLOCKS:
            act = nn.Hardswish if hs else nn.ReLU
            squeeze = SqueezeExcite(hidden, max(8, hidden // 4), nn.ReLU, nn.Hardsigmoid) \
                if se else None
            layers.append(InvertedResidual(cin, hidden, cout, k, stride, squeeze, act))
            cin = cout
        layers.append(ConvBNAct(cin, 288, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(288, 256), nn.Hardswish(),
                                        nn.Linear(256, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


# EfficientNet-B0's stages (Tan and Le, ICML 2019, Table 1), channels and repeats reduced:
# (expansion, kernel, stride, out, repeats)
EFFICIENTNET_STAGES = (
    (1, 3, 1, 8, 1),
    (6, 3, 2, 12, 2),
    (6, 5, 2, 20, 2),
    (6, 3, 2, 40, 2),
    (6, 5, 1, 56, 1),
)


class EfficientNet(nn.Module):
    """EfficientNet-B0's structure at small width: SiLU everywhere, MBConv blocks with sigmoid
    squeeze-excite (a quarter of the block's input channels), 1x1 head, pool, linear."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 16, 3, 2, act=nn.SiLU)]
        cin = 16
        for t, k, s, cout, n in EFFICIENTNET_STAGES:
            for i in range(n):
                hidden = cin * t
                se = SqueezeExcite(hidden, max(4, cin // 4), nn.SiLU, nn.Sigmoid)
                layers.append(InvertedResidual(cin, hidden, cout, k, s if i == 0 else 1, se,
                                               nn.SiLU))
                cin = cout
        layers.append(ConvBNAct(cin, 160, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(160, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


def _build(cls: type[nn.Module], seed: int) -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(seed)
    model = _init(cls(), seed)
    example = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
    return model, (example,)


def mobilenet_v3() -> tuple[nn.Module, tuple[torch.Tensor]]:
    return _build(MobileNetV3, SEED)


def efficientnet() -> tuple[nn.Module, tuple[torch.Tensor]]:
    return _build(EfficientNet, SEED + 1)


def images(n: int, seed: int = 0) -> list[tuple[torch.Tensor]]:
    """``n`` seeded inputs: smooth random images (low-frequency noise, as photographs are)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        coarse = torch.randn(1, 3, SIZE // 8, SIZE // 8, generator=g)
        fine = torch.nn.functional.interpolate(coarse, size=(SIZE, SIZE), mode="bilinear",
                                               align_corners=False)
        out.append((fine + 0.2 * torch.randn(1, 3, SIZE, SIZE, generator=g),))
    return out


def calibration():
    """`tessel accuracy tests/e2e/vision_nets.py:mobilenet_v3`'s calibration samples."""
    yield from images(64, seed=1)


def evaluation():
    """Its held-out inputs (other seeds than calibration's)."""
    yield from images(64, seed=2)
