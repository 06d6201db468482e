"""Deterministic weight initialisation that keeps activations in a sane range.

Randomly initialised deep networks either collapse towards zero or blow up, and a model whose
activations are degenerate makes quantisation tests meaningless. The zoo's CNNs therefore use:
- He (kaiming) initialisation of convolutions and linears,
- BatchNorm affine parameters drawn around (1, 0) so BN folding has real work to do,
- BatchNorm running statistics *measured* on realistic synthetic images (one train-mode pass,
  see calibrate_batchnorm), so every BN normalises what it actually sees: non-trivial,
  deterministic statistics and unit-scale activations all the way to the logits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


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


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, batch: torch.Tensor) -> None:
    """Set every BatchNorm's running mean/var to the statistics of `batch` (one train pass)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: after one batch, running stats = batch stats
    model.train()
    model(batch)
    for m, momentum in zip(bns, saved, strict=True):
        m.momentum = momentum
    model.eval()


@torch.no_grad()
def calibrate_head(model: nn.Module, head: nn.Linear, batch: torch.Tensor,
                   logit_std: float = 2.0) -> None:
    """Re-centre and re-scale the classifier so its logits depend on the input.

    With random weights the pooled features share a large input-independent mean, so every
    input gets the same top-1 class, which makes top-1 agreement meaningless. Subtracting the
    mean feature's contribution through the bias (and scaling the weights to a logit spread
    of `logit_std` on `batch`) makes the argmax vary from input to input.
    """
    features: list[torch.Tensor] = []
    hook = head.register_forward_hook(lambda _m, args, _out: features.append(args[0]))
    model.eval()
    model(batch)
    hook.remove()
    feats = features[0].reshape(-1, head.in_features)
    centred = (feats - feats.mean(0)) @ head.weight.T
    head.weight.mul_(logit_std / centred.std())
    head.bias.copy_(head.bias * 0.1 - feats.mean(0) @ head.weight.T)
