"""The int4 weight scale: each channel's range clipped to the ratio of its max |w| that gives the
least squared rounding error (a scalar search per channel as the oracle), never worse than the
unclipped max, used by the quantiser for int4 weights and only for them."""

from __future__ import annotations

import math

import pytest
import torch

import tessel
from tessel.quant.config import Int4Rounding, QuantConfig, WeightDtype
from tessel.quant.qspecs import INT4_COARSE_RATIOS, INT4_FINE_STEPS, int4_clip


def _error(row: torch.Tensor, clip: float) -> float:
    step = clip / 7
    return float(((torch.clamp(torch.round(row / step), -7, 7) * step - row) ** 2).sum(
        dtype=torch.float64))


def _oracle(row: torch.Tensor) -> float:
    """The documented search for one channel, one candidate at a time."""
    amax = float(row.abs().max())
    if amax == 0:
        return 0.0
    best_r, best = 1.0, math.inf
    for r in INT4_COARSE_RATIOS:
        e = _error(row, float(torch.tensor(amax) * torch.tensor(r)))
        if e < best:
            best_r, best = r, e
    coarse = best_r
    for d in INT4_FINE_STEPS:
        r = float(torch.clamp(torch.tensor(coarse) + torch.tensor(d), max=1.0))
        e = _error(row, float(torch.tensor(amax) * torch.tensor(r)))
        if e < best:
            best_r, best = r, e
    return float(torch.tensor(amax) * torch.tensor(best_r))


def _weights(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(12, 40, generator=g)
    w[3] = 0  # an all-zero channel
    w[5, 7] = 9.0  # one outlier
    w[6] = torch.tensor([1.0, -1.0] * 20)  # two values: the max is exact
    w[8] *= 1e-3
    return w


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int4_clip_is_the_per_channel_search(seed):
    w = _weights(seed)
    got = int4_clip(w, 0)
    want = torch.tensor([_oracle(row) for row in w])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert got[3] == 0 and got[6] == 1.0  # nothing to clip
    # one outlier among 40 costs more clipped (its own error) than it saves on the others
    assert got[5] > 0.9 * 9.0
    # never worse than the max, and on Gaussian rows clearly better
    for row, clip in zip(w, got, strict=True):
        if clip > 0:
            assert _error(row, float(clip)) <= _error(row, float(row.abs().max()))


def test_int4_clip_takes_the_channel_axis():
    w = _weights(4).reshape(12, 10, 2, 2)
    moved = torch.movedim(w, 0, 1).contiguous()  # a transposed conv's [in, out, kh, kw]
    torch.testing.assert_close(int4_clip(moved, 1), int4_clip(w, 0), rtol=0, atol=0)


def test_gaussian_weights_lose_less_with_the_clipped_scale():
    w = torch.randn(64, 384, generator=torch.Generator().manual_seed(5))
    clip = int4_clip(w, 0)
    amax = w.abs().amax(1)
    err = sum(_error(r, float(c)) for r, c in zip(w, clip, strict=True))
    err_max = sum(_error(r, float(c)) for r, c in zip(w, amax, strict=True))
    assert 10 * math.log10(err_max / err) > 1.0  # measured 1.5 dB
    assert bool((clip < amax).all())


class Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc(x)


@pytest.mark.parametrize("weights", [WeightDtype.INT8, WeightDtype.INT4])
def test_the_quantiser_clips_int4_weights_only(weights):
    model, x = Lin().eval(), torch.randn(1, 64, generator=torch.Generator().manual_seed(1))
    calibration = [(torch.randn(1, 64, generator=torch.Generator().manual_seed(s)),)
                   for s in range(4)]
    qm = tessel.quantize(model, (x,), calibration, QuantConfig(
        weights=weights, int4_rounding=Int4Rounding.CLIP_MSE))
    (node,) = [n for n in qm.graph.nodes if n.op.name == "QLINEAR"]
    q = torch.from_numpy(qm.graph.constant_value(node.inputs[1]).astype("int64"))
    top = q.abs().amax(1)
    w = model.fc.weight.detach()
    if weights is WeightDtype.INT8:
        assert bool((top == 127).all())  # every channel's max is the range's end
    else:
        clipped = int4_clip(w, 0) < w.abs().amax(1)
        assert bool(clipped.any())
        assert bool((top[~clipped] == 7).all())
        # the clipped channels saturate: the largest weight maps to the range's end
        assert bool((top[clipped] == 7).all())
