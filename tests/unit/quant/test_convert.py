"""tessel.quant.pt2e.convert: convert_pt2e's result (weights' quantize folded into int8
constants) without torchao's throw-away dequantize of every weight. Checked against
convert_pt2e itself on prepared copies of the same calibrated modules: the same generated
code, node names and ops, the same constants (names, dtypes, values) and the same outputs;
with batch norms that no conv feeds, whose QAT conv / batch-norm fold it does without tracing
the patterns. And tessel.quant.pt2e.convert_qat (torchao's QAT fold looking only for the conv
kinds present) against convert_pt2e on a trained QAT module."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchao.quantization.pt2e import move_exported_model_to_eval, qat_utils
from torchao.quantization.pt2e.qat_utils import _is_bn_node
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from tessel.quant.config import MINILM_CONFIG
from tessel.quant.pt2e import (
    _CONV_KINDS,
    _attr,
    _fold_example_inputs,
    _merge_dequantize_pass,
    calibrate,
    convert,
    convert_qat,
    export_for_quant,
    prepare_qat,
)
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


class QatConvBatchNorm(nn.Module):  # conv2d kinds, bias-less and biased, to fold
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 2, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


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
    folded = [n for n in want.graph.nodes if n.op == "get_attr" and
              _attr(want, n.target).dtype == torch.int8]
    assert folded  # the weights were folded to int8 (the case the shortcut is about)
    _assert_same_graph(got, want, example)


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


def _trained_qat(example) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    prepared = prepare_qat(QatConvBatchNorm(), example)
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-2)
    for _ in range(3):  # trained: batch-norm statistics and weights away from their init
        opt.zero_grad()
        prepared(*example).sum().backward()
        opt.step()
    move_exported_model_to_eval(prepared)
    return prepared


def test_convert_qat_equals_convert_pt2e(monkeypatch) -> None:
    """convert_qat against convert_pt2e running torchao's own fold, whose per-kind pass
    (`_fold_conv_bn_qat_helper`) is, for the three kinds absent from the graph, the dequantize
    merge alone: the next test shows that pass equal to torchao's on a graph without its conv
    kind (all four of torchao's passes cost about 14 CPU seconds)."""
    example = (torch.randn(1, 3, 5, 5),)
    prepared = _trained_qat(example)
    got = convert_qat(copy.deepcopy(prepared))
    helper, passes = qat_utils._fold_conv_bn_qat_helper, []

    def helper_of_present_kinds(m, conv_fn, example_inputs, is_cuda):
        passes.append((conv_fn, [tuple(t.shape) for t in example_inputs]))
        if conv_fn is F.conv2d:
            return helper(m, conv_fn, example_inputs, is_cuda=is_cuda)
        _merge_dequantize_pass(m)
        return m

    monkeypatch.setattr(qat_utils, "_fold_conv_bn_qat_helper", helper_of_present_kinds)
    want = convert_pt2e(copy.deepcopy(prepared))
    assert [fn for fn, _ in passes] == [F.conv1d, F.conv2d, F.conv_transpose1d,
                                        F.conv_transpose2d]
    assert [shapes for _, shapes in passes] == [
        [tuple(t.shape) for t in _fold_example_inputs(d)] for _, d, _ in _CONV_KINDS]
    assert not any(_is_bn_node(n) for n in want.graph.nodes)  # both folded into their conv
    _assert_same_graph(got, want, example)


def test_an_absent_conv_kinds_fold_pass_only_merges_dequantize_nodes() -> None:
    """torchao's fold pass for conv1d (its 24 patterns traced) on a graph without one changes
    it as `_merge_dequantize_pass` does."""
    example = (torch.randn(1, 3, 5, 5),)
    prepared = _trained_qat(example)
    want = qat_utils._fold_conv_bn_qat_helper(copy.deepcopy(prepared), F.conv1d,
                                              _fold_example_inputs(1), is_cuda=False)
    got = copy.deepcopy(prepared)
    _merge_dequantize_pass(got)
    _assert_same_graph(got, want, example)
