"""Transposed convolution on the NPU: one qconv2d of all the stride phases (flipped
sub-kernels as output channels), depth-to-space, crop. The decomposition is held against
torch's conv_transpose2d in float; compiled models run every op on the NPU, bit-exact with the
golden model and close to torch; what the lowering does not take stays on the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tessel
from tessel.ops.conv import phase_weights

CASES = {  # (in, out, kernel, stride, padding, output_padding)
    "k4_s2_p1": (4, 6, 4, 2, 1, 0),
    "k3_s2_p1_op1": (4, 5, 3, 2, 1, 1),
    "k2_s2": (3, 4, 2, 2, 0, 0),
    "k3_s1_p1": (4, 5, 3, 1, 1, 0),
    "k5_s3_p2_op2": (2, 3, 5, 3, 2, 2),
    "k3x2_s2x3_p1x0_op1x2": (4, 3, (3, 2), (2, 3), (1, 0), (1, 2)),
}


def _pair(v):
    return (v, v) if isinstance(v, int) else v


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_phase_decomposition_is_torchs_conv_transpose(case):
    """conv2d(pad(x, k' - 1), phase_weights) -> depth-to-space -> crop equals
    torch.nn.functional.conv_transpose2d, in float64 (the weights' layout and flips)."""
    cin, cout, k, s, p, op = CASES[case]
    (kh, kw), (sh, sw), (ph, pw), (oph, opw) = map(_pair, (k, s, p, op))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, cin, 5, 6, generator=g, dtype=torch.float64)
    w = torch.randn(cin, cout, kh, kw, generator=g, dtype=torch.float64)
    want = F.conv_transpose2d(x, w, stride=(sh, sw), padding=(ph, pw), output_padding=(oph, opw))
    pw_ = torch.from_numpy(phase_weights(w.numpy(), sh, sw))
    kkh, kkw = pw_.shape[2:]
    z = F.conv2d(F.pad(x, (kkw - 1, kkw - 1 + 2, kkh - 1, kkh - 1 + 2)), pw_)
    n, _, zh, zw = z.shape
    full = z.reshape(n, sh, sw, cout, zh, zw).permute(0, 3, 4, 1, 5, 2).reshape(
        n, cout, zh * sh, zw * sw)
    got = full[:, :, ph:ph + want.shape[2], pw:pw + want.shape[3]]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - got) ** 2), 1e-30)))


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_transposed_convs_run_on_the_npu_bit_exact(case, preset):
    cin, cout, k, s, p, op = CASES[case]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, cin, 3, padding=1), nn.ReLU(),
                          nn.ConvTranspose2d(cin, cout, k, s, p, op), nn.ReLU()).eval()
    calib = [(torch.randn(1, 3, 7, 9),) for _ in range(4)]
    x = calib[0][0]
    cm = tessel.compile(model, (x,), target=preset, calibration_data=calib)
    qm = tessel.quantize(model, (x,), calibration_data=calib)
    assert cm.program.metadata["fallback"]["host_ops"] == {}
    got, = cm.run(x)
    np.testing.assert_array_equal(got, qm.run(x)[0])
    with torch.no_grad():
        assert _sqnr_db(model(x).numpy(), got) > 30


@pytest.mark.parametrize("mod", [nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2),
                                 nn.ConvTranspose2d(4, 6, 3, stride=2, dilation=2)],
                         ids=["groups", "dilation"])
def test_what_the_lowering_does_not_take_runs_on_the_host(mod):
    torch.manual_seed(0)
    model = nn.Sequential(mod).eval()
    x = torch.randn(1, 4, 6, 6)
    cm = tessel.compile(model, (x,))
    assert "conv_transpose2d" in str(cm.program.metadata["fallback"]["host_ops"])
    with torch.no_grad():
        assert _sqnr_db(model(x).numpy(), cm.run(x)[0]) > 30
