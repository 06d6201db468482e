"""Deterministic, realistic synthetic inputs: smooth natural-looking images and MFCC-like frames.

Pure N(0, 1) noise is a poor stand-in for real data when calibrating quantisation: real images
are dominated by low spatial frequencies and, once ImageNet-normalised, lie in about [-2.1, 2.6];
MFCCs have a large, slowly varying c0 (log energy) and smaller higher coefficients. The
generators below mimic those statistics. Sample i depends only on (seed, i), so a list of n
samples is a prefix of a list of n + k samples.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# mean and spread of MFCC coefficient k (as from ARM ML-KWS: 40 mel bins, 10 coefficients)
_MFCC_MEAN = (-8.0, 2.0, -1.5, 1.0, -0.8, 0.6, -0.4, 0.3, -0.2, 0.1)
_MFCC_STD = (9.0, 5.0, 3.5, 2.8, 2.2, 1.8, 1.5, 1.2, 1.0, 0.9)


def _generator(seed: int, index: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def smooth_image(seed: int, index: int, size: int = 224, channels: int = 3) -> torch.Tensor:
    """One [1, C, size, size] image: a sum of random low-frequency layers, ImageNet-normalised."""
    g = _generator(seed, index)
    img = torch.zeros(1, channels, size, size)
    for cells, weight in ((2, 0.5), (5, 0.3), (14, 0.15), (size // 4, 0.05)):
        layer = torch.rand(1, channels, cells, cells, generator=g)
        grey = torch.rand(1, 1, cells, cells, generator=g)
        layer = 0.6 * grey + 0.4 * layer  # natural images: colour channels are correlated
        img += weight * F.interpolate(layer, size=(size, size), mode="bilinear",
                                      align_corners=False)
    lo, hi = torch.rand(2, generator=g).sort().values  # random contrast / exposure
    img = (lo * 0.4 + (img - img.min()) / (img.max() - img.min() + 1e-6) * (0.6 + 0.4 * hi))
    img = img.clamp(0.0, 1.0)
    mean = torch.tensor(IMAGENET_MEAN[:channels]).view(1, channels, 1, 1)
    std = torch.tensor(IMAGENET_STD[:channels]).view(1, channels, 1, 1)
    return (img - mean) / std


def smooth_images(n: int, seed: int, size: int = 224) -> list[tuple[torch.Tensor, ...]]:
    """n calibration tuples, each (one [1, 3, size, size] image,)."""
    return [(smooth_image(seed, i, size),) for i in range(n)]


def mfcc_frames(seed: int, index: int, frames: int = 49, coeffs: int = 10) -> torch.Tensor:
    """One [1, 1, frames, coeffs] MFCC-like input: a word (loud, varying) inside silence."""
    g = _generator(seed, index)
    extra = max(0, coeffs - len(_MFCC_MEAN))  # higher coefficients: mean 0, std decaying 10 %
    mean = torch.tensor((_MFCC_MEAN + (0.0,) * extra)[:coeffs])
    std = torch.tensor((_MFCC_STD + tuple(_MFCC_STD[-1] * 0.9 ** (k + 1)
                                          for k in range(extra)))[:coeffs])
    # smooth in time: white noise low-passed with a 5-frame moving average, re-scaled to unit std
    noise = torch.randn(1, coeffs, frames + 4, generator=g)
    smooth = F.avg_pool1d(noise, kernel_size=5, stride=1)[0].T * (5 ** 0.5)
    start = int(torch.randint(0, frames // 3, (1,), generator=g))
    length = int(torch.randint(frames // 3, frames - start + 1, (1,), generator=g))
    envelope = torch.full((frames, 1), 0.35)  # silence: quiet, little variation
    envelope[start:start + length] = 1.0
    x = mean + smooth * std * envelope
    x[:, 0] += (envelope[:, 0] - 0.35) * 25.0  # speech raises the log energy
    return x.view(1, 1, frames, coeffs)


def mfcc_batch(n: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    """n calibration tuples, each (one [1, 1, 49, 10] MFCC-like input,)."""
    return [(mfcc_frames(seed, i),) for i in range(n)]
