"""`tessel advise`: the ranked 2x relaxations are measured with the compiler in the loop, agree
with separately estimating (and recompiling + simulating) the relaxed arch, and cost area."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tessel.analysis.advise import (
    MIN_GAIN_PCT,
    Advice,
    Knob,
    Limit,
    Relaxation,
    advise,
    confirm,
    relax,
    relaxations,
)
from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_preset
from tessel.cli.advise import register
from tessel.errors import TesselConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_driver_e2e import two_conv_net  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    return two_conv_net(np.random.default_rng(0))


@pytest.fixture(scope="module")
def advice(graph) -> Advice:
    return advise(graph, load_preset("tnpu-s"), name="net")


def test_every_relaxation_is_measured_and_ranked_by_latency_gain(advice):
    assert advice.model == "net" and advice.target == "tnpu-s" and not advice.skipped
    # tnpu-s keeps weights and activations in one LPDDR: one bandwidth relaxation
    assert sorted(g.knob.name for g in advice.ranked) == sorted(k.name for k in Knob)
    gains = [g.latency_gain_pct for g in advice.ranked]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > MIN_GAIN_PCT
    assert advice.binding is advice.ranked[0].limit


def test_gains_match_a_separate_estimate_of_the_relaxed_arch(graph, advice):
    arch = load_preset("tnpu-s")
    base = estimate_graph(graph, arch)
    assert advice.cycles == base.cycles
    for g in advice.ranked:
        est = estimate_graph(graph, relax(arch, g.relaxation))
        assert g.cycles == est.cycles
        assert g.latency_gain_pct == pytest.approx(100 * (base.cycles - est.cycles) / base.cycles)
        assert g.energy_gain_pct == pytest.approx(100 * (base.energy_uj - est.energy_uj)
                                                  / base.energy_uj)
        assert g.layer_cycles == {x.name: x.cycles for x in est.layers}


def test_top_gain_is_confirmed_by_recompiling_and_simulating(graph, advice):
    check = confirm(graph, load_preset("tnpu-s"), advice)
    assert check.change == advice.ranked[0].change
    assert check.within(10.0), check
    assert check.simulated_gain_pct is not None and check.simulated_gain_pct > 0


def test_area_cost_is_positive_for_bigger_hardware_and_zero_outside_the_area_model(advice):
    base = load_preset("tnpu-s")
    for g in advice.ranked:
        assert g.area_modelled == g.knob.in_area_model
        if g.area_modelled:
            assert g.area_mm2_delta > 0 and g.area_pct > 0
        else:
            assert g.area_mm2_delta == 0
        relaxed = relax(base, g.relaxation)
        assert g.area_mm2_delta == pytest.approx(relaxed.derived.area_mm2 - base.derived.area_mm2)


def test_relax_changes_exactly_one_parameter_by_2x():
    arch = load_preset("u55-256")
    r = relax(arch, Relaxation(Knob.MATRIX_ROWS))
    assert (r.matrix.rows, r.matrix.cols) == (2 * arch.matrix.rows, arch.matrix.cols)
    r = relax(arch, Relaxation(Knob.OFFCHIP_BYTES_PER_CYCLE, "flash"))
    assert [m.bytes_per_cycle for m in r.offchip] == [8, 2]  # sys_sram untouched, flash 1 -> 2
    r = relax(arch, Relaxation(Knob.OFFCHIP_LATENCY_CYCLES))
    assert [m.latency_cycles for m in r.offchip] == [16, 32]
    assert relax(arch, Relaxation(Knob.DMA_CHANNELS)).dma_channels == 2 * arch.dma_channels
    # separate weights / activations memories: one bandwidth relaxation each
    mems = [c.memory for c in relaxations(arch) if c.knob is Knob.OFFCHIP_BYTES_PER_CYCLE]
    assert mems == ["flash", "sys_sram"]


def test_a_relaxation_beyond_the_isa_limits_is_skipped_not_fatal(graph):
    arch = load_preset("tnpu-s")
    big = replace(arch, name="wide", matrix=replace(arch.matrix, rows=512))
    with pytest.raises(TesselConfigError, match="matrix.rows"):
        relax(big, Relaxation(Knob.MATRIX_ROWS))
    a = advise(graph, big)
    assert [s.change for s in a.skipped] == ["matrix.rows x2"]
    assert Knob.MATRIX_ROWS not in {g.knob for g in a.ranked}


def test_layer_binding_is_the_relaxation_that_saves_most(advice):
    assert [x.name for x in advice.layers] == ["c1", "c2"]
    for layer in advice.layers:
        assert set(layer.gains_pct) == {g.change for g in advice.ranked}
        for g in advice.ranked:
            saved = 100 * (layer.cycles - g.layer_cycles[layer.name]) / layer.cycles
            assert layer.gains_pct[g.change] == pytest.approx(saved, abs=1e-3)
        best = max(v for v in layer.gains_pct.values() if v is not None)
        if best >= MIN_GAIN_PCT:
            assert layer.gains_pct[layer.binding_change] == best
        else:
            assert layer.binding_change is None
    assert sum(advice.bound_share_pct.values()) == pytest.approx(100, abs=0.01)


def test_json_markdown_and_table(advice):
    data = json.loads(advice.to_json())
    assert data["binding"] == advice.binding.value
    assert [g["change"] for g in data["ranked"]] == [g.change for g in advice.ranked]
    assert data["ranked"][0]["knob"] == advice.ranked[0].knob.value  # the dotted name
    assert data["layers"][0]["binding"] in {x.value for x in Limit}
    md = advice._repr_markdown_()
    assert "| rank | change |" in md and advice.ranked[0].change in md
    text = advice.table(width=None)
    assert text.splitlines()[0] == advice.summary() and "2 slowest of 2 layers" in text
    assert max(len(x) for x in advice.table().splitlines()) <= 100  # fitted: the summary too


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tessel")
    register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_json_and_text(capsys):
    assert _cli(["advise", "digits_cnn", "--calibration", "2", "--json", "--confirm"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "digits_cnn" and data["target"] == "tnpu-s" and data["ranked"]
    gains = [g["latency_gain_pct"] for g in data["ranked"]]
    assert gains == sorted(gains, reverse=True)
    assert abs(data["confirmation"]["error_pct"]) <= 10
    assert _cli(["advise", "digits_cnn", "--calibration", "2", "--layers", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("advice for digits_cnn on tnpu-s") and "3 slowest of" in out
    with pytest.raises(TesselConfigError, match="--calibration"):
        _cli(["advise", "digits_cnn", "--calibration", "0"])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2"])
def test_zoo_top_gain_confirmed_within_10_percent(model):
    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    spec = resolve(model)
    net, inputs = spec.factory()
    qm = quantize(net, tuple(inputs), calibration_data=spec.calibration_data(2),
                  quant_config=default_config(spec.name), calibration_samples=2)
    arch = load_preset("tnpu-s")
    a = advise(qm.graph, arch, name=model)
    assert a.ranked[0].latency_gain_pct > 5
    check = confirm(qm.graph, arch, a, with_base=False)
    assert check.within(10.0), check
