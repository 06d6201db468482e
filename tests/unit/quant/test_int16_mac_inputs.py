"""int16 activation inputs to conv / linear layers (int16 x int8 / int4 MACs): how a config asks
for them, what the quantiser and the lowering make of them, and what the golden model gains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tessel.errors import TesselConfigError
from tessel.ir.ops import Op
from tessel.ir.types import DType
from tessel.quant.config import (
    ActDtype,
    LayerOverride,
    OpKind,
    QuantConfig,
    WeightDtype,
    resolve_rule,
    weights_record,
    with_weights,
)


def test_mac_input_sets_a_conv_or_linear_input_and_dtype_keeps_its_meaning() -> None:
    paths = ("blk", "blk.fc")
    dtype_only = QuantConfig(overrides=(LayerOverride(module="blk", dtype=ActDtype.INT16),))
    rule = resolve_rule(dtype_only, OpKind.LINEAR, paths)
    assert (rule.in_dtype, rule.out_dtype) == (ActDtype.INT8, ActDtype.INT16)  # output only
    assert resolve_rule(dtype_only, OpKind.ADD, paths).in_dtype is ActDtype.INT16
    wide = QuantConfig(overrides=(LayerOverride(module="blk.fc", mac_input=ActDtype.INT16),))
    for kind in (OpKind.LINEAR, OpKind.CONV):
        rule = resolve_rule(wide, kind, paths)
        assert (rule.in_dtype, rule.out_dtype) == (ActDtype.INT16, ActDtype.INT8)
    assert resolve_rule(wide, OpKind.GELU, paths).in_dtype is ActDtype.INT8  # not a MAC
    by_set = QuantConfig(int16_inputs=frozenset({OpKind.LINEAR}))
    assert resolve_rule(by_set, OpKind.LINEAR, paths).in_dtype is ActDtype.INT16
    with pytest.raises(TesselConfigError, match="mac_input"):
        LayerOverride(module="x", mac_input="int16")  # type: ignore[arg-type]


def test_the_weight_record_keeps_mac_inputs() -> None:
    config = QuantConfig(overrides=(
        LayerOverride(module="a.[0]", mac_input=ActDtype.INT16),
        LayerOverride(module="b", weights=WeightDtype.INT4)))
    record = weights_record(config)
    assert record["mac_inputs"] == [["a.[0]", None, "int16"]]
    assert with_weights(QuantConfig(), record).overrides == config.overrides
    # no MAC input override: the record is what it was (binaries do not change)
    assert "mac_inputs" not in weights_record(QuantConfig(overrides=config.overrides[1:]))
