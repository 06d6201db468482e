"""Unsupported ops (one error names them all), host fallback, training-mode refusal, locations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import compare
from torch import nn

from tessel.errors import TesselError, TesselUnsupportedOpError
from tessel.frontend import import_model
from tessel.ir import Op, parse_graph, print_graph, run_graph, verify
from tessel.ir.host import run_host_node

THIS_FILE = Path(__file__).name


def _line_of(text: str) -> int:
    """1-based line number of the first line of this file containing `text`."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


class TwoUnsupported(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        c = torch.cumsum(y, dim=1)  # unsupported 1
        s = torch.sort(y, dim=-1).values  # unsupported 2 (multi-output)
        f = torch.flip(c, dims=[0])  # unsupported 3, fed by an unsupported op
        return (f + s).relu()


X = torch.randn(3, 6)


def test_every_unsupported_op_is_reported_once_with_its_line() -> None:
    with pytest.raises(TesselUnsupportedOpError) as info:
        import_model(TwoUnsupported().eval(), (X,))
    reported = info.value.unsupported
    names = [op for op, _ in reported]
    assert [n.split(" ")[0] for n in names] == ["aten.cumsum.default", "aten.sort.default",
                                                "aten.flip.default"], names
    for (op, where), marker in zip(reported, ("torch.cumsum(", "torch.sort(", "torch.flip("),
                                   strict=True):
        assert f"{THIS_FILE}:{_line_of(marker)}" in where, (op, where)
    message = str(info.value)
    assert "3 unsupported op(s)" in message and "aten.cumsum.default" in message
    assert "aten.flip.default" in message and "allow_host_ops" in message


def test_host_fallback_runs_the_unsupported_ops() -> None:
    model = TwoUnsupported().eval()
    graph = import_model(model, (X,), allow_host_ops=True)
    hosts = [n for n in graph.nodes if n.op is Op.HOST]
    assert sorted(n.attr("target") for n in hosts) == ["aten.cumsum.default", "aten.flip.default",
                                                       "aten.sort.default"]
    sort = next(n for n in hosts if n.attr("target") == "aten.sort.default")
    assert json.loads(sort.attr("args")) == {"args": [{"in": 0}], "kwargs": {}, "output": 0}
    assert all(n.loc.file.endswith(THIS_FILE) for n in hosts)
    compare(graph, model, (X,), "host fallback")
    text = print_graph(graph)
    assert print_graph(parse_graph(text)) == text
    verify(parse_graph(text))


class HostKinds(nn.Module):
    """Host ops with dtype/kwarg arguments, bool and integer results, a list of tensors."""

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> tuple:
        big = (x > 0.2).float() * x
        idx = torch.argmax(x, dim=1)
        stacked = torch.stack([x, big], dim=0)
        return big, idx + i, stacked.cumsum(0, dtype=torch.float32), torch.where(x > 0, x, -x)


def test_host_fallback_argument_encodings() -> None:
    model = HostKinds().eval()
    inputs = (X, torch.arange(3))
    graph = import_model(model, inputs, allow_host_ops=True)
    targets = {n.attr("target") for n in graph.nodes if n.op is Op.HOST}
    assert {"aten.gt.Scalar", "aten.argmax.default", "aten.where.self"} <= targets
    compare(graph, model, inputs, "host kinds")


def test_run_host_node_rejects_bad_args() -> None:
    graph = import_model(TwoUnsupported().eval(), (X,), allow_host_ops=True)
    node = next(n for n in graph.nodes if n.attr("target") == "aten.cumsum.default")
    x = np.ones((3, 6), np.float32)
    assert np.array_equal(run_host_node(node, [x]), np.cumsum(x, axis=1))
    with pytest.raises(TesselError, match="not valid JSON"):
        run_host_node(node.replace(attrs={"target": "aten.cumsum.default", "args": "{"}), [x])
    with pytest.raises(TesselError, match="operand 3"):
        bad = json.dumps({"args": [{"in": 3}, 1]})
        run_host_node(node.replace(attrs={"target": "aten.cumsum.default", "args": bad}), [x])
    with pytest.raises(TesselError, match="not a torch op"):
        run_host_node(node.replace(attrs={"target": "aten.no_such_op.default", "args": ""}), [x])


def test_training_mode_is_refused() -> None:
    model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5))
    with pytest.raises(TesselError, match=r"training mode.*model\.eval\(\)"):
        import_model(model, (X,))
    model.eval()
    model[1].train()  # one submodule left in training mode is enough to refuse
    with pytest.raises(TesselError, match="1 module"):
        import_model(model, (X,))


