"""Pass behaviour beyond the golden files: random graphs through the layout pass, pass
parameters, fixed points, and every pass preserving the computed function."""

from __future__ import annotations

import numpy as np
import pytest
from pass_graphs import assert_same_function, attention_block, mobilenet_like, random_cnn

from tessel.ir import DType, GraphBuilder, Layout, Op, TensorType, verify
from tessel.passes import PASSES, FoldConstants, ToNHWC, run_pipeline


@pytest.mark.parametrize("seed", range(24))
def test_to_nhwc_on_random_graphs(seed: int) -> None:
    g = random_cnn(seed)
    out = verify(ToNHWC().apply(g))
    assert_same_function(g, out, seed=seed)
    layout_ops = (Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D, Op.UPSAMPLE_NEAREST)
    assert all(n.attr("layout") is Layout.NHWC for n in out.nodes if n.op in layout_ops)
    assert ToNHWC().apply(out) is out  # nothing left to convert


def test_to_nhwc_cancels_round_trip_transposes() -> None:
    rng = np.random.default_rng(0)
    b = GraphBuilder("round_trip")
    x = b.input("x", TensorType((1, 2, 4, 4), DType.F32, Layout.NCHW))
    w = b.constant(rng.normal(size=(2, 2, 1, 1)).astype(np.float32), "w")
    y = b.add(Op.CONV2D, (x, w))
    y = b.add(Op.TRANSPOSE, (y,), {"perm": (0, 2, 3, 1)})
    y = b.add(Op.TANH, (y,))
    y = b.add(Op.TRANSPOSE, (y,), {"perm": (0, 3, 1, 2)})
    g = b.build([b.add(Op.CONV2D, (y, w))])
    out = ToNHWC().apply(g)
    transposes = [n for n in out.nodes if n.op is Op.TRANSPOSE]
    assert [t.inputs[0] for t in transposes] == ["x", out.nodes[-2].name]  # input and output only
    assert_same_function(g, out)


@pytest.mark.parametrize("name", sorted(PASSES))
@pytest.mark.parametrize("make", [mobilenet_like, attention_block], ids=["cnn", "attention"])
def test_every_pass_preserves_the_function(name: str, make) -> None:
    g = make()
    assert_same_function(g, run_pipeline(g, [name]))


def test_fold_batch_norm_folds_every_conv_bn() -> None:
    g = mobilenet_like(blocks=2)
    out = run_pipeline(g, ["fold_batch_norm"])
    assert sum(n.op is Op.BATCH_NORM for n in g.nodes) == 7
    assert not any(n.op is Op.BATCH_NORM for n in out.nodes)
    assert sum(n.op is Op.CONV2D for n in out.nodes) == 7


def test_fold_constants_growth_limit_is_a_parameter() -> None:
    b = GraphBuilder("grow")
    x = b.input("x", TensorType((64, 64), DType.F32))
    c = b.constant(np.float32([[2.0]]), "c")
    e = b.add(Op.EXPAND, (c,), {"shape": (64, 64)})
    g = b.build([b.add(Op.MUL, (x, e))])
    kept = FoldConstants(max_grown_elements=1000).apply(g)
    folded = FoldConstants().apply(g)
    assert any(n.op is Op.EXPAND for n in kept.nodes)
    assert not any(n.op is Op.EXPAND for n in folded.nodes)
    assert_same_function(g, folded)


def test_cse_merges_a_duplicated_branch() -> None:
    b = GraphBuilder("dup")
    x = b.input("x", TensorType((1, 2, 4, 4), DType.F32, Layout.NCHW))
    branches = []
    for _ in range(2):
        w = b.constant(np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1), "w")
        branches.append(b.add(Op.RELU, (b.add(Op.CONV2D, (x, w)),)))
    g = b.build([b.add(Op.ADD, tuple(branches))])
    out = run_pipeline(g, ["cse"])
    assert [n.op for n in out.nodes] == [Op.CONSTANT, Op.CONV2D, Op.RELU, Op.ADD]
    assert out.nodes[-1].inputs[0] == out.nodes[-1].inputs[1]
    assert_same_function(g, out)


def test_canonicalize_reaches_a_fixed_point_through_chains() -> None:
    b = GraphBuilder("chain")
    x = b.input("x", TensorType((8,), DType.F32))
    zero, six = b.constant(np.float32([0.0]), "z"), b.constant(np.float32([6.0]), "s")
    y = b.add(Op.MAXIMUM, (x, zero))                       # => clamp(0, inf) => relu
    y = b.add(Op.MINIMUM, (y, six))                        # => clamp(0, 6)
    y = b.add(Op.RESHAPE, (b.add(Op.RESHAPE, (y,), {"shape": (2, 4)}),), {"shape": (8,)})
    g = b.build([b.add(Op.MUL, (y, b.add(Op.SIGMOID, (y,))))])
    out = run_pipeline(g, ["canonicalize_activations"])
    assert [n.op for n in out.nodes] == [Op.CLAMP, Op.SILU]
    assert out.nodes[0].attr_map == {"min": 0.0, "max": 6.0}
    assert_same_function(g, out)
