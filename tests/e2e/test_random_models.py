"""200 seeded random models from the NPU's ops (convs of every kind incl. conv1d, pools incl.
global windows, residuals, concats and cat chains, rank-0 / broadcast constants, LUTs,
movement, mean + linear head; batch 1-8; extra outputs): compile + simulate == golden, bit for
bit, every output, on a preset chosen per model; the C runtime on the C NPU model gives the same
bits from the same binary. `make fuzz-models` runs 2,000 seeds."""

from __future__ import annotations

import numpy as np
import pytest
from random_models import random_model

from tessel.arch import list_presets, load_preset
from tessel.driver import compile_graph
from tessel.quant.golden import run_golden
from tessel.runtime.cengine import available

C_ENGINE_MISSING = available()  # tests/unit/runtime: never None where a C compiler exists

COUNT = 200
PRESETS = list_presets()


@pytest.mark.parametrize("chunk", range(8))
def test_random_models_bit_exact(chunk):
    ops: dict[str, int] = {}
    for seed in range(chunk, COUNT, 8):
        g = random_model(seed)
        for n in g.nodes:
            ops[n.op.value] = ops.get(n.op.value, 0) + 1
        arch = load_preset(PRESETS[seed % len(PRESETS)])
        x = np.random.default_rng(seed).integers(-128, 128, g.inputs[0].type.shape, np.int8)
        cm = compile_graph(g, arch, name=g.name)
        got = cm.run(x)
        want = run_golden(g, [x])
        for k, (a, b) in enumerate(zip(got, want, strict=True)):
            assert np.array_equal(a, b), f"seed {seed} on {arch.name}: output {k} != golden"
        if C_ENGINE_MISSING is None:  # the C runtime + C NPU model on the same binary
            for k, (a, b) in enumerate(zip(cm.run(x, engine="c"), got, strict=True)):
                assert np.array_equal(a, b), f"seed {seed} on {arch.name}: output {k}: C != Python"
    assert ops["qconv2d"] >= 25 and ops["qlinear"] == len(range(chunk, COUNT, 8))
    print(f"\nchunk {chunk}: op counts {dict(sorted(ops.items()))}")


@pytest.mark.parametrize("chunk", range(2))
def test_random_models_with_int16_mac_inputs_bit_exact(chunk):
    """Random models whose convs and linear heads now and then read int16 (the wide
    accumulator): compile + simulate == golden and C == simulator, and the NPU runs them."""
    wide = 0
    for seed in range(chunk, 24, 2):
        g = random_model(seed, mac16=True)
        arch = load_preset(PRESETS[seed % len(PRESETS)])
        x = np.random.default_rng(seed).integers(-128, 128, g.inputs[0].type.shape, np.int8)
        cm = compile_graph(g, arch, name=g.name)
        wide += sum(i.opcode.name in ("CONV", "MATMUL") and i.in_type == 1
                    for q in cm.program.streams.values() for i in q)
        got = cm.run(x)
        for k, (a, b) in enumerate(zip(got, run_golden(g, [x]), strict=True)):
            assert np.array_equal(a, b), f"seed {seed} on {arch.name}: output {k} != golden"
        if C_ENGINE_MISSING is None:
            for k, (a, b) in enumerate(zip(cm.run(x, engine="c"), got, strict=True)):
                assert np.array_equal(a, b), f"seed {seed} on {arch.name}: output {k}: C != Python"
    assert wide > 0
