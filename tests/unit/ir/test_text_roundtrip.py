"""print -> parse -> print is the identity; malformed text gives line and column."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.errors import TesselParseError
from tessel.ir import (
    DType,
    GraphBuilder,
    Layout,
    Op,
    QuantParams,
    SourceLoc,
    TensorType,
    parse_graph,
    print_graph,
    verify,
)


def _sample_graph() -> GraphBuilder:
    b = GraphBuilder("sample")
    x = b.input("x", TensorType((1, 3, 8, 8), DType.F32))
    w = b.constant(np.linspace(-1, 1, 4 * 3 * 9, dtype=np.float32).reshape(4, 3, 3, 3), "w")
    bias = b.constant(np.array([0.1, -0.2, 1e-30, 3.4028235e38], np.float32), "b")
    loc = SourceLoc("features.0", "models/net.py", 42)
    c = b.add(Op.CONV2D, [x, w, bias], {"padding": (1, 1, 1, 1)}, name="conv", loc=loc)
    r = b.add(Op.CLAMP, [c], {"min": 0.0, "max": 6.0})
    m = b.add(Op.MEAN, [r], {"axes": (2, 3), "keepdim": False})
    return b, m


def test_roundtrip_sample_graph():
    b, m = _sample_graph()
    g = verify(b.build([m]))
    text = print_graph(g)
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    assert g2.nodes[2].loc == SourceLoc("features.0", "models/net.py", 42)
    np.testing.assert_array_equal(g2.constant_value("w"), g.constant_value("w"))
    assert g2.constant_value("b")[3] == np.float32(3.4028235e38)


def test_quantised_and_layout_types_roundtrip():
    per_tensor = TensorType((1, 4, 4, 8), DType.I8, Layout.NHWC, QuantParams((0.0235,), (-3,)))
    per_chan = TensorType((2, 3), DType.I8, quant=QuantParams((0.5, 1e-7), (0, 0), axis=0))
    b = GraphBuilder("q")
    x = b.input("x", per_tensor)
    y = b.input("y", per_chan)
    g = b.build([x, y])
    text = print_graph(g)
    assert "tensor<1x4x4x8xi8, nhwc, q(0.0235, -3)>" in text
    assert "q([0.5, 1e-07], [0, 0], axis=0)" in text
    assert parse_graph(text).inputs == g.inputs


_floats = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(_floats, min_size=1, max_size=40), lo=_floats, hi=_floats)
def test_roundtrip_is_exact_for_any_float(values, lo, hi):
    b = GraphBuilder("g")
    x = b.input("x", TensorType((len(values),), DType.F32))
    c = b.constant(np.array(values, np.float32), "c")
    s = b.add(Op.ADD, [x, c])
    out = b.add(Op.CLAMP, [s], {"min": float(np.float32(lo)), "max": float(np.float32(hi))})
    g = b.build([out])
    text = print_graph(g)
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    np.testing.assert_array_equal(g2.constant_value("c"), np.array(values, np.float32))


@pytest.mark.parametrize("text, line, col, what", [
    ("graph @g(%x: tensor<2xf32>) {\n  %y = frobnicate(%x) : tensor<2xf32>\n  return %y\n}\n",
     2, 8, "unknown op 'frobnicate'"),
    ("graph @g(%x: tensor<2xf32>) {\n  %y = relu(%x) : tensor<2xf99>\n  return %y\n}\n",
     2, 26, "dims and dtype"),
    ("graph @g(%x: tensor<2xf32>) {\n  %y = clamp(%x) {lo = 1.0} : tensor<2xf32>\n"
     "  return %y\n}\n", 2, 19, "no attribute 'lo'"),
    ("graph @g(%x: tensor<2xf32>) {\n  %y = softmax(%x) {axis = 1.5} : tensor<2xf32>\n"
     "  return %y\n}\n", 2, 28, "expected int"),
    ("graph @g(%x: tensor<2xf32>) {\n  %c = constant() {value = dense<[1.0]>} : tensor<2xf32>\n"
     "  return %c\n}\n", 2, 28, "has 1 values"),
    ("graph @g(%x: tensor<20xf32>) {\n  %c = constant() {value = dense_resource<c>} : "
     "tensor<20xf32>\n  return %c\n}\n", 2, 28, "not in the resources"),
    ("graph @g(%x: tensor<2xf32>) {\n  %y = relu(%x) : tensor<2xf32>\n  return %y\n",
     4, 1, "expected '}'"),
    ("graph @g(%x: tensor<2xf32>) {\n  %y = relu(%x) : tensor<2xf32> loc(\"m\" at \"f.py\":)\n"
     "  return %y\n}\n", 2, 51, "expected a number"),
])
def test_parse_errors_have_line_and_column(text, line, col, what):
    with pytest.raises(TesselParseError) as err:
        parse_graph(text, source="t.tir")
    assert (err.value.line, err.value.column) == (line, col), str(err.value)
    assert what in str(err.value)
    assert str(err.value).startswith(f"t.tir:{line}:{col}:")


def test_elided_text_is_readable_but_refuses_to_parse():
    b, m = _sample_graph()
    text = print_graph(b.build([m]), elide_constants=True)
    assert "dense_elided" in text and "resources" not in text
    with pytest.raises(TesselParseError, match="elided"):
        parse_graph(text)
