"""Convs padded beyond the CONV / DWCONV 4-bit fields run on the NPU as pad + conv, bit-exact
with the golden model of the original graph (which keeps the padded conv)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import tessel
from tessel.ir import Op
from tessel.lower.legalize import legalize


class DilatedTCN(nn.Module):
    """Dilated conv1d padded by 24 and 16 (a TCN block): beyond the 4-bit padding field."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(8, 16, 3, dilation=12, padding=24)
        self.b = nn.Conv1d(16, 16, 3, dilation=8, padding=16, groups=16)  # depthwise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_overpadded_convs_become_pad_plus_conv_on_the_npu_bit_exact():
    torch.manual_seed(0)
    model = DilatedTCN().eval()
    calib = [(torch.randn(1, 8, 64),) for _ in range(4)]
    qm = tessel.quantize(model, calib[0], calibration_data=calib)
    convs = [n for n in qm.graph.nodes if n.op is Op.QCONV2D]
    assert max(max(n.attr("padding")[:2]) for n in convs) > 15
    legal = legalize(qm.graph)
    assert [n.op for n in legal.nodes if n.op in (Op.PAD, Op.QCONV2D)] == [
        Op.PAD, Op.QCONV2D, Op.PAD, Op.QCONV2D]
    assert all(n.attr("padding") == (0, 0, 0, 0) for n in legal.nodes if n.op is Op.QCONV2D)
    cm = tessel.compile(model, calib[0], calibration_data=calib)
    assert not cm.program.metadata.get("host_ops"), cm.program.metadata.get("host_ops")
    for (x,) in calib[:2] + [(5 * torch.randn(1, 8, 64),)]:
        for got, want in zip(cm.run(x), qm.run(x), strict=True):
            assert np.array_equal(got, want)


def test_graph_without_overpadded_convs_is_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)).eval()
    x = torch.randn(1, 3, 8, 8)
    qm = tessel.quantize(model, (x,), calibration_data=[(x,)])
    assert legalize(qm.graph) is qm.graph
