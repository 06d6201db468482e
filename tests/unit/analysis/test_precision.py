"""Mixed precision chosen under an accuracy budget (tessel.analysis.precision): the int4 rule it
predicts with is the quantiser's (torchao's observer and torch's fake-quantiser as the oracle),
the plan it returns meets the budget when quantised again, and one more layer would not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tessel.analysis.accuracy import sqnr_db
from tessel.analysis.precision import (
    AccuracyBudget,
    InputPrecision,
    Metric,
    choose_weights,
    fake_int4,
    golden_evaluator,
    memory_limit,
    with_int4,
)
from tessel.errors import TesselCompileError, TesselConfigError
from tessel.quant.config import ActDtype, OpKind, QuantConfig, WeightDtype, resolve_rule
from tessel.quant.qspecs import PerChannelInt4Observer


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.body = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, padding=1),
                                        torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 1))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.body(self.stem(x)).mean((2, 3)))


def _samples(n: int, seed: int) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 3, 8, 8, generator=g),) for _ in range(n)]


@pytest.mark.parametrize("shape,axis", [((16, 8, 3, 3), 0), ((10, 16), 0), ((8, 4, 2, 2), 1)])
def test_fake_int4_is_the_quantisers_rule(shape, axis):
    w = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    w[1 if axis == 0 else 0] = 0  # an all-zero channel
    obs = PerChannelInt4Observer(ch_axis=axis, dtype=torch.int8, quant_min=-7, quant_max=7,
                                   qscheme=torch.per_channel_symmetric)
    obs(w)
    scale, zero = obs.calculate_qparams()
    expected = torch.fake_quantize_per_channel_affine(w, scale, zero.int(), axis, -7, 7)
    ours = fake_int4(w, axis)
    nonzero = w.abs().amax(dim=tuple(d for d in range(w.dim()) if d != axis)) > 0
    sel = [slice(None)] * w.dim()
    sel[axis] = nonzero
    torch.testing.assert_close(ours[tuple(sel)], expected[tuple(sel)], rtol=0, atol=1e-6)
    assert torch.count_nonzero(ours[tuple(slice(None) if d != axis else ~nonzero
                                          for d in range(w.dim()))]) == 0


def test_budget_parse():
    assert AccuracyBudget.parse("sqnr=1.5") == AccuracyBudget(Metric.SQNR, 1.5)
    assert AccuracyBudget.parse("COSINE=0.01") == AccuracyBudget(Metric.COSINE, 0.01)
    for bad in ("sqnr", "snr=1", "top1=2", "sqnr=-1", "sqnr=nan", "=1"):
        with pytest.raises(TesselConfigError):
            AccuracyBudget.parse(bad)


def test_with_int4_matches_only_the_named_module():
    config = with_int4(QuantConfig(), ["body.1"])
    assert resolve_rule(config, OpKind.CONV, ("body", "body.1")).weights is WeightDtype.INT4
    assert resolve_rule(config, OpKind.CONV, ("body", "body.3")).weights is WeightDtype.INT8
    assert resolve_rule(config, OpKind.CONV, ("body", "body.10")).weights is WeightDtype.INT8


@pytest.fixture(scope="module")
def setting():
    model = Net().eval()
    example, calibration, held_out = _samples(1, 0)[0], _samples(8, 1), _samples(6, 2)
    return model, example, calibration, held_out, golden_evaluator(
        model, example, calibration, held_out, len(calibration))


def _measured(setting, paths) -> float:
    model, example, calibration, held_out, _ = setting
    from tessel.quant.api import quantize

    qm = quantize(model, example, calibration, with_int4(QuantConfig(), paths),
                  calibration_samples=len(calibration))
    with torch.no_grad():
        floats = np.concatenate([model(*s).numpy() for s in held_out])
    goldens = np.concatenate([qm.run(*s)[0] for s in held_out])
    return sqnr_db(floats, goldens)


def test_plan_meets_the_budget_and_one_more_layer_would_not(setting):
    model, _, _, held_out, evaluate = setting
    budget = AccuracyBudget(Metric.SQNR, 10.0)  # int8 is ~49 dB here: some layers fit, not all
    plan = choose_weights(model, evaluate, held_out, budget, name="net")
    chosen = plan.int4_layers
    assert 0 < len(chosen) < 4, plan
    assert plan.order[0] in chosen  # the cheapest bytes first
    assert sorted(plan.order) == sorted(x.layer for x in plan.layers) and len(plan.order) == 4
    # measured again, independently of the plan's own bookkeeping
    assert _measured(setting, []) == pytest.approx(plan.int8_value, abs=1e-9)
    value = _measured(setting, list(chosen))
    assert value == pytest.approx(plan.value, abs=1e-9)
    assert value >= plan.int8_value - budget.loss
    for other in set(plan.order) - set(chosen):  # fewer than FILL_TRIES left: all were tried
        assert _measured(setting, [*chosen, other]) < plan.int8_value - 10.0, other
    assert plan.bytes_saved == sum((x.weights - (x.weights + 1) // 2) for x in plan.layers
                                   if x.layer in chosen)
    assert set(plan.config.overrides[:len(chosen)]) == set(with_int4(QuantConfig(), chosen).overrides)


def test_a_loose_budget_takes_every_layer_and_a_zero_one_keeps_int8_unless_free(setting):
    model, _, _, held_out, evaluate = setting
    loose = choose_weights(model, evaluate, held_out, AccuracyBudget(Metric.SQNR, 60.0))
    assert len(loose.int4_layers) == 4 and loose.evaluations == 2  # int8, then all predicted
    strict = choose_weights(model, evaluate, held_out, AccuracyBudget(Metric.SQNR, 0.0))
    assert strict.value >= strict.int8_value


def test_int4_weights_are_refused_as_a_starting_point(setting):
    model, _, _, held_out, evaluate = setting
    with pytest.raises(TesselConfigError, match="starts from int8"):
        choose_weights(model, evaluate, held_out, AccuracyBudget(),
                       QuantConfig(weights=WeightDtype.INT4))


def _small_flash(setting, size: int):
    from tessel.arch import load_target

    arch = load_target("tnpu-xs")
    arch = arch.with_params({f"offchip.{arch.weights_memory}.size_bytes": size})
    return memory_limit(arch, setting[4], "net")


def test_the_constants_fit_the_targets_memory_at_the_least_cost(setting):
    model, _, _, held_out, evaluate = setting
    roomy = _small_flash(setting, 1 << 22)
    int8 = roomy.constants(QuantConfig())
    budget = AccuracyBudget(Metric.SQNR, 0.0)
    free = choose_weights(model, evaluate, held_out, budget, name="net", limit=roomy)
    assert free.budget_met and free.memory == "flash" and free.constants <= 1 << 22
    order = free.order
    all4 = roomy.constants(with_int4(QuantConfig(), order))
    assert all4 < int8
    # a memory between the two: the fewest layers of the order that fit, the budget not met
    limit = _small_flash(setting, (int8 + all4) // 2)
    plan = choose_weights(model, evaluate, held_out, budget, name="net", limit=limit)
    k = len(plan.int4_layers)
    assert set(plan.int4_layers) == set(order[:k]) and 0 < k <= 4
    assert plan.constants == limit.constants(plan.config) <= limit.size
    assert limit.constants(with_int4(QuantConfig(), order[:k - 1])) > limit.size
    assert plan.value == pytest.approx(_measured(setting, list(order[:k])), abs=1e-9)
    assert not plan.budget_met and "not met" in plan.text()
    # below all-int4: refused, naming the bytes and the memory
    tight = _small_flash(setting, all4 - 1)
    with pytest.raises(TesselCompileError, match=f"need {all4:,} bytes with every layer's "
                       f"weights int4 .* but memory 'flash' has {all4 - 1:,}"):
        choose_weights(model, evaluate, held_out, budget, name="net", limit=tight)


def test_int16_inputs_are_bought_where_they_gain_most_per_matrix_cycle():
    from tessel.analysis.precision import choose_inputs

    macs = {"a.0.x": 100, "a.1.x": 100, "b": 100, "c": 400}
    gains = {"a.0.x": 0.01, "a.1.x": 0.01, "b": 0.001, "c": 0.02}

    def value_of(config: QuantConfig) -> float:
        return 0.9 + sum(g for p, g in gains.items() if resolve_rule(
            config, OpKind.LINEAR, (p,)).in_dtype is ActDtype.INT16)

    groups = choose_inputs(list(macs), macs, value_of, QuantConfig(), 0.9)
    assert [(g.pattern, g.layers, g.macs, g.int16) for g in groups] == [
        ("a.*.x", ("a.0.x", "a.1.x"), 200, True),  # 1e-4 per MAC: above every group's 6.1e-5
        ("b", ("b",), 100, False), ("c", ("c",), 400, False)]
    assert groups[0].value == pytest.approx(0.92)
    # nothing gains: nothing is bought
    none = choose_inputs(list(macs), macs, lambda c: 0.9, QuantConfig(), 0.9)
    assert not any(g.int16 for g in none)


def test_activations_auto_meets_the_budget_against_all_int8_with_the_inputs_it_reports(setting):
    model, _, _, held_out, evaluate = setting
    budget = AccuracyBudget(Metric.SQNR, 10.0)
    plan = choose_weights(model, evaluate, held_out, budget, name="net", activations=InputPrecision.AUTO)
    assert plan.value >= plan.int8_value - budget.loss
    assert _measured(setting, []) == pytest.approx(plan.int8_value, abs=1e-9)  # all-int8
    assert {g.pattern for g in plan.input_groups} == {"stem", "body.*", "head"}
    wide = {p for g in plan.input_groups if g.int16 for p in g.layers}
    assert set(plan.int16_inputs) == wide
    for x in plan.layers:  # the config makes the inputs the plan reports
        kind = OpKind.LINEAR if x.kind == "Linear" else OpKind.CONV
        rule = resolve_rule(plan.config, kind, (x.layer,))
        assert rule.in_dtype is (ActDtype.INT16 if x.input == "int16" else ActDtype.INT8)
        assert x.macs > 0
    assert plan.bias_bytes_added == sum(4 * x.channels for x in plan.layers if x.input == "int16")
    assert "input" in plan.table().text()
    # every layer int4 meets a loose budget with int8 inputs: no int16 input is bought
    loose = choose_weights(model, evaluate, held_out, AccuracyBudget(Metric.SQNR, 60.0),
                           activations=InputPrecision.AUTO)
    assert len(loose.int4_layers) == 4 and not loose.int16_inputs and not loose.input_groups
    with pytest.raises(TesselConfigError, match="activations"):
        choose_weights(model, evaluate, held_out, budget, activations="auto")
