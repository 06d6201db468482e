"""The verifier's and parser's messages: each tests/golden/invalid/*.tir is malformed and lists
the substrings its error must contain in `// ERROR:` lines (parse errors include line:column)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tessel.errors import TesselParseError, TesselVerifyError
from tessel.ir import DType, Graph, GraphBuilder, Op, TensorType, parse_graph, verify
from tessel.ir.graph import Node

INVALID = Path(__file__).resolve().parents[2] / "golden" / "invalid"
CASES = sorted(INVALID.glob("*.tir"))
_ERROR = re.compile(r"^//\s*ERROR:(.*)$", re.MULTILINE)


def _error_of(path: Path) -> Exception:
    text = path.read_text()
    with pytest.raises((TesselParseError, TesselVerifyError)) as info:
        verify(parse_graph(text, source=path.name))
    return info.value


def test_there_are_invalid_cases() -> None:
    assert len(CASES) >= 12


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_error_message(path: Path) -> None:
    expected = [e.strip() for e in _ERROR.findall(path.read_text())]
    assert expected, f"{path.name}: no // ERROR: lines"
    message = str(_error_of(path))
    for substring in expected:
        assert substring in message, f"{path.name}: {substring!r} not in:\n{message}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_parse_errors_carry_line_and_column(path: Path) -> None:
    exc = _error_of(path)
    if isinstance(exc, TesselParseError):
        assert str(exc).startswith(f"{path.name}:{exc.line}:{exc.column}: ")
        assert 1 <= exc.line <= len(path.read_text().splitlines())


def _graph_with(node: Node, x: str = "x") -> Graph:
    b = GraphBuilder("g")
    b.input(x, TensorType((4,), DType.F32))
    return Graph("g", tuple(b.build([x]).inputs), (node,), (node.name,))


def test_unknown_attribute_built_in_python_is_named() -> None:
    node = Node("y", Op.RELU, ("x",), (("alpha", 0.1),), TensorType((4,), DType.F32))
    with pytest.raises(TesselVerifyError, match=r"%y = relu: unknown attribute 'alpha'"):
        verify(_graph_with(node))


def test_attribute_of_wrong_kind_is_named() -> None:
    node = Node("y", Op.CLAMP, ("x",), (("max", 6.0), ("min", "zero")),
                TensorType((4,), DType.F32))
    with pytest.raises(TesselVerifyError, match=r"attribute 'min': expected float, got str"):
        verify(_graph_with(node))


def test_a_valid_graph_passes() -> None:
    b = GraphBuilder("ok")
    x = b.input("x", TensorType((2, 3), DType.F32))
    w = b.constant(np.ones((4, 3), np.float32), "w")
    g = b.build([b.add(Op.LINEAR, (x, w))])
    assert verify(g) is g
