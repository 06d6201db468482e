"""Bilinear upsampling on the NPU: the input with its edge pixels repeated, one grouped qconv2d of
the tent kernel's phases (integer weights, exact), depth-to-space, crop. The decomposition is
held against torch's interpolate in float; compiled models run every op on the NPU, bit-exact
with the golden model and as close to torch as int8 allows; align_corners stays on the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tessel
from tessel.ops.conv import MAX_BILINEAR_SCALE, tent


@pytest.mark.parametrize("f", range(1, MAX_BILINEAR_SCALE + 1))
def test_the_tent_kernel_is_torchs_bilinear_interpolation(f):
    """A transposed conv of the edge-padded input with the tent kernel (over 4 f^2), cropped,
    equals interpolate(mode="bilinear"), in float64; the kernel is integer and fits int8."""
    k, crop = tent(f)
    kernel = np.outer(k, k)
    assert np.array_equal(kernel, np.rint(kernel)) and kernel.max() <= 127
    x = torch.randn(2, 3, 5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(f))
    want = F.interpolate(x, scale_factor=f, mode="bilinear", align_corners=False)
    w = torch.from_numpy(kernel / (4 * f * f)).expand(3, 1, 2 * f, 2 * f)
    full = F.conv_transpose2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), w, stride=f, groups=3)
    got = full[:, :, f + crop:f + crop + 5 * f, f + crop:f + crop + 7 * f]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - got) ** 2), 1e-30)))


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("scale", [2, 3, (2, 3), 4])
def test_compiled_bilinear_upsampling_runs_on_the_npu_bit_exact(scale, preset):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(),
                          nn.Upsample(scale_factor=scale, mode="bilinear")).eval()
    calib = [(torch.randn(1, 3, 7, 9),) for _ in range(4)]
    x = calib[0][0]
    cm = tessel.compile(model, (x,), target=preset, calibration_data=calib)
    qm = tessel.quantize(model, (x,), calibration_data=calib)
    assert cm.program.metadata["fallback"]["host_ops"] == {}
    got, = cm.run(x)
    np.testing.assert_array_equal(got, qm.run(x)[0])
    with torch.no_grad():
        assert _sqnr_db(model(x).numpy(), got) > 30


def test_align_corners_runs_on_the_host():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1),
                          nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)).eval()
    x = torch.randn(1, 3, 6, 6)
    cm = tessel.compile(model, (x,))
    assert "upsample_bilinear" in str(cm.program.metadata["fallback"]["host_ops"])
    with torch.no_grad():
        assert _sqnr_db(model(x).numpy(), cm.run(x)[0]) > 30
