"""Every quantisable ATen op that docs/frontend.md lists lands on the NPU: after quantisation
each node between the boundary quantize / dequantize is an integer op the NPU runs
(`registry.npu_supported` with its shape rules), no host op. Ops the NPU has no integer
form for (pow, log, sqrt, div by a tensor, embedding, ...) are documented as host ops."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tessel.ir import Op
from tessel.ops.registry import npu_refusal
from tessel.quant.api import quantize


class Net(nn.Module):
    """conv2d / conv1d / linear / bn layers available to the op cases."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.conv1d = nn.Conv1d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        return self.fn(self, x)


# (ATen op(s) of docs/frontend.md, forward on x: [1, 4, 8, 8])
CASES = {
    "conv2d": lambda m, x: m.conv(x),
    "conv2d+batch_norm+relu6": lambda m, x: F.relu6(m.bn(m.conv(x))),
    "conv1d": lambda m, x: m.conv1d(x.flatten(2)[..., :16]),
    "linear": lambda m, x: m.fc(x),
    "matmul": lambda m, x: x @ x.transpose(-1, -2),
    "add/sub/rsub": lambda m, x: (x + m.conv(x)) - (1 - x),
    "mul/div by scalar": lambda m, x: (x * m.conv(x)) / 3.0,
    "relu/sigmoid/tanh": lambda m, x: torch.sigmoid(F.relu(x)) + torch.tanh(x),
    "hardswish/hardsigmoid/silu": lambda m, x: F.hardswish(x) + F.hardsigmoid(x) + F.silu(x),
    "gelu/exp": lambda m, x: F.gelu(x) + torch.exp(x * 0.1),
    "hardtanh/clamp": lambda m, x: F.hardtanh(m.conv(x), -1, 1) + x.clamp(-0.5, 0.5),
    "layer_norm": lambda m, x: m.ln(x),
    "softmax": lambda m, x: F.softmax(x, -1),
    "max_pool2d/avg_pool2d": lambda m, x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2),
    "adaptive_avg_pool2d/mean": lambda m, x: F.adaptive_avg_pool2d(x, 1) + x.mean((2, 3), True),
    "view/flatten/squeeze/unsqueeze": lambda m, x: m.conv(x).flatten(1).unsqueeze(0).squeeze(0),
    "permute/transpose": lambda m, x: m.conv(x).permute(0, 2, 3, 1).transpose(1, 2),
    "expand": lambda m, x: m.conv(x)[:, :1].expand(1, 4, 8, 8),
    "cat/slice/select/split": lambda m, x: torch.cat(
        [x[:, 1:3], x.select(1, 0).unsqueeze(1), *torch.split(x, 2, 1)[:1]], 1),
    "constant_pad_nd": lambda m, x: F.pad(m.conv(x), (1, 2, 0, 1)),
    "upsample_nearest2d": lambda m, x: F.interpolate(m.conv(x), scale_factor=2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_listed_op_runs_on_npu(case: str) -> None:
    torch.manual_seed(0)
    model = Net(CASES[case]).eval()
    g = torch.Generator().manual_seed(1)
    calib = [(torch.randn(1, 4, 8, 8, generator=g),) for _ in range(2)]
    qm = quantize(model, calib[0], calib, calibration_samples=2)
    assert not qm.host_ops, [str(h) for h in qm.host_ops]
    compute = [n for n in qm.graph.nodes
               if n.op not in (Op.CONSTANT, Op.QUANTIZE, Op.DEQUANTIZE)]
    assert compute
    refused = {n.name: npu_refusal(n, qm.graph) for n in compute}
    assert not any(refused.values()), refused
