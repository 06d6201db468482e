"""Batched calibration (tessel.quant.pt2e.calibrate): samples go through the observed model
several at a time when that observes what one at a time would, and one by one otherwise."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torchao.quantization.pt2e import ObserverBase
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

from tessel.errors import TesselConfigError
from tessel.quant.config import ObserverKind, QuantConfig
from tessel.quant.pt2e import calibrate, export_for_quant
from tessel.quant.quantizer import TesselQuantizer


class ConvNet(nn.Module):  # runs a batch as independent samples
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean((2, 3))
        return self.fc(y)


class BatchMixer(nn.Module):  # mixes the batch: a batched run would observe other values
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.out = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return self.out(y.sum(0, keepdim=True) * 3.0 + y)  # `out` observes the mixture


class FixedBatch(nn.Module):  # reshapes with the example's batch size burnt in
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.reshape(1, 12))


def _prepared(model_cls, shape, config: QuantConfig | None = None):
    torch.manual_seed(0)  # same weights for every call
    model = model_cls().eval()
    example = (torch.randn(*shape),)
    return prepare_pt2e(export_for_quant(model, example), TesselQuantizer(config)), example


def _samples(shape, n: int = 19):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(*shape, generator=g),) for _ in range(n)]


def _ranges(prepared) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {n: (m.min_val.clone(), m.max_val.clone()) for n, m in prepared.named_modules()
            if isinstance(m, ObserverBase) and hasattr(m, "min_val")}


def _forwards(prepared) -> list[int]:
    """Batch size of every forward of `prepared` (a pre-hook records it)."""
    sizes: list[int] = []
    prepared.register_forward_pre_hook(lambda _m, args: sizes.append(int(args[0].shape[0])))
    return sizes


def _calibrated(model_cls, shape, batch: int, config: QuantConfig | None = None):
    prepared, example = _prepared(model_cls, shape, config)
    sizes = _forwards(prepared)
    count = calibrate(prepared, _samples(shape), example, batch=batch)
    return prepared, sizes, count


def test_batches_when_exact_and_observes_the_same_ranges() -> None:
    one, sizes1, n1 = _calibrated(ConvNet, (1, 3, 8, 8), batch=1)
    many, sizes8, n8 = _calibrated(ConvNet, (1, 3, 8, 8), batch=8)
    assert n1 == n8 == 19
    assert sizes1 == [1] * 19
    # the first sample alone, then a trial batch that repeats it, then the rest in batches
    assert sizes8 == [1, 8, 8, 3]
    r1, r8 = _ranges(one), _ranges(many)
    assert r1.keys() == r8.keys() and r1
    for name in r1:  # up to float rounding of the batched kernels
        for a, b in zip(r1[name], r8[name], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("model_cls,shape", [(BatchMixer, (1, 6)), (FixedBatch, (1, 12))])
def test_falls_back_to_one_by_one_with_observers_restored(model_cls, shape) -> None:
    one, _, _ = _calibrated(model_cls, shape, batch=1)
    many, sizes, count = _calibrated(model_cls, shape, batch=8)
    assert count == 19
    # first sample, the refused trial batch (or none if it raised early), then 18 one by one
    assert sizes[0] == 1 and sizes[-18:] == [1] * 18 and len(sizes) in (19, 20)
    r1, r8 = _ranges(one), _ranges(many)
    for name in r1:  # the trial batch left nothing behind: exactly the one-by-one ranges
        for a, b in zip(r1[name], r8[name], strict=True):
            assert torch.equal(a, b), name


def test_percentile_observer_is_never_batched() -> None:
    config = QuantConfig(observer=ObserverKind.PERCENTILE)
    _, sizes, _ = _calibrated(ConvNet, (1, 3, 8, 8), batch=8, config=config)
    assert sizes == [1] * 19


def test_sample_with_another_shape_is_a_clear_error() -> None:
    prepared, example = _prepared(ConvNet, (1, 3, 8, 8))
    samples = _samples((1, 3, 8, 8), 4) + [(torch.randn(1, 3, 16, 16),)]
    with pytest.raises(TesselConfigError, match=r"calibration sample 4, input 0: shape "
                                                 r"\[1, 3, 16, 16\].*example input is shape "
                                                 r"\[1, 3, 8, 8\]"):
        calibrate(prepared, samples, example)


def _one_by_one(prepared, samples) -> None:
    with torch.no_grad():
        for s in samples:
            prepared(*s)


@pytest.mark.parametrize("model_cls,shape", [(ConvNet, (1, 3, 8, 8)), (FixedBatch, (1, 12))])
def test_weights_observed_once_gives_the_same_ranges_and_restores_the_observers(
        model_cls, shape) -> None:
    plain, _ = _prepared(model_cls, shape)
    _one_by_one(plain, _samples(shape))  # every observer sees every sample
    fast, example = _prepared(model_cls, shape)
    before = {n: type(m) for n, m in fast.named_modules()}
    calls = []
    weights = [m for m in fast.modules() if type(m).__name__ == "PerChannelMinMaxObserver"]
    assert weights
    for m in weights:
        m.register_forward_hook(lambda *_: calls.append(1))
    calibrate(fast, _samples(shape), example, batch=1)
    assert len(calls) == len(weights)  # each weight observed by the first sample only
    assert {n: type(m) for n, m in fast.named_modules()} == before  # observers put back
    r1, r2 = _ranges(plain), _ranges(fast)
    assert r1.keys() == r2.keys() and r1
    for name in r1:
        for a, b in zip(r1[name], r2[name], strict=True):
            assert torch.equal(a, b), name


def test_a_weight_changed_in_place_is_observed_again() -> None:
    from tessel.quant.pt2e import _attr, _weights_observed_once

    prepared, example = _prepared(ConvNet, (1, 3, 8, 8))
    node = next(n for n in prepared.graph.nodes if n.op == "call_module" and
                type(prepared.get_submodule(n.target)).__name__ == "PerChannelMinMaxObserver")
    observer, weight = prepared.get_submodule(node.target), _attr(prepared, node.args[0].target)
    with torch.no_grad():
        prepared(*example)
        old_max = observer.max_val.clone()
        with _weights_observed_once(prepared):
            prepared(*example)
            assert torch.equal(observer.max_val, old_max)
            weight.mul_(3.0)  # the version counter moves: the wrapper calls the observer
            prepared(*example)
    assert torch.all(observer.max_val >= old_max) and not torch.equal(observer.max_val, old_max)


class _Lstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(10, 16, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


def test_a_recurrent_kernel_in_the_graph_is_never_handed_a_batch() -> None:
    """calibrate() on a graph that keeps its recurrent kernel (torch.export's own graph, not
    export_for_quant's unrolled one): never a batch. The kernel trusts its batch-1 state's size
    (a batch through it corrupts memory), so the pre-hook refuses any batch before it runs
    (calibrate then falls back to one by one) after recording its size. tessel.quantize's
    path, recurrent models calibrated on several samples, is tests/e2e/test_recurrent.py."""
    from tessel.quant.pt2e import RECURRENT_KERNELS

    torch.manual_seed(0)
    example = (torch.randn(1, 4, 10),)
    graph = torch.export.export(_Lstm().eval(), example, strict=False).module()
    assert any(n.target in RECURRENT_KERNELS for n in graph.graph.nodes)
    prepared = prepare_pt2e(graph, TesselQuantizer())
    sizes: list[int] = []

    def record(_module, args) -> None:
        sizes.append(int(args[0].shape[0]))
        if sizes[-1] != 1:
            raise RuntimeError("a batch reached the recurrent kernel")

    prepared.register_forward_pre_hook(record)
    assert calibrate(prepared, _samples((1, 4, 10), 9), example) == 9
    assert sizes == [1] * 9
