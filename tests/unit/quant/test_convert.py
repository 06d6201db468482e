"""tessel.quant.pt2e.convert: convert_pt2e's result (weights' quantize folded into int8
constants) without torchao's throw-away dequantize of every weight. Checked against
convert_pt2e itself on prepared copies of the same calibrated modules: the same generated
code, node names and ops, the same constants (names, dtypes, values) and the same outputs;
with batch norms that no conv feeds, whose QAT conv / batch-norm fold it does without tracing
the patterns. And tessel.quant.pt2e.convert_qat (torchao's QAT fold looking only for the conv
kinds present) against torchao's convert_pt2e on a trained QAT module with two of them."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from torchao.quantization.pt2e import move_exported_model_to_eval
from torchao.quantization.pt2e.qat_utils import _is_bn_node
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from tessel.quant.config import MINILM_CONFIG
from tessel.quant.pt2e import _attr, calibrate, convert, convert_qat, export_for_quant, prepare_qat
from tessel.quant.quantizer import TesselQuantizer


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.relu6(self.dw(y)) + y
        return self.fc(y.mean((2, 3)))


class Attention(nn.Module):  # linear weights, a transposed weight, matmul, softmax, layer norm
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Parameter(torch.randn(16, 16))
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        return self.norm(x + (a @ v) @ self.proj.t())


class LooseBatchNorm(nn.Module):  # batch norms no conv feeds: left to convert_pt2e
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 6)
        self.bn1 = nn.BatchNorm1d(6)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(4)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.bn1(self.fc(x.mean(1).flatten(1)[:, :12]))
        y = self.conv(x)
        b = self.bn2(torch.nn.functional.gelu(y)) + y  # the conv has two users
        return a, b


class QatConvBatchNorm(nn.Module):  # conv1d and conv2d kinds, biased and bias-less, to fold
    def __init__(self) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(3, 4, 3, bias=False)
        self.bn1 = nn.BatchNorm1d(4)
        self.conv2d = nn.Conv2d(3, 4, 2)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bn1(self.conv1d(x.flatten(2))), torch.relu(self.bn2(self.conv2d(x)))


def _constants(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    return {n.target: _attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}


@pytest.mark.parametrize("model_cls,shape,config", [
    (ConvNet, (1, 3, 8, 8), None),
    pytest.param(LooseBatchNorm, (2, 3, 4, 4), None, marks=pytest.mark.slow),  # folds batch norms: long
    (Attention, (1, 6, 16), None),
    (Attention, (1, 6, 16), MINILM_CONFIG),  # int16 softmax / layer norm / add
])
def test_convert_equals_convert_pt2e(model_cls, shape, config) -> None:
    torch.manual_seed(0)
    model = model_cls().eval()
    example = (torch.randn(*shape),)
    prepared = prepare_pt2e(export_for_quant(model, example), TesselQuantizer(config))
    g = torch.Generator().manual_seed(1)
    calibrate(prepared, [(torch.randn(*shape, generator=g),) for _ in range(5)], example)
    want = convert_pt2e(copy.deepcopy(prepared))
    got = convert(copy.deepcopy(prepared))
    assert got.code == want.code
    assert [(n.op, n.name, n.target) for n in got.graph.nodes] == \
        [(n.op, n.name, n.target) for n in want.graph.nodes]
    folded = [n for n in want.graph.nodes if n.op == "get_attr" and
              _attr(want, n.target).dtype == torch.int8]
    assert folded  # the weights were folded to int8 (the case the shortcut is about)
    cw, cg = _constants(want), _constants(got)
    assert cw.keys() == cg.keys()
    for name, t in cw.items():
        assert cg[name].dtype == t.dtype and torch.equal(cg[name], t), name
    with torch.no_grad():
        outs = [got(*example), want(*example)]
    for a, b in zip(*[o if isinstance(o, tuple) else (o,) for o in outs], strict=True):
        assert torch.equal(a, b)


def _assert_same_graph(got: torch.fx.GraphModule, want: torch.fx.GraphModule, example) -> None:
    assert got.code == want.code
    assert [(n.op, n.name, n.target) for n in got.graph.nodes] == \
        [(n.op, n.name, n.target) for n in want.graph.nodes]
    cw, cg = _constants(want), _constants(got)
    assert cw.keys() == cg.keys()
    for name, t in cw.items():
        assert cg[name].dtype == t.dtype and torch.equal(cg[name], t), name
    with torch.no_grad():
        outs = [got(*example), want(*example)]
    for a, b in zip(*[o if isinstance(o, tuple) else (o,) for o in outs], strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow  # torchao's fold traces its 96 patterns: about 14 CPU seconds
def test_convert_qat_equals_convert_pt2e() -> None:
    torch.manual_seed(0)
    example = (torch.randn(1, 3, 5, 5),)
    prepared = prepare_qat(QatConvBatchNorm(), example)
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-2)
    for _ in range(3):  # trained: batch-norm statistics and weights away from their init
        a, b = prepared(*example)
        opt.zero_grad()
        (a.sum() + b.sum()).backward()
        opt.step()
    want = copy.deepcopy(prepared)
    move_exported_model_to_eval(want)
    want = convert_pt2e(want)
    got = convert_qat(copy.deepcopy(prepared))
    assert not any(_is_bn_node(n) for n in want.graph.nodes)  # both folded into their conv
    _assert_same_graph(got, want, example)
