"""Shared by the codegen tests that build small quantised conv graphs."""

from __future__ import annotations

import numpy as np

from tessel.ir import GraphBuilder
from tessel.isa import fixedpoint as fp


def conv_constants(b: GraphBuilder, rng: np.random.Generator, cout: int, shape: tuple,
                   fan: int) -> list[str]:
    """A qconv2d's constant operands: random int8 weights of `shape`, int32 bias, and per
    output channel the Q31 multiplier / shift of a scale around 1 / (fan * 127) (outputs in
    range for `fan` inputs per output)."""
    m, sh = fp.quantize_multipliers(rng.uniform(0.3 / (fan * 127), 3 / (fan * 127), cout))
    return [b.constant(rng.integers(-127, 128, shape).astype(np.int8), "w"),
            b.constant(rng.integers(-999, 999, cout).astype(np.int32), "b"),
            b.constant(m.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
