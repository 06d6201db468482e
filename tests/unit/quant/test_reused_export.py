"""quant.pt2e.reused_export: quantising one model again inside the block starts from a copy of
its first export, gives the graph a fresh export gives, and exports again for other input
shapes or another model."""

from __future__ import annotations

import torch

from tessel.ir.printer import print_graph
from tessel.quant import pt2e
from tessel.quant.api import quantize


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 1)).eval()


def _samples(shape, n=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(shape, generator=g),) for _ in range(n)]


def test_a_reused_export_quantises_to_the_same_graph(monkeypatch):
    model, shape = _model(), (1, 3, 12, 12)
    fresh = print_graph(quantize(model, _samples(shape)[0], _samples(shape)).graph)
    exports = []
    real = pt2e._exported
    monkeypatch.setattr(pt2e, "_exported", lambda m, x: exports.append(m) or real(m, x))
    with pt2e.reused_export(model):
        graphs = [print_graph(quantize(model, _samples(shape)[0], _samples(shape)).graph)
                  for _ in range(3)]
        assert len(exports) == 1
        other = (1, 3, 16, 16)  # other shapes: exported again
        quantize(model, _samples(other)[0], _samples(other))
        assert len(exports) == 2
    assert graphs == [fresh] * 3
    quantize(model, _samples(shape)[0], _samples(shape))  # outside the block: no reuse
    assert len(exports) == 3 and not pt2e._REUSED