class Located(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return F.max_pool2d(y, 2) * 2.0  # located here


def test_every_node_has_a_source_location() -> None:
    graph = import_model(Located().eval(), (torch.randn(1, 3, 8, 8),))
    by_op = {n.op: n for n in graph.nodes}
    assert by_op[Op.CONV2D].loc.module == "block.0"
    assert by_op[Op.RELU].loc.module == "block.1"
    pool = by_op[Op.MAX_POOL2D].loc
    assert pool.module == "" and pool.file == f"tests/unit/frontend/{THIS_FILE}"
    assert pool.line == _line_of("# located here")
    assert by_op[Op.MUL].loc.line == pool.line
    assert all(n.loc for n in graph.nodes), [str(n) for n in graph.nodes if not n.loc]
    assert re.search(r'loc\("block\.0" at "tests/unit/frontend/test_frontend_fallback\.py":\d+\)',
                     print_graph(graph))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TesselError, match="tuple"):
        import_model(Located().eval(), torch.randn(1, 3, 8, 8))  # type: ignore[arg-type]
    with pytest.raises(TesselError, match="nn.Module"):
        import_model(lambda x: x, (X,))  # type: ignore[arg-type]


def test_unsupported_variant_of_a_mapped_op_is_reported() -> None:
    class Odd(nn.Module):
        def forward(self, x):
            return F.adaptive_avg_pool2d(x, 3) + 1, torch.div(x, 3, rounding_mode="floor")

    with pytest.raises(TesselUnsupportedOpError) as info:
        import_model(Odd().eval(), (torch.randn(1, 2, 7, 7),))
    ops = [op for op, _ in info.value.unsupported]
    assert len(ops) == 2 and "not an integer ratio" in ops[0] and "rounding_mode" in ops[1]
    graph = import_model(Odd().eval(), (torch.randn(1, 2, 7, 7),), allow_host_ops=True)
    compare(graph, Odd().eval(), (torch.randn(1, 2, 7, 7),), "odd")
    assert run_graph(graph, [np.ones((1, 2, 7, 7), np.float32)])[0].shape == (1, 2, 3, 3)


class Spectral(nn.Module):
    def forward(self, x):
        f = torch.fft.rfft(x)
        return f.abs().sum(-1, keepdim=True) + torch.fft.irfft(f * 0.5, n=x.shape[-1])


def test_complex_intermediates_become_host_regions() -> None:
    graph = import_model(Spectral().eval(), (X,), allow_host_ops=True)
    regions = [n for n in graph.nodes if n.op is Op.HOST and "+" in n.attr("target")]
    assert [r.attr("target") for r in regions] == [
        "aten._fft_r2c.default+aten.abs.default",
        "aten._fft_r2c.default+aten.mul.Tensor+aten._fft_c2r.default"]
    # every value the IR holds is typed: no complex value crosses a node boundary
    assert all(graph.type_of(i).dtype.value in ("f32", "i64") for n in graph.nodes
               for i in n.inputs)
    compare(graph, Spectral().eval(), (X,), "spectral regions")
    again = verify(parse_graph(print_graph(graph)))  # the region survives the text form
    x = X.numpy()
    np.testing.assert_array_equal(run_graph(again, [x])[0], run_graph(graph, [x])[0])


def test_complex_ops_without_host_fallback_are_reported() -> None:
    with pytest.raises(TesselUnsupportedOpError) as err:
        import_model(Spectral().eval(), (X,))
    assert "aten._fft_r2c.default (dtype torch.complex64" in str(err.value)
    assert "--host-fallback" in str(err.value)


def test_run_host_node_rejects_bad_regions() -> None:
    graph = import_model(Spectral().eval(), (X,), allow_host_ops=True)
    node = next(n for n in graph.nodes if n.op is Op.HOST and "+" in n.attr("target"))
    x = X.numpy()
    for region, match in (([], "non-empty list"), ([1], "non-empty list"),
                          ([{"target": "aten.abs.default", "args": [{"step": 0}]}], "step 0"),
                          ([{"target": "aten.abs.default", "args": [{"in": 2}]}], "operand 2"),
                          ([{"target": "aten.abs.default", "args": {"in": 0}}], "must be a list")):
        bad = node.replace(attrs={"target": node.attr("target"),
                                  "args": json.dumps({"region": region})})
        with pytest.raises(TesselError, match=match):
            run_host_node(bad, [x])
