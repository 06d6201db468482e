"""Every zoo model imports, verifies, matches torch eager in the float interpreter, and its IR
text round-trips (print -> parse -> print is the identity). One import per model."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import torch
from frontend_helpers import compare

from tessel.frontend import import_model
from tessel.ir import Graph, Op, parse_graph, print_graph, verify
from tessel.models import ZOO, load

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Imported:
    name: str
    model: torch.nn.Module
    inputs: tuple
    graph: Graph


@pytest.fixture(scope="module", params=sorted(ZOO))
def imported(request: pytest.FixtureRequest) -> Imported:
    model, inputs = load(request.param)
    start = time.perf_counter()
    graph = import_model(model, inputs, name=request.param)
    print(f"{request.param}: import {time.perf_counter() - start:.2f} s, {len(graph.nodes)} nodes")
    return Imported(request.param, model, inputs, graph)


def test_zoo_model_verifies(imported: Imported) -> None:
    verify(imported.graph)
    assert imported.graph.name == imported.name
    assert not any(n.op is Op.HOST for n in imported.graph.nodes)
    assert len(imported.graph.inputs) == len(imported.inputs)


def test_zoo_model_matches_torch(imported: Imported) -> None:
    ratio = compare(imported.graph, imported.model, imported.inputs, imported.name)
    assert ratio <= 1e-4


def test_zoo_model_text_round_trips(imported: Imported) -> None:
    text = print_graph(imported.graph)
    parsed = parse_graph(text)
    assert print_graph(parsed) == text
    assert parsed == imported.graph


def test_zoo_model_nodes_have_locations(imported: Imported) -> None:
    ops = [n for n in imported.graph.nodes if n.op is not Op.CONSTANT]
    assert ops and all(n.loc.file.startswith("src/tessel/models/") and n.loc.line > 0
                       for n in ops), [str(n.loc) for n in ops if not n.loc.file][:5]
    assert any(n.loc.module for n in ops)
