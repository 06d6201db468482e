"""Outputs are named after the model's: dict keys and named-tuple fields, the variables
forward returns, a model file's own names; output_0.. otherwise. The IR rename keeps every
read and the graph valid; messages lead with the layer's module path."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
from torch import nn

from tessel.frontend.output_names import output_names
from tessel.ir import Graph, GraphBuilder, Op, SourceLoc, TensorType, run_graph, verify
from tessel.ir.types import DType

X = (torch.randn(1, 3),)
Pair = namedtuple("Pair", "mean spread")


class Returns(nn.Module):
    def forward(self, x):
        logits = x * 2
        probs = torch.softmax(logits, -1)
        return logits, probs


class Passthrough(nn.Module):
    def forward(self, x):
        x = x + 1
        return x  # an argument's name says nothing: output_0


class Branches(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            a = x + 1
            return a
        b = x - 1
        return b


class Keys(nn.Module):
    def forward(self, x):
        return {"scores": x + 1, "extra": {"boxes": (x * 2, x * 3)}}


class Fields(nn.Module):
    def forward(self, x):
        return Pair(x.mean(), x.std())


@pytest.mark.parametrize("model, names", [
    (Returns(), ["logits", "probs"]), (Passthrough(), ["output_0"]),
    (Branches(), ["output_0"]), (Keys(), ["scores", "extra.boxes.0", "extra.boxes.1"]),
    (Fields(), ["mean", "spread"]),
])
def test_names_of_torch_outputs(model, names):
    assert output_names(model.eval(), X, len(names)) == names


def test_a_count_that_does_not_match_falls_back_to_numbered_names():
    assert output_names(Returns().eval(), X, 3) == ["output_0", "output_1", "output_2"]
    ep = torch.export.export(Returns().eval(), X)  # export keeps no variable names
    assert output_names(ep, X, 2) == ["output_0", "output_1"]
    keys = torch.export.export(Keys().eval(), X)  # but the output structure, with its keys
    assert output_names(keys, X, 3) == ["scores", "extra.boxes.0", "extra.boxes.1"]


def _graph() -> Graph:
    b = GraphBuilder("g")
    x = b.input("x", TensorType((2,), DType.F32))
    y = b.add(Op.RELU, [x], loc=SourceLoc("block.act", "m.py", 3))
    z = b.add(Op.RELU, [y])
    return b.build([y, z])


def test_rename_outputs_keeps_every_read_and_the_values():
    g = _graph()
    renamed = verify(g.with_output_names(["features", "x"]))  # "x" is taken: x_1
    assert renamed.outputs == ("features", "x_1")
    assert renamed.node_map["x_1"].inputs == ("features",)
    data = np.array([-1.0, 2.0], np.float32)
    for a, b in zip(run_graph(g, [data]), run_graph(renamed, [data]), strict=True):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError):
        g.with_output_names(["one"])


def test_messages_lead_with_the_module_path():
    g = _graph()
    first, second = g.nodes
    assert first.described() == f"block.act (%{first.name} = relu at m.py:3)"
    assert second.described() == f"%{second.name} = relu at <unknown>"
