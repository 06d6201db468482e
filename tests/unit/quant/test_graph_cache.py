"""The quantised-graph cache: a hit returns the same graph without quantising; anything that
changes the graph (weights, calibration bytes, config) misses; bad entries are recomputed;
TESSEL_CACHE_DIR=off writes nothing; `tessel estimate` reuses it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tessel.quant.api as api
from tessel.ir import print_graph
from tessel.quant.cache import cached_graph, default_dir
from tessel.quant.config import QuantConfig


def _net(seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1)).eval()
    return net, (torch.randn(1, 3, 6, 6),)


def _calib(seed: int = 1) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 3, 6, 6, generator=g),) for _ in range(3)]


def _no_quantize(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("quantised although the graph is cached")
    monkeypatch.setattr(api, "quantize", refuse)


def test_hit_returns_the_same_graph_without_quantising(tmp_path, monkeypatch):
    net, x = _net()
    first = cached_graph("net", net, x, _calib(), QuantConfig(), 3, tmp_path)
    assert len(list(tmp_path.glob("*.tir"))) == 1
    _no_quantize(monkeypatch)
    again = cached_graph("net", net, x, _calib(), QuantConfig(), 3, tmp_path)
    assert print_graph(again) == print_graph(first)


@pytest.mark.parametrize("change", ["weights", "calibration", "samples", "config"])
def test_what_changes_the_graph_misses(tmp_path, change):
    net, x = _net()
    cached_graph("net", net, x, _calib(), QuantConfig(), 3, tmp_path)
    calib, samples, config = _calib(), 3, QuantConfig()
    if change == "weights":
        with torch.no_grad():
            net[0].weight[0, 0, 0, 0] += 0.5
    elif change == "calibration":
        calib = _calib(seed=2)
    elif change == "samples":
        samples = 2
    else:
        config = QuantConfig(share_residual_qparams=True)
    cached_graph("net", net, x, calib, config, samples, tmp_path)
    assert len(list(tmp_path.glob("*.tir"))) == 2


def test_a_cut_entry_is_recomputed(tmp_path):
    net, x = _net()
    good = print_graph(cached_graph("net", net, x, _calib(), QuantConfig(), 3, tmp_path))
    (entry,) = tmp_path.glob("*.tir")
    entry.write_text(good[: len(good) // 2])
    assert print_graph(cached_graph("net", net, x, _calib(), QuantConfig(), 3, tmp_path)) == good
    assert entry.read_text() == good


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSEL_CACHE_DIR", "off")
    assert default_dir() is None
    monkeypatch.chdir(tmp_path)
    net, x = _net()
    cached_graph("net", net, x, _calib(), QuantConfig(), 3)
    assert not list(tmp_path.rglob("*.tir"))


def test_estimate_cli_reuses_the_cache(tmp_path, monkeypatch, capsys):
    from tessel.cli import main

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    assert main(["estimate", "digits_cnn", "--calibration", "2", "--json"]) == 0
    first = capsys.readouterr().out
    assert len(list(tmp_path.glob("*.tir"))) == 1
    _no_quantize(monkeypatch)
    assert main(["estimate", "digits_cnn", "--calibration", "2", "--json"]) == 0
    assert capsys.readouterr().out == first
    assert main(["estimate", "digits_cnn", "--calibration", "2", "--no-cache"]) == 3
    assert "quantised although the graph is cached" in capsys.readouterr().err
