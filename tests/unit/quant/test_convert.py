"""tessel.quant.pt2e.convert: convert_pt2e's result (weights' quantize folded into int8
constants) without torchao's throw-away dequantize of every weight. Checked against
convert_pt2e itself on prepared copies of the same calibrated modules: the same generated
code, node names and ops, the same constants (names, dtypes, values) and the same outputs;
with batch norms that no conv feeds, whose QAT conv / batch-norm fold it does without tracing
the patterns. And tessel.quant.pt2e.convert_qat (torchao's QAT fold looking only for the conv
kinds present) against convert_pt2e on a trained QAT module. torchao's results that take it
long to produce are read from tests/data/convert_pt2e_golden.json (GOLDEN below)."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torchao
from torchao.quantization.pt2e import move_exported_model_to_eval
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


# name: (model class, input shape, quantisation config)
CASES = {
    "conv_net": (ConvNet, (1, 3, 8, 8), None),
    "loose_batch_norm": (LooseBatchNorm, (2, 3, 4, 4), None),
    "attention": (Attention, (1, 6, 16), None),
    "attention_int16": (Attention, (1, 6, 16), MINILM_CONFIG),  # int16 softmax / layer norm / add
}
# torchao's results where producing them traces its QAT conv / batch-norm fold patterns (the
# cases whose loose batch norms convert_pt2e folds, the QAT module): 10 to 20 CPU seconds each,
# so tests/data/make_convert_pt2e_golden.py runs them with the pinned torch and torchao and the
# tests read them; the other cases run convert_pt2e here
GOLDEN = Path(__file__).resolve().parents[2] / "data" / "convert_pt2e_golden.json"
GOLDEN_CASES = ("loose_batch_norm",)
REGENERATE = "regenerate it: python tests/data/make_convert_pt2e_golden.py"


def prepared_case(name: str) -> tuple[torch.fx.GraphModule, tuple[torch.Tensor, ...]]:
    """The case's model exported, prepared with TesselQuantizer and calibrated; its example."""
    model_cls, shape, config = CASES[name]
    torch.manual_seed(0)
    model = model_cls().eval()
    example = (torch.randn(*shape),)
    prepared = prepare_pt2e(export_for_quant(model, example), TesselQuantizer(config))
    g = torch.Generator().manual_seed(1)
    calibrate(prepared, [(torch.randn(*shape, generator=g),) for _ in range(5)], example)
    return prepared, example


def qat_example() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 5, 5, generator=torch.Generator().manual_seed(2)),)


def trained_qat(example) -> torch.fx.GraphModule:
    """QatConvBatchNorm prepared for QAT, trained three steps and moved to eval."""
    torch.manual_seed(0)
    prepared = prepare_qat(QatConvBatchNorm(), example)
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-2)
    for _ in range(3):  # trained: batch-norm statistics and weights away from their init
        opt.zero_grad()
        prepared(*example).sum().backward()
        opt.step()
    move_exported_model_to_eval(prepared)
    return prepared


def versions() -> dict[str, str]:
    return {"torch": torch.__version__.split("+")[0], "torchao": torchao.__version__}


def fingerprint(gm: torch.fx.GraphModule) -> str:
    """sha256 of a module's code and state (weights, observers' ranges): what torchao reads."""
    h = hashlib.sha256(gm.code.encode())
    for name, t in gm.state_dict().items():
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _tensor(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype), "shape": list(t.shape), "values": t.flatten().tolist()}


def graph_record(gm: torch.fx.GraphModule, example) -> dict:
    """A module as JSON data: code, nodes, constants (exact values) and outputs on `example`."""
    with torch.no_grad():
        out = gm(*example)
    return {"code": gm.code,
            "nodes": [[n.op, n.name, str(n.target)] for n in gm.graph.nodes],
            "constants": {k: _tensor(t) for k, t in _constants(gm).items()},
            "outputs": [_tensor(t) for t in (out if isinstance(out, tuple) else (out,))]}


def _golden(name: str, prepared: torch.fx.GraphModule) -> dict:
    """The golden entry `name`, checked to be torchao's result on this very `prepared`."""
    entry = json.loads(GOLDEN.read_text())[name]
    assert entry["versions"] == versions(), f"{GOLDEN.name} is for other versions: {REGENERATE}"
    assert entry["prepared"] == fingerprint(prepared), \
        f"the prepared {name} is not the one {GOLDEN.name} was made from: {REGENERATE}"
    return entry


def _assert_same_record(got: dict, want: dict) -> None:
    assert got["code"] == want["code"]
    assert got["nodes"] == want["nodes"]
    assert got["constants"].keys() == want["constants"].keys()
    for name, t in want["constants"].items():
        assert got["constants"][name] == t, name  # dtype, shape and every value
    assert got["outputs"] == want["outputs"]


@pytest.mark.parametrize("name", CASES)
def test_convert_equals_convert_pt2e(name: str) -> None:
    prepared, example = prepared_case(name)
    if name in GOLDEN_CASES:
        want = _golden(name, prepared)["record"]
    else:
        want = graph_record(convert_pt2e(copy.deepcopy(prepared)), example)
    got = convert(copy.deepcopy(prepared))
    # the weights were folded to int8 (the case the shortcut is about)
    assert any(c["dtype"] == str(torch.int8) for c in want["constants"].values())
    _assert_same_record(graph_record(got, example), want)


@pytest.fixture(scope="module")
def qat() -> tuple[torch.fx.GraphModule, tuple[torch.Tensor]]:
    """The trained QAT module and its example, shared by the tests below (each converts or
    folds a copy)."""
    example = qat_example()
    return trained_qat(example), example


@pytest.mark.slow  # convert_qat traces torchao's conv2d fold patterns: about 17 CPU seconds
def test_convert_qat_equals_convert_pt2e(qat) -> None:
    """convert_qat against torchao's convert_pt2e (its fold pass for each of the four conv
    kinds, `_fold_conv_bn_qat_helper`, tracing the patterns of all four), which called that
    pass with the example inputs `_fold_example_inputs` makes for each kind."""
    prepared, example = qat
    want = _golden("qat", prepared)
    got = convert_qat(copy.deepcopy(prepared))
    assert want["passes"] == [[fn.__name__, [list(t.shape) for t in _fold_example_inputs(d)]]
                              for fn, d, _ in _CONV_KINDS]
    assert not any("batch_norm" in target for _, _, target in want["record"]["nodes"])  # folded
    _assert_same_record(graph_record(got, example), want["record"])


def test_an_absent_conv_kinds_fold_pass_only_merges_dequantize_nodes(qat) -> None:
    """torchao's fold pass for conv1d (its 24 patterns traced) on a graph without one changed
    it as `_merge_dequantize_pass` does."""
    prepared, example = qat
    want = _golden("qat_conv1d_fold_pass", prepared)["record"]
    got = copy.deepcopy(prepared)
    _merge_dequantize_pass(got)
    _assert_same_record(graph_record(got, example), want)
