"""MobileNetV3- and EfficientNet-style networks (tests/e2e/vision_nets.py) compile with their
MACs on the NPU and simulate bit-exact; on MobileNetV3, following `tessel accuracy
--per-layer`'s measured advice raises the whole-model SQNR at a small cycle cost."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import vision_nets as V

from tessel.analysis.accuracy import sqnr_db
from tessel.analysis.estimate import estimate_graph
from tessel.analysis.precision_advice import precision_advice
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.models import resolve
from tessel.quant.api import quantize

CALIBRATION, HELD_OUT = 16, 48


@pytest.mark.parametrize("factory", [V.mobilenet_v3, V.efficientnet])
def test_compiles_on_the_npu_and_simulates_bit_exact(factory) -> None:
    model, example = factory()
    qm = quantize(model, example, V.images(CALIBRATION, seed=1),
                  calibration_samples=CALIBRATION)
    cm = compile_graph(qm.graph, load_preset("tnpu-s"))
    fallback = cm.program.metadata["fallback"]
    assert fallback["npu_macs"] >= 0.95 * fallback["total_macs"] > 1e6
    assert not cm.program.metadata["host_ops"]
    for (x,) in V.images(2, seed=2):
        for got, want in zip(cm.run(x), qm.run(x), strict=True):
            assert np.array_equal(got, want)


def test_a_model_file_gives_its_held_out_inputs() -> None:
    spec = resolve(f"{Path(V.__file__)}:mobilenet_v3")
    held_out = spec.evaluation_data(3)
    assert len(held_out) == 3 and held_out[0][0].shape == (1, 3, V.SIZE, V.SIZE)
    assert not np.array_equal(held_out[0][0], spec.calibration_data(1)[0][0])


@pytest.mark.slow
def test_following_the_per_layer_advice_gains_3_db_within_10_percent_cycles() -> None:
    model, example = V.mobilenet_v3()
    calibration, held_out = V.images(CALIBRATION, seed=1), V.images(HELD_OUT, seed=2)
    advice = precision_advice(model, example, calibration, held_out, layers=3)
    assert advice.losses[0][:2] == ("features.4.block.2", "mul")  # the SE multiply loses most
    assert advice.combined is not None
    assert advice.combined.sqnr_gain_db >= 3.0 and advice.combined.cycles_change_pct <= 10.0
    # the advice's config, measured again from scratch
    with_advice = quantize(model, example, calibration, advice.config,
                           calibration_samples=CALIBRATION)
    floats = np.concatenate([model(*s).detach().numpy() for s in held_out])
    golden = np.concatenate([with_advice.run(*s)[0] for s in held_out])
    assert sqnr_db(floats, golden) >= advice.sqnr_db + 3.0
    est = estimate_graph(with_advice.graph, load_preset("tnpu-s"), timing_only=True)
    assert est.cycles <= 1.10 * advice.cycles and not est.host_ops
    assert "--layer-precision" in advice.text() and json.dumps(advice.to_json())
