"""The layer norm's integer inverse square root in TOSA int32 operators (tessel.frontend.tosa_norm):
the reference model running the chain equals UNARY RSQRT on every edge of its range and on values
either side of each root's step."""

from __future__ import annotations

import numpy as np
import tosa_reference_model

from tessel.frontend.tosa_build import PROFILE, Builder
from tessel.frontend.tosa_norm import rsqrt
from tessel.frontend.tosa_schema import DType, TosaGraph
from tessel.isa.fields import UnaryOp
from tessel.ops import intops


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    edges = [-(2**31), -5, 0, 1, 2, 3, 4, 5, 15, 16, 17, 2**20 - 1, 2**20, 2**29, 2**30,
             2**30 + 1, 2**31 - 2, 2**31 - 1]
    squares = np.arange(1, 1500, dtype=np.int64) ** 2
    roots = rng.integers(1, 2**30, 1000, dtype=np.int64)
    steps = 2**60 // (roots * roots)  # the largest v whose root is still >= that root
    steps = steps[(steps > 0) & (steps < 2**31 - 1)]
    return np.concatenate([edges, rng.integers(0, 2**31 - 1, 500), squares - 1, squares,
                           squares + 1, steps, steps + 1]).astype(np.int32)


def test_rsqrt_chain_equals_unary_rsqrt_in_the_reference_model():
    v = _values()
    shape = (1, v.size, 1)
    b = Builder(None)
    b.tensor("v", shape, DType.INT32)
    out = rsqrt(b, "v", "r", "rsqrt")
    graph = TosaGraph(b.ops, b.tensors, b.shapes, ["v"], [out], PROFILE)
    got, status = tosa_reference_model.run(graph.write(), [v.reshape(shape)])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID
    want = intops.unary(v, UnaryOp.RSQRT, 30)
    np.testing.assert_array_equal(np.asarray(got[0]).reshape(-1), want)
