"""The random-weight zoo models are well-conditioned like trained ones: noise- and int8-robust.

Per model (mobilenet_v2, resnet18, ds_cnn, vit_small): 1% relative Gaussian input noise costs
at most -20 dB at the output, and int8 PTQ (Tessel's pt2e quantiser, 8 calibration samples,
4 other evaluation samples) keeps the output SQNR >= 20 dB (ViT: 18 dB). Plus unit tests of the
data-dependent weight alignment that makes it so (tessel.models.weights).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tessel.models import ZOO, ds_cnn
from tessel.models.weights import align_conv, calibrate_head, seeded
from tessel.quant.config import QuantConfig
from tessel.quant.pt2e import quantize_pt2e_module

MIN_PTQ_SQNR_DB = {"mobilenet_v2": 20.0, "resnet18": 20.0, "ds_cnn": 20.0, "vit_small": 18.0}
MIN_NOISE_SQNR_DB = 20.0
BY_MODEL = [pytest.param(n, marks=pytest.mark.xdist_group(f"zoo-{n}")) for n in MIN_PTQ_SQNR_DB]


def sqnr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    """docs/figures.md: 10 log10(sum(ref^2) / sum((ref - test)^2))."""
    return float(10 * torch.log10(reference.pow(2).sum() / (reference - test).pow(2).sum()))


def noisy(x: torch.Tensor, relative: float, generator: torch.Generator) -> torch.Tensor:
    """x plus Gaussian noise whose std is `relative` times the rms of x."""
    return x + torch.randn(x.shape, generator=generator) * relative * x.pow(2).mean().sqrt()


@pytest.mark.slow
@pytest.mark.parametrize("name", BY_MODEL)
def test_model_is_robust_to_input_noise_and_int8_ptq(name: str) -> None:
    spec = ZOO[name]
    model, example = spec.factory()
    data = spec.calibration_data(12)
    calibration, evaluation = data[:8], data[8:]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        ref = torch.cat([model(*x) for x in evaluation])
        noise_out = torch.cat([model(noisy(x[0], 0.01, g)) for x in evaluation])
    assert sqnr_db(ref, noise_out) >= MIN_NOISE_SQNR_DB, f"{name}: chaotic under input noise"

    qdq = quantize_pt2e_module(model, example, calibration, QuantConfig())
    with torch.no_grad():
        q_out = torch.cat([qdq(*x) for x in evaluation])
    assert sqnr_db(ref, q_out) >= MIN_PTQ_SQNR_DB[name], f"{name}: int8 PTQ SQNR too low"
    assert int((q_out.argmax(1) == ref.argmax(1)).sum()) >= 2, f"{name}: top-1 changed by PTQ"


def _smooth_maps(n: int, size: int, generator: torch.Generator) -> torch.Tensor:
    coarse = torch.randn(n, 4, size // 8, size // 8, generator=generator)
    return F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)


def test_align_conv_matches_filters_to_their_input_and_keeps_the_weight_scale() -> None:
    g = torch.Generator().manual_seed(1)
    smooth = _smooth_maps(4, 32, g)
    smooth[:, 1] = smooth[:, 0] + 0.1 * smooth[:, 1]  # two strongly correlated channels
    white = torch.randn(smooth.shape, generator=g)
    with seeded(3):
        conv = nn.Conv2d(4, 16, 3, padding=1, bias=False)
    before = conv.weight.detach().clone()

    def signal_to_noise(c: nn.Conv2d) -> float:
        with torch.no_grad():
            return float(c(smooth).var() / c(white).var())

    snr_before = signal_to_noise(conv)
    align_conv(conv, smooth, channel_power=0.5, spatial_power=1.0)
    assert float(conv.weight.detach().std()) == pytest.approx(float(before.std()), rel=1e-5)
    assert signal_to_noise(conv) > 3 * snr_before  # low-pass, along the correlated channels
    again = nn.Conv2d(4, 16, 3, padding=1, bias=False)
    with torch.no_grad():
        again.weight.copy_(before)
    align_conv(again, smooth, channel_power=0.5, spatial_power=1.0)
    assert torch.equal(again.weight, conv.weight), "alignment must be deterministic"


def test_depthwise_alignment_leaves_channels_alone() -> None:
    g = torch.Generator().manual_seed(2)
    x = _smooth_maps(2, 16, g)
    with seeded(4):
        conv = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
        pointwise = nn.Conv2d(4, 8, 1, bias=False)
    w = pointwise.weight.detach().clone()
    align_conv(pointwise, x, channel_power=0.0, spatial_power=1.0)  # 1x1: no window to align
    assert torch.equal(pointwise.weight, w)
    align_conv(conv, x, channel_power=0.5, spatial_power=1.0)
    assert conv.weight.shape == (4, 1, 3, 3) and torch.isfinite(conv.weight).all()


def test_calibrated_head_is_full_rank_centred_and_spread() -> None:
    g = torch.Generator().manual_seed(5)
    feats = torch.randn(32, 3, generator=g) @ torch.randn(3, 24, generator=g) + 5.0  # rank 3
    with seeded(6):
        model = nn.Sequential(nn.Identity(), nn.Linear(24, 10))
    calibrate_head(model, model[1], feats, logit_std=2.0)
    with torch.no_grad():
        logits = model(feats)
    assert float(logits.mean(0).abs().max()) < 0.5  # the input-independent part is removed
    assert float((logits - logits.mean(0)).std()) == pytest.approx(2.0, rel=1e-4)
    singular = torch.linalg.svdvals(model[1].weight.detach())
    assert float(singular.min() / singular.max()) > 0.05, "the head must stay full rank"


def test_aligned_weights_keep_realistic_statistics() -> None:
    """Full-rank, near-Gaussian pointwise weights (not collapsed onto a few directions)."""
    model = ds_cnn._build()
    pointwise = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1)]
    assert len(pointwise) == 4
    for conv in pointwise:
        w = conv.weight.detach().reshape(conv.out_channels, -1)
        p = torch.linalg.svdvals(w)
        p = p / p.sum()
        effective_rank = float(torch.exp(-(p * p.log()).sum())) / min(w.shape)
        z = (w - w.mean()) / w.std()
        assert effective_rank > 0.6  # channel_power 1 would give ~0.5
        assert 2.5 < float(z.pow(4).mean()) < 8.0  # kurtosis: Gaussian 3, trained nets ~3-8
