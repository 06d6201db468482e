"""int16 activation inputs to conv / linear layers (int16 x int8 / int4 MACs): how a config asks
for them, what the quantiser and the lowering make of them, and what the golden model gains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tessel.errors import TesselConfigError
from tessel.ir.ops import Op
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


class Net(torch.nn.Module):
    """linear -> GELU -> linear, and a 3x3 conv (-> relu) -> grouped 1x1 conv."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.a = torch.nn.Linear(24, 48)
        self.b = torch.nn.Linear(48, 12)
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.d = torch.nn.Conv2d(8, 8, 1, groups=2)

    def forward(self, x, y):
        return self.b(torch.nn.functional.gelu(self.a(x))), self.d(torch.relu(self.c(y)))


def _samples(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 24, generator=g), torch.randn(1, 3, 6, 6, generator=g))
            for _ in range(n)]


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2)))


@pytest.fixture(scope="module")
def quantised():
    """Net quantised with int8 and with int16 inputs to b and d; both write int16 outputs
    (``dtype`` on a MAC: its output), so the inputs' rounding is what the two differ in."""
    from tessel.quant.api import quantize

    model = Net().eval()
    calibration = _samples(8, 1)
    outs = tuple(LayerOverride(module=m, dtype=ActDtype.INT16) for m in ("b", "d"))
    wide = outs + tuple(LayerOverride(module=m, mac_input=ActDtype.INT16) for m in ("b", "d"))
    return model, *(quantize(model, calibration[0], calibration, QuantConfig(overrides=o))
                    for o in (outs, wide))


def test_an_int16_input_mac_reads_int16_with_an_int64_bias(quantised) -> None:
    _, narrow, wide = quantised
    for qm, wides in ((narrow, 0), (wide, 2)):  # b and d read int16
        macs = [n for n in qm.graph.nodes if n.op in (Op.QLINEAR, Op.QCONV2D)]
        assert len(macs) == 4 and not qm.host_ops
        kinds = sorted((qm.graph.type_of(n.inputs[0]).dtype.value,
                        qm.graph.type_of(n.inputs[2]).dtype.value) for n in macs)
        assert kinds == sorted([("i16", "i64")] * wides + [("i8", "i32")] * (4 - wides))
        # the producer (the GELU table, the conv) writes int16 itself: no requantize between
        assert not [n for n in qm.graph.nodes if n.op is Op.REQUANTIZE]


def test_int16_inputs_track_the_qdq_reference_and_beat_int8_against_float(quantised) -> None:
    from tessel.ir import run_graph

    model, narrow, wide = quantised
    floats, golds = [[], []], {id(narrow): [[], []], id(wide): [[], []]}
    for sample in _samples(4, 2):
        ins = [t.numpy() for t in sample]
        with torch.no_grad():
            for k, t in enumerate(model(*sample)):
                floats[k].append(t.numpy())
        for qm in (narrow, wide):
            for k, y in enumerate(qm.run(*ins)):
                golds[id(qm)][k].append(y)
        ref = run_graph(wide.qdq_graph, ins)
        for k, y in enumerate(wide.run(*ins)):  # the QDQ graph up to rounding: 2 output LSBs
            lsb = np.abs(np.concatenate(floats[k])).max() / 32767
            np.testing.assert_allclose(y, ref[k], rtol=0, atol=2.5 * lsb)
    for k in range(2):
        f = np.concatenate(floats[k])
        gain = _sqnr(f, np.concatenate(golds[id(wide)][k])) - _sqnr(
            f, np.concatenate(golds[id(narrow)][k]))
        assert gain > 0, (k, gain)  # one error source fewer: the int8 input rounding
