"""lower_qdq on small models: only integer ops between the boundary quantize / dequantize,
host ops listed (never dropped), NHWC layout of qconv2d, golden model vs the QDQ reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tessel.ir import Layout, Op, run_graph, verify
from tessel.ops import DEFINITIONS, Trait
from tessel.quant.api import QuantizedModel, quantize
from tessel.quant.lower import host_ops

INTEGER_OPS = {op for op, d in DEFINITIONS.items() if d.has(Trait.INTEGER)}
BOUNDARY_OPS = {Op.QUANTIZE, Op.DEQUANTIZE}
MOVEMENT = {Op.RESHAPE, Op.TRANSPOSE, Op.CONCAT, Op.SLICE, Op.PAD, Op.EXPAND, Op.MAX_POOL2D,
            Op.UPSAMPLE_NEAREST, Op.CONSTANT}


class SmallNet(nn.Module):
    """conv-relu, depthwise conv-relu6, residual add, concat, max / avg pool, mean, linear,
    mul / div by constants, sigmoid, hardswish."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.c1(x))
        z = F.relu6(self.dw(y))
        r = y + self.c2(z)
        c = torch.cat([F.max_pool2d(r, 2), F.avg_pool2d(z, 2)], dim=1)
        c = F.hardswish(c * 0.5)
        p = c.mean(dim=(2, 3))
        return torch.sigmoid(self.fc(p / 3.0))


def _calib(shape, n: int = 4, seed: int = 0) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g),) for _ in range(n)]


@pytest.fixture(scope="module")
def small() -> tuple[nn.Module, QuantizedModel]:
    torch.manual_seed(0)
    model = SmallNet().eval()
    data = _calib((1, 3, 8, 8))
    return model, quantize(model, data[0], data, calibration_samples=4)


def test_only_integer_ops_between_boundaries(small) -> None:
    _, qm = small
    verify(qm.graph)
    ops = {n.op for n in qm.graph.nodes}
    allowed = INTEGER_OPS | BOUNDARY_OPS | MOVEMENT
    assert ops <= allowed, ops - allowed
    assert {Op.QCONV2D, Op.QLINEAR, Op.QADD, Op.QMUL, Op.LUT, Op.QAVG_POOL2D, Op.QMEAN} <= ops
    assert qm.host_ops == () and host_ops(qm.graph) == []
    boundary = [n for n in qm.graph.nodes if n.op in BOUNDARY_OPS]
    assert [n.op for n in boundary] == [Op.QUANTIZE, Op.DEQUANTIZE]  # input in, output out
    for n in qm.graph.nodes:
        if n.op not in BOUNDARY_OPS and n.op is not Op.CONSTANT:
            assert n.type.dtype.is_int and n.type.quant is not None, f"{n} is not quantised"


def test_conv_runs_nhwc_with_ohwi_weights(small) -> None:
    _, qm = small
    convs = [n for n in qm.graph.nodes if n.op is Op.QCONV2D]
    assert convs and all(n.attr("layout") is Layout.NHWC for n in convs)
    dw = next(n for n in convs if n.attr("groups") > 1)
    assert qm.graph.type_of(dw.inputs[1]).shape == (8, 3, 3, 1)  # OHWI


def test_golden_matches_qdq_reference_and_float(small) -> None:
    model, qm = small
    worst = 0.0
    for (x,) in _calib((1, 3, 8, 8), n=6, seed=1):
        gold = qm.run(x)[0]
        ref = run_graph(qm.qdq_graph, [x.numpy()])[0]
        worst = max(worst, float(np.abs(gold - ref).max()))
        with torch.no_grad():
            f = model(x).numpy()
        assert np.abs(gold - f).max() < 0.05
    assert worst <= 2 / 256  # sigmoid output step is 1/256: rounding differences only


class WithHost(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.cumsum(y, dim=1) + F.avg_pool2d(y.view(1, 1, 2, 3), 2, 1, padding=1,
                                                     count_include_pad=True).sum()


def test_unlowerable_ops_become_listed_host_ops() -> None:
    torch.manual_seed(0)
    model = WithHost().eval()
    data = [(torch.randn(1, 6),) for _ in range(3)]
    qm = quantize(model, data[0], data)
    hosts = {h.op for h in qm.host_ops}
    assert "aten.cumsum.default" in hosts and "avg_pool2d" in hosts
    for h in qm.host_ops:
        if h.op in ("aten.cumsum.default", "avg_pool2d"):
            assert "test_lower.py" in h.loc, h  # the user's source line
    assert any(n.op is Op.QLINEAR for n in qm.graph.nodes)
    x = data[1][0]
    with torch.no_grad():
        want = model(x).numpy()
    got = qm.run(x)[0]
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()
