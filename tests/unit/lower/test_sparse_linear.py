"""2:4 sparse linear layers: on a target with sparse.enabled a qlinear whose weights are 2:4
along the reduction runs as a 1x1 qconv2d on CONV's sparse weights (lower/legalize.py),
bit-exact with the golden model of the original graph, with the estimate equal to the
simulation per layer; a target without sparsity, or weights that are not 2:4, keep the
qlinear."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, run_graph, verify
from tessel.isa import Opcode
from tessel.isa import fixedpoint as fp
from tessel.isa.instrs.matrix import WeightType
from tessel.lower.legalize import legalize
from tessel.quant.golden import GOLDEN_KERNELS

Q = QuantParams((0.05,), (3,))
SPARSE = load_preset("tnpu-s").with_param("sparse.enabled", True)


def _pruned(rng: np.random.Generator, n: int, k: int, bits: int) -> np.ndarray:
    """[n, k] weights with two of every four along k zeroed (some groups keep fewer)."""
    hi = 7 if bits == 4 else 127
    w = rng.integers(-hi, hi + 1, (n, k // 4, 4))
    order = np.argsort(rng.random((n, k // 4, 4)), axis=2)
    np.put_along_axis(w, order[..., :2], 0, axis=2)
    return w.reshape(n, k).astype(np.int8)


def linear_graph(rng: np.random.Generator, xshape: tuple[int, ...], n: int, bits: int,
                 w: np.ndarray | None = None):
    b = GraphBuilder("t")
    x = b.input("x", TensorType(xshape, DType.I8, Layout.ANY, Q))
    w = _pruned(rng, n, xshape[-1], bits) if w is None else w
    wtype = TensorType(w.shape, DType.I4 if bits == 4 else DType.I8)
    mult, sh = fp.quantize_multipliers(rng.uniform(0.0002, 0.003, n))
    names = [b.constant(w, "w", type_=wtype),
             b.constant(rng.integers(-999, 999, n).astype(np.int32), "b"),
             b.constant(mult.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    y = b.add(Op.QLINEAR, [x, *names], dict(in_zp=3, out_zp=-5, act_min=-100, act_max=127,
                                            dtype=DType.I8))
    return verify(b.build([y]))


def _conv_types(cm) -> list[WeightType]:
    return [WeightType(i.w_type) for q in cm.program.streams.values() for i in q
            if i.opcode is Opcode.CONV]


@settings(max_examples=8, deadline=None, derandomize=True)
@given(rows=st.integers(1, 3), m=st.integers(1, 40), groups=st.integers(1, 24),
       n=st.integers(1, 70), bits=st.sampled_from([8, 4]))
def test_sparse_qlinear_matches_golden(rows: int, m: int, groups: int, n: int, bits: int):
    rng = np.random.default_rng(rows * 1000 + m * 100 + groups * 10 + n + bits)
    xshape = (rows, m, 4 * groups)
    g = linear_graph(rng, xshape, n, bits)
    assert [nd.op for nd in legalize(g, SPARSE).nodes if not nd.is_constant] == [
        Op.RESHAPE, Op.QCONV2D, Op.RESHAPE]
    cm = compile_graph(g, SPARSE, name="t")
    x = rng.integers(-128, 128, xshape).astype(np.int8)
    golden = run_graph(g, {"x": x}, kernels=GOLDEN_KERNELS)[0]
    got, = cm.run(x)
    np.testing.assert_array_equal(got, golden)
    base = WeightType.I4 if bits == 4 else WeightType.I8
    assert set(_conv_types(cm)) <= {base, base.with_sparsity(True)}


@pytest.mark.parametrize("bits", [8, 4])
def test_sparse_qlinear_smaller_faster_estimate_exact(bits: int):
    rng = np.random.default_rng(bits)
    g = linear_graph(rng, (1, 50, 96), 70, bits)  # M, N: not multiples of the array
    cm = compile_graph(g, SPARSE, name="t")
    dense = compile_graph(g, load_preset("tnpu-s"), name="t")
    assert set(_conv_types(cm)) == {WeightType.I4_2_4 if bits == 4 else WeightType.I8_2_4}
    assert not _conv_types(dense)  # MATMUL
    assert len(cm.program.constants) < len(dense.program.constants)
    x = rng.integers(-128, 128, (1, 50, 96)).astype(np.int8)
    np.testing.assert_array_equal(cm.run(x)[0], dense.run(x)[0])
    (layer,), (dense_layer,) = cm.profile.layers, dense.profile.layers
    assert layer.cycles < dense_layer.cycles
    sim = {la.name: la.cycles for la in cm.profile.layers}
    est = {la.name: la.cycles for la in estimate_graph(g, SPARSE, name="t").layers}
    assert est == sim


def test_dense_weights_or_target_keep_the_qlinear():
    rng = np.random.default_rng(3)
    g = linear_graph(rng, (1, 8, 16), 8, 8)
    assert legalize(g, load_preset("tnpu-s")) is g  # no sparsity on the target
    w = _pruned(rng, 8, 16, 8)
    w[0, :3] = 5  # three non-zeros in one group: not 2:4
    dense = linear_graph(rng, (1, 8, 16), 8, 8, w)
    assert legalize(dense, SPARSE) is dense
