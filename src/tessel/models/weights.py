"""Deterministic random weights that behave like trained ones: well-conditioned, quantisable.

A plainly He-initialised deep CNN whose BatchNorm statistics are measured on natural-looking
(smooth) images is chaotic: its random 3x3 filters are high-pass, so they respond weakly to the
image and strongly to pixel noise, BatchNorm then scales that weak response up to unit variance,
and layer after layer the noise wins (MobileNetV2: 1% input noise -> ~0 dB output SQNR, int8
PTQ -> ~0 dB). Trained networks are well-conditioned because their filters are matched to the
statistics of their inputs. The zoo mimics that without training:

- init_cnn: He (kaiming) convolutions and linears, BatchNorm affine parameters around (1, 0)
  so BN folding has real work to do;
- align_and_calibrate_batchnorm: one train-mode pass over realistic synthetic inputs in which
  every convolution, just before it runs, has its weights re-coloured by its *actual* input's
  statistics, W <- W C_channel^(p_c/2) (x) C_spatial^(p_s/2) (input covariances across channels
  and across the kernel window, a data-dependent initialisation in the spirit of Kraehenbuehl et
  al., ICLR 2016), rescaled to the same He standard deviation; the BatchNorm running statistics
  are those of that same pass, so every BN normalises what it actually sees;
- calibrate_head: the classifier is re-coloured the same way by the covariance of its input
  features (identity + features: still full rank) and re-centred and re-scaled so that the
  logits have a realistic input-dependent spread.
Powers of 1/2 keep the weights full rank and nearly Gaussian (see tests/unit/models).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

# at most this many samples enter a covariance estimate (evenly spaced, so deterministic)
_MAX_POSITIONS = 16384
_MAX_MAPS = 64


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's global RNG inside the block and restore the caller's RNG state after it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def init_cnn(model: nn.Module) -> None:
    """He-initialise convs/linears and randomise BN affine parameters (uses the global RNG)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.uniform_(m.bias, -0.05, 0.05)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.7, 1.3)
            nn.init.normal_(m.bias, 0.0, 0.1)
        elif isinstance(m, nn.Linear):
            nn.init.kaiming_uniform_(m.weight, a=5 ** 0.5)
            bound = 1.0 / m.in_features ** 0.5
            nn.init.uniform_(m.bias, -bound, bound)


def _evenly(n: int, k: int) -> torch.Tensor:
    """min(n, k) evenly spaced indices into range(n)."""
    return torch.linspace(0, n - 1, min(n, k)).round().long()


