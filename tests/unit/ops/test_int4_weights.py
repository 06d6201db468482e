"""int4 weights end to end: the quantiser's int4 range, the IR's i4 type, the emitters' packing
(two per byte, each instruction's block on a byte) and the instructions' w_type / b_type; every
compiled model bit-exact with the golden model and its weight bytes halved; per-layer choices
and the record a binary keeps of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tessel
from tessel.errors import TesselConfigError, TesselParseError
from tessel.ir import DType, GraphBuilder, Op, TensorType, parse_graph, print_graph, verify
from tessel.ir.attrs import ConstData
from tessel.isa import Opcode
from tessel.isa.instrs.matrix import WeightType
from tessel.ops.conv_weights import pack_int4
from tessel.quant.config import (
    LayerOverride,
    QuantConfig,
    WeightDtype,
    parse_layer_weights,
    weights_record,
    with_weights,
)

INT4 = QuantConfig(weights=WeightDtype.INT4)
MATRIX_OPS = (Opcode.CONV, Opcode.DWCONV, Opcode.MATMUL)


def _nibble(data: bytes, n: int) -> int:
    """docs/isa.md's int4 element n: the low half of byte n >> 1 when n is even."""
    v = (data[n >> 1] >> (4 * (n & 1))) & 0xF
    return v - 16 if v >= 8 else v


@pytest.mark.parametrize("count", [1, 2, 7, 16])
def test_pack_int4_is_the_isas_nibble_order(count):
    values = np.random.default_rng(count).integers(-8, 8, count)
    data = pack_int4(values)
    assert len(data) == (count + 1) // 2
    assert [_nibble(data, n) for n in range(count)] == values.tolist()
    if count % 2:
        assert data[-1] >> 4 == 0  # an odd block ends with a zero half


class _Mixed(nn.Module):
    """Every weight layout the emitters pack: a plain conv, a grouped conv whose groups have an
    odd weight count, a depthwise conv, a 17-tap kernel (split into accumulating CONVs) with
    stride 2, and a linear layer with an odd output count."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 10, 3, padding=1)
        self.grouped = nn.Conv2d(10, 6, 3, padding=1, groups=2)
        self.dw = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.wide = nn.Conv2d(6, 5, (1, 17), stride=2, padding=(0, 8))
        self.fc = nn.Linear(5 * 8 * 8, 7)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.grouped(x))
        x = torch.relu(self.dw(x))
        x = torch.relu(self.wide(x))
        return self.fc(x.flatten(1))


class _InvertedResidual(nn.Module):
    """MobileNetV2's block: the fused expand -> depthwise -> project chain, plus a residual."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(8, 24, 1)
        self.dw = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.project = nn.Conv2d(24, 8, 1)

    def forward(self, x):
        y = torch.clamp(self.expand(x), 0, 6)
        y = torch.clamp(self.dw(y), 0, 6)
        return x + self.project(y)


class _Upsampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 6, 3, padding=1)
        self.up = nn.ConvTranspose2d(6, 5, 4, 2, 1)

    def forward(self, x):
        return self.up(torch.relu(self.c(x)))


MODELS = {"mixed": (_Mixed, (1, 3, 16, 16)), "inverted_residual": (_InvertedResidual, (1, 8, 12, 12)),
          "conv_transpose": (_Upsampler, (1, 3, 7, 9))}


def _compiled(name: str, preset: str, config: QuantConfig):
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    calib = [(torch.randn(*shape),) for _ in range(4)]
    x = calib[0][0]
    cm = tessel.compile(model, (x,), target=preset, calibration_data=calib, quant_config=config)
    qm = tessel.quantize(model, (x,), calibration_data=calib, quant_config=config)
    return model, x, cm, qm


def _matrix_instructions(cm) -> list:
    return [i for q in cm.program.streams.values() for i in q if i.opcode in MATRIX_OPS]


def _weight_type(i) -> WeightType:
    return WeightType(i.b_type if i.opcode is Opcode.MATMUL else i.w_type)


