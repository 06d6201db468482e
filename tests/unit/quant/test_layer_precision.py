"""--layer-precision PATTERN[:OP]=TYPE: parsed into a LayerOverride, and written back."""

from __future__ import annotations

import pytest

from tessel.errors import TesselConfigError
from tessel.quant.config import (
    ActDtype,
    LayerOverride,
    OpKind,
    QuantConfig,
    WeightDtype,
    override_flag,
    parse_layer_precision,
    resolve_rule,
    with_precision_choices,
)


def test_pattern_op_and_type() -> None:
    o = parse_layer_precision("features.4.block.2:mul=int16")
    assert o == LayerOverride(module="features.4.block.2", op=OpKind.MUL, dtype=ActDtype.INT16)
    assert parse_layer_precision("layer1.*=int8") == LayerOverride(module="layer1.*",
                                                                   dtype=ActDtype.INT8)
    assert parse_layer_precision("blocks.*.fc2:input=int16") == LayerOverride(
        module="blocks.*.fc2", mac_input=ActDtype.INT16)


@pytest.mark.parametrize("text", ["int16", "=int16", "x=int4", "x:notanop=int16"])
def test_malformed_values_name_the_option(text: str) -> None:
    with pytest.raises(TesselConfigError, match="--layer-precision"):
        parse_layer_precision(text)


def test_the_flag_round_trips() -> None:
    for text in ("features.4=int16", "*:add=int16", "blocks.1.attn:matmul=int8",
                 "encoder.layer.*.output.dense:input=int16"):
        o = parse_layer_precision(text)
        assert override_flag(o) == f"--layer-precision '{text}'"
    assert override_flag(LayerOverride(module="fc", weights=WeightDtype.INT8)) == \
        "--layer-weights 'fc=int8'"


def test_the_override_applies_to_matching_ops_only() -> None:
    config = with_precision_choices(QuantConfig(), [parse_layer_precision("features.4:mul=int16")])
    rule = resolve_rule(config, OpKind.MUL, ("features", "features.4", "features.4.block.2"))
    assert rule.in_dtype is rule.out_dtype is ActDtype.INT16
    assert resolve_rule(config, OpKind.ADD, ("features.4",)).out_dtype is ActDtype.INT8
    assert resolve_rule(config, OpKind.MUL, ("features.5",)).out_dtype is ActDtype.INT8


def test_a_binary_records_the_activation_types_to_quantise_again() -> None:
    from tessel.quant.config import weights_record, with_weights

    config = with_precision_choices(QuantConfig(), [parse_layer_precision("features.4=int16"),
                                                    parse_layer_precision("*:add=int16")])
    record = weights_record(config)
    assert record["activations"] == [["features.4", None, "int16"], ["*", "add", "int16"]]
    assert with_weights(QuantConfig(), record).overrides == config.overrides
    assert weights_record(QuantConfig()) == {}


def test_one_keyword_for_the_quant_config_everywhere():
    import inspect
    import warnings

    import torch

    import tessel
    from tessel.quant.config import QuantConfig, WeightDtype

    for fn in (tessel.quantize, tessel.compile, tessel.estimate, tessel.auto_weights,
               tessel.precision_advice):
        assert "quant_config" in inspect.signature(fn).parameters, fn.__name__
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()
    x = (torch.randn(1, 4),)
    cfg = QuantConfig(weights=WeightDtype.INT4)
    new = tessel.quantize(model, x, quant_config=cfg, calibration_samples=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = tessel.quantize(model, x, config=cfg, calibration_samples=1)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert old.config == new.config == cfg
    with pytest.raises(TesselConfigError, match="quant_config= only"):
        tessel.quantize(model, x, quant_config=cfg, config=cfg)
