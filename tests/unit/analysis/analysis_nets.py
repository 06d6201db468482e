"""Small compiled models for the report tests: two convolutions and a max pool (a layer
without MACs) from an integer graph, compiled in milliseconds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.runtime.compiled import CompiledModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_driver_e2e import two_conv_net  # noqa: E402 - the shared two-conv test net

LAYERS = ["c1", "c2", "pool"]


def conv_pool_net(rng: np.random.Generator) -> object:
    return two_conv_net(rng, pool=True)


def build(preset: str = "tnpu-s", name: str = "net") -> CompiledModel:
    return compile_graph(conv_pool_net(np.random.default_rng(0)), load_preset(preset), name=name)