@pytest.mark.parametrize("preset", ["tnpu-s", "tnpu-xs"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_int4_models_run_bit_exact_with_every_weight_packed(name, preset):
    model, x, cm, qm = _compiled(name, preset, INT4)
    weights = [n.inputs[1] for n in qm.graph.nodes if n.op in (Op.QCONV2D, Op.QLINEAR)]
    assert weights and all(qm.graph.type_of(w).dtype is DType.I4 for w in weights)
    assert qm.graph.constant_value(weights[0]).min() >= -7  # the quantiser's range: [-7, 7]
    assert cm.program.metadata["fallback"]["host_ops"] == {}
    instrs = _matrix_instructions(cm)
    assert instrs and all(_weight_type(i) is WeightType.I4 for i in instrs)
    got, = cm.run(x)
    np.testing.assert_array_equal(got, qm.run(x)[0])


def test_int4_halves_the_weight_bytes_and_keeps_the_model_close():
    model, x, cm8, _ = _compiled("mixed", "tnpu-s", QuantConfig())
    _, _, cm4, _ = _compiled("mixed", "tnpu-s", INT4)
    weights = sum(p.numel() for n, p in model.named_parameters() if n.endswith("weight"))
    saved = len(cm8.program.constants) - len(cm4.program.constants)
    # half of every weight byte, less the padding: an odd block's last half byte, and the
    # linear layer's rows of 7 weights stored as 8 (a row per input feature)
    padding = model.fc.in_features // 2 + 32
    assert weights // 2 - padding <= saved <= weights // 2
    with torch.no_grad():
        ref = model(x).numpy()
    got, = cm4.run(x)
    assert 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2)) > 15


def test_a_layer_pattern_chooses_its_own_weight_type():
    config = QuantConfig(overrides=(LayerOverride(module="fc", weights=WeightDtype.INT4),))
    _, x, cm, qm = _compiled("mixed", "tnpu-s", config)
    kinds = {n.op: qm.graph.type_of(n.inputs[1]).dtype for n in qm.graph.nodes
             if n.op in (Op.QCONV2D, Op.QLINEAR)}
    assert kinds == {Op.QCONV2D: DType.I8, Op.QLINEAR: DType.I4}
    by_type = {_weight_type(i) for i in _matrix_instructions(cm) if i.opcode is Opcode.MATMUL}
    assert by_type == {WeightType.I4}
    np.testing.assert_array_equal(cm.run(x)[0], qm.run(x)[0])


def test_the_weight_record_rebuilds_the_config():
    config = QuantConfig(weights=WeightDtype.INT4, overrides=(
        LayerOverride(module="features.0", weights=WeightDtype.INT8),))
    record = weights_record(config)
    assert record == {"weights": "int4", "layers": [["features.0", None, "int8"]]}
    assert with_weights(QuantConfig(), record) == config
    assert weights_record(QuantConfig()) == {}
    with pytest.raises(TesselConfigError, match="weight types"):
        with_weights(QuantConfig(), {"weights": "int3"})


def test_layer_weights_text():
    assert parse_layer_weights("layer4.*=int4") == ("layer4.*", WeightDtype.INT4)
    for bad, why in (("layer4", "expected PATTERN=TYPE"), ("=int4", "expected PATTERN=TYPE"),
                     ("fc=int2", "'int2' is not one of int8, int4")):
        with pytest.raises(TesselConfigError, match=why):
            parse_layer_weights(bad)
    with pytest.raises(TesselConfigError, match="must be a WeightDtype"):
        LayerOverride(module="fc", weights="int4")


def test_the_i4_type_in_ir_text():
    b = GraphBuilder("g")
    w = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    out = b.constant(w, "w", type_=TensorType((4, 4), DType.I4))
    g = verify(b.build([out]))
    text = print_graph(g)
    assert "tensor<4x4xi4>" in text
    back = verify(parse_graph(text))
    assert back.type_of("w").dtype is DType.I4
    np.testing.assert_array_equal(back.constant_value("w"), w)
    with pytest.raises(TesselParseError, match="value 9 is not a i4 integer"):
        parse_graph(text.replace("7]", "9]"))
    with pytest.raises(ValueError, match="outside"):
        ConstData(w * 2, DType.I4)
    assert ConstData(w, DType.I4) != ConstData(w)  # an i4 constant is not its int8 twin


def test_an_npu_without_the_int4_decoder_refuses_int4_layers():
    from dataclasses import replace

    from tessel.arch import load_preset
    from tessel.errors import TesselCompileError

    arch = load_preset("tnpu-s")
    arch = replace(arch, matrix=replace(arch.matrix, int4_weights=False))
    factory, shape = MODELS["mixed"]
    model = factory().eval()
    x = torch.randn(*shape)
    with pytest.raises(TesselCompileError, match="no int4 weight decoder .*--layer-weights"):
        tessel.compile(model, (x,), target=arch, calibration_data=[(x,)], quant_config=INT4)
    # the decoder's area is part of the NPU's
    assert load_preset("tnpu-s").derived.area_mm2 > arch.derived.area_mm2
