"""Synthetic calibration inputs look like real preprocessed data, not N(0, 1) noise."""

from __future__ import annotations

import torch

from tessel.models.calibration import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    mfcc_frames,
    smooth_image,
    smooth_images,
)


def test_smooth_images_lie_in_the_imagenet_normalised_pixel_range() -> None:
    lo = min((0 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))
    hi = max((1 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))
    for i in range(4):
        img = smooth_image(seed=1, index=i)
        assert img.shape == (1, 3, 224, 224)
        assert lo - 1e-5 <= float(img.min()) and float(img.max()) <= hi + 1e-5
        assert float(img.std()) > 0.1


def test_smooth_images_are_low_frequency_and_colour_correlated() -> None:
    img = smooth_image(seed=1, index=0)[0]
    dx = (img[:, :, 1:] - img[:, :, :-1]).std()
    assert float(dx) < 0.25 * float(img.std())  # neighbouring pixels are close
    flat = img.reshape(3, -1)
    assert float(torch.corrcoef(flat)[0, 1]) > 0.5


def test_images_are_deterministic_and_distinct() -> None:
    a, b = smooth_images(2, seed=5), smooth_images(2, seed=5)
    assert torch.equal(a[1][0], b[1][0])
    assert not torch.equal(a[0][0], a[1][0])
    assert not torch.equal(smooth_image(5, 0), smooth_image(6, 0))


def test_mfcc_frames_have_mfcc_like_statistics() -> None:
    x = torch.cat([mfcc_frames(seed=3, index=i) for i in range(32)])
    assert x.shape == (32, 1, 49, 10)
    per_coeff_std = x.std(dim=(0, 1, 2))
    assert per_coeff_std[0] > 2 * per_coeff_std[-1]  # c0 (log energy) varies most
    assert float(x.abs().max()) < 80.0
    dt = (x[:, :, 1:] - x[:, :, :-1]).std(dim=(0, 1, 2))
    assert (dt < per_coeff_std).all()  # smooth in time
    assert torch.equal(mfcc_frames(3, 7), mfcc_frames(3, 7))