def _eigh(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.linalg.eigh on one thread: these matrices are small, threaded LAPACK eigh is far
    slower on a machine whose cores are busy, and one thread everywhere keeps builds
    reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.linalg.eigh(c)
    finally:
        torch.set_num_threads(threads)


def _covariance_power(rows: torch.Tensor, power: float, ridge: float = 0.0) -> torch.Tensor:
    """(C / mean diag(C) + ridge I) ** power for the covariance C of `rows` [samples, dims]."""
    x = rows.double()
    x = x - x.mean(0)
    c = x.T @ x / max(x.shape[0], 1)
    c = c / c.diagonal().mean().clamp_min(1e-30) + ridge * torch.eye(c.shape[0], dtype=c.dtype)
    eigenvalues, vectors = _eigh(c)
    eigenvalues = eigenvalues.clamp_min(float(eigenvalues.max()) * 1e-6)
    return (vectors * eigenvalues.pow(power)) @ vectors.T


@torch.no_grad()
def align_conv(conv: nn.Conv2d, x: torch.Tensor, channel_power: float,
               spatial_power: float) -> None:
    """Re-colour `conv`'s weights by the statistics of its input `x` [N, C, H, W], in place.

    Across input channels (dense convs only: depthwise filters see one channel) the weights are
    multiplied by C_channel^(channel_power / 2), across the kernel window by
    C_spatial^(spatial_power / 2) (one window covariance shared by all channels). The weight
    standard deviation is kept, so only the direction of each filter changes.
    """
    w = conv.weight.double()
    std = w.std()
    cin = x.shape[1]
    if conv.groups == 1 and cin > 1 and channel_power:
        flat = x.transpose(0, 1).reshape(cin, -1)
        flat = flat[:, _evenly(flat.shape[1], _MAX_POSITIONS)]
        w = torch.einsum("oihw,ij->ojhw", w, _covariance_power(flat.T, channel_power / 2))
    kh, kw = conv.kernel_size
    if kh * kw > 1 and spatial_power:
        maps = x.reshape(-1, 1, *x.shape[2:])
        maps = maps[_evenly(maps.shape[0], _MAX_MAPS)]
        maps = maps / maps.std(dim=(2, 3), keepdim=True).clamp_min(1e-6)  # each map counts once
        windows = _windows(maps, conv)
        w = (w.reshape(-1, kh * kw) @ _covariance_power(windows, spatial_power / 2)).reshape(
            w.shape)
    conv.weight.copy_((w * (std / w.std())).to(conv.weight.dtype))


def _windows(maps: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """[samples, kh * kw]: `conv`'s kernel windows over `maps` [B, 1, H, W], on a grid coarse
    enough to give about _MAX_POSITIONS of them (window statistics are shift-invariant)."""
    kh, kw = conv.kernel_size
    ph, pw = conv.padding  # type: ignore[misc]
    padded = F.pad(maps[:, 0], (pw, pw, ph, ph))
    rows, cols = padded.shape[1] - kh + 1, padded.shape[2] - kw + 1
    sh, sw = conv.stride
    thin = max(1, round((maps.shape[0] * (rows // sh) * (cols // sw) / _MAX_POSITIONS) ** 0.5))
    sh, sw = sh * thin, sw * thin
    taps = [padded[:, i:i + rows:sh, j:j + cols:sw] for i in range(kh) for j in range(kw)]
    return torch.stack([t.reshape(-1) for t in taps], dim=1)


@torch.no_grad()
def align_and_calibrate_batchnorm(model: nn.Module, batch: torch.Tensor,
                                  channel_power: float = 0.5,
                                  spatial_power: float = 1.0) -> None:
    """One pass over `batch`: align every Conv2d to its input (align_conv), record BN stats.

    Only the BatchNorms run in train mode (dropout stays off, so no RNG is used); afterwards
    every BN's running mean / var are the statistics of `batch` and the model is in eval mode.
    """
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks = [c.register_forward_pre_hook(
        lambda m, args: align_conv(m, args[0], channel_power, spatial_power)) for c in convs]
    try:
        _run_with_batch_statistics(model, batch)
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, batch: torch.Tensor) -> None:
    """Every BN's running mean / var set to the statistics of `batch` (one pass; weights
    unchanged); the model is in eval mode afterwards."""
    _run_with_batch_statistics(model, batch)


def _run_with_batch_statistics(model: nn.Module, batch: torch.Tensor) -> None:
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in bns]
    model.eval()
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: after one batch, running stats = batch stats
        m.train()
    try:
        model(batch)
    finally:
        for m, momentum in zip(bns, saved, strict=True):
            m.momentum = momentum
        model.eval()


@torch.no_grad()
def calibrate_head(model: nn.Module, head: nn.Linear, batch: torch.Tensor,
                   logit_std: float = 2.0, align_power: float = 1.0) -> None:
    """Align the classifier with its input features, then re-centre and re-scale it.

    With random weights the classifier reads every feature direction alike, so the logits are
    dominated by directions in which the features barely vary from input to input (and in which
    quantisation noise is as large as anywhere). Multiplying the weights by
    (C / mean diag(C) + I)^(align_power / 2), C the covariance of the features over `batch`,
    weights the directions that carry signal, as a trained classifier does, and stays full
    rank. Then the mean feature's contribution is subtracted through the bias and the weights
    are scaled to a logit spread of `logit_std` on `batch`, so the argmax varies with the input.
    """
    features: list[torch.Tensor] = []
    hook = head.register_forward_hook(lambda _m, args, _out: features.append(args[0]))
    model.eval()
    try:
        model(batch)
    finally:
        hook.remove()
    feats = features[0].reshape(-1, head.in_features)
    if align_power:
        std = head.weight.std()
        w = head.weight.double() @ _covariance_power(feats, align_power / 2, ridge=1.0)
        head.weight.copy_((w * (std / w.std())).to(head.weight.dtype))
    centred = (feats - feats.mean(0)) @ head.weight.T
    head.weight.mul_(logit_std / centred.std())
    head.bias.copy_(head.bias * 0.1 - feats.mean(0) @ head.weight.T)
