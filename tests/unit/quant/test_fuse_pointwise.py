"""Element-wise int8 chains fused into one LUT: same integer results as the unfused chain (the
golden model of the chain is the oracle), fewer NPU steps, and the simulator bit-exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tessel
from tessel.ir import Op, run_graph
from tessel.passes.manager import run_pipeline
from tessel.passes.to_nhwc import ToNHWC
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.quant.lower import LowerQDQ


class Spelled(nn.Module):
    """SiLU, hard-swish and a sigmoid-gated chain spelled out as PyTorch users write them."""

    def __init__(self, act: str) -> None:
        super().__init__()
        self.act = act
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.a(x)
        if self.act == "silu":
            y = y * torch.sigmoid(y)
        elif self.act == "hardswish":
            y = y * torch.nn.functional.relu6(y + 3) / 6
        else:  # a longer chain with a scalar on both sides and a second use of y inside it
            y = (torch.sigmoid(y) * y - 0.5) * 2.0 + y
        z = self.b(y)
        return z, y  # y is also an output: the chain's last node may be one


def _quantized(act: str):
    torch.manual_seed(0)
    model = Spelled(act).eval()
    calib = [(3 * torch.randn(1, 3, 8, 8),) for _ in range(8)]
    return model, calib, tessel.quantize(model, calib[0], calibration_data=calib)


@pytest.mark.parametrize("act", ["silu", "hardswish", "chain"])
def test_chain_becomes_one_lut_with_the_chains_own_results(act):
    model, _, qm = _quantized(act)
    unfused = run_pipeline(qm.qdq_graph, [LowerQDQ(), "dce", ToNHWC()], verify_each=True,
                           dump=lambda _: None)
    elementwise = (Op.QADD, Op.QSUB, Op.QMUL, Op.REQUANTIZE, Op.LUT)
    before = [n for n in unfused.nodes if n.op in elementwise]
    after = [n for n in qm.graph.nodes if n.op in elementwise]
    assert len(before) >= 3 and [n.op for n in after] == [Op.LUT]
    rng = np.random.default_rng(1)
    for scale in (0.1, 1.0, 3.0, 30.0):  # small to saturating: every table entry is reached
        x = (scale * rng.standard_normal((1, 3, 8, 8))).astype(np.float32)
        want = run_graph(unfused, [x], kernels=GOLDEN_KERNELS)
        got = run_graph(qm.graph, [x], kernels=GOLDEN_KERNELS)
        for a, b in zip(want, got, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_fused_chain_compiles_bit_exact_in_fewer_steps():
    model, calib, qm = _quantized("silu")
    x = calib[0][0]
    cm = tessel.compile(model, (x,), target="tnpu-s", calibration_data=calib)
    ops = [layer.op for layer in cm.profile.layers]
    assert "qmul" not in ops and "requantize" not in ops and ops.count("lut") == 1
    golden = qm.run(x)
    for a, b in zip(cm.run(x), golden, strict=True):
        assert np.array_equal(a, b)


def test_two_tensor_chain_is_not_fused():
    """qmul of two different convs' outputs depends on two values per element: no table."""

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return torch.sigmoid(self.a(x)) * self.b(x)

    torch.manual_seed(0)
    x = torch.randn(1, 3, 4, 4)
    qm = tessel.quantize(Two().eval(), (x,), calibration_data=[(x,)])
    assert any(n.op is Op.QMUL for n in qm.graph.nodes)
