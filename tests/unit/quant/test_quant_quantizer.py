"""TesselQuantizer on small models: which quantize / dequantize nodes convert_pt2e leaves, with
which dtypes, schemes, shared and fixed parameters; overrides; observers; SQNR vs float."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import GraphModule, Node

from tessel.errors import TesselConfigError
from tessel.quant.config import ActDtype, LayerOverride, ObserverKind, OpKind, QuantConfig
from tessel.quant.pt2e import quantize_pt2e_module

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten
Q_PT, DQ_PT = qd.quantize_per_tensor.default, qd.dequantize_per_tensor.default
DQ_PC = qd.dequantize_per_channel.default


def _quantize(model: nn.Module, shape, config: QuantConfig | None = None, seed: int = 0):
    torch.manual_seed(seed)
    example = (torch.randn(*shape),)
    calib = [(torch.randn(*shape),) for _ in range(3)]
    return quantize_pt2e_module(model, example, calib, config)


def _node(gm: GraphModule, target) -> Node:
    return next(n for n in gm.graph.nodes if n.target == target)


def _out_q(node: Node) -> Node | None:
    """The quantize node observing ``node``'s output, if any."""
    return next((u for u in node.users if u.target == Q_PT), None)


def _in_dq(node: Node, i: int = 0) -> Node:
    dq = node.args[i]
    assert dq.target in (DQ_PT, DQ_PC), f"{node.name} input {i} is {dq.target}"
    return dq


def _qparams(dq: Node) -> tuple[float, int, int, int, torch.dtype]:
    _, scale, zp, qmin, qmax, dtype = dq.args
    return scale, zp, qmin, qmax, dtype


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        z = F.relu6(self.conv2(y))
        w = self.conv3(y).clamp(-1.0, 1.0)
        c = torch.cat([z, w], dim=1)
        p = F.adaptive_avg_pool2d(c, 1).flatten(1)
        return F.relu(self.fc(p))


@pytest.fixture(scope="module")
def convnet_q() -> GraphModule:
    return _quantize(ConvNet().eval(), (2, 3, 8, 8))


def test_conv_weights_per_channel_int8_and_bias_int32(convnet_q: GraphModule) -> None:
    convs = [n for n in convnet_q.graph.nodes if n.target == aten.conv2d.default]
    assert len(convs) == 3
    for conv in convs:
        x_dq, w_dq, b_dq = _in_dq(conv, 0), _in_dq(conv, 1), _in_dq(conv, 2)
        assert x_dq.target == DQ_PT and _qparams(x_dq)[2:] == (-128, 127, torch.int8)
        assert w_dq.target == DQ_PC
        _, w_scale, w_zp, axis, qmin, qmax, dtype = w_dq.args
        assert (axis, qmin, qmax, dtype) == (0, -127, 127, torch.int8)
        w_zp_val = getattr(convnet_q, w_zp.target)
        assert torch.all(w_zp_val == 0)
        w_q = getattr(convnet_q, w_dq.args[0].target)
        assert w_q.dtype == torch.int8 and w_q.abs().max() <= 127
        _, b_scale, _, b_axis, b_min, b_max, b_dtype = b_dq.args
        assert (b_axis, b_min, b_max, b_dtype) == (0, -(2**31), 2**31 - 1, torch.int32)
        expected = _qparams(x_dq)[0] * getattr(convnet_q, w_scale.target)
        assert torch.allclose(getattr(convnet_q, b_scale.target), expected, rtol=1e-6)


def test_activation_is_fused_into_conv_and_linear(convnet_q: GraphModule) -> None:
    # conv -> relu / relu6 / clamp and linear -> relu: only the activation's output is observed
    assert not any(n.target == aten.batch_norm.default for n in convnet_q.graph.nodes)
    for act in (aten.relu.default, aten.relu6.default, aten.clamp.default):
        for node in (n for n in convnet_q.graph.nodes if n.target == act):
            producer = node.args[0]
            assert producer.target in (aten.conv2d.default, aten.linear.default)
            assert _out_q(producer) is None, f"{producer.name} output observed before {node.name}"
            assert _out_q(node) is not None
    fc_relu = next(n for n in convnet_q.graph.nodes
                   if n.target == aten.relu.default and n.args[0].target == aten.linear.default)
    assert _out_q(fc_relu).args[2] == -128  # relu output starts at 0 -> zero point at qmin


def test_concat_inputs_and_output_share_qparams(convnet_q: GraphModule) -> None:
    cat = _node(convnet_q, aten.cat.default)
    params = {_qparams(dq) for dq in cat.args[0]}
    params.add(tuple(_out_q(cat).args[1:]))
    assert len(params) == 1, params
    # the producers' outputs (relu6 and clamp) are quantised with the same parameters
    assert _out_q(_node(convnet_q, aten.relu6.default)).args[1:] == _out_q(cat).args[1:]


def test_average_pool_observes_its_own_range_flatten_keeps_it(convnet_q: GraphModule) -> None:
    # an average's range can be far below its input's: its output is observed,
    # a data-movement op after it keeps the parameters it reads
    pool = _node(convnet_q, aten.adaptive_avg_pool2d.default)
    flat = _node(convnet_q, aten.flatten.using_ints)
    assert _out_q(pool).args[1] < _qparams(_in_dq(pool))[0]  # a finer scale than the input's
    assert tuple(_out_q(flat).args[1:]) == tuple(_out_q(pool).args[1:])


def test_converted_conv_net_sqnr_above_25db() -> None:
    torch.manual_seed(1)
    model = ConvNet().eval()
    calib = [(torch.randn(4, 3, 8, 8),) for _ in range(8)]
    q = quantize_pt2e_module(model, calib[0], calib)
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        ref, got = model(x), q(x)
    sqnr = 10 * torch.log10(ref.pow(2).sum() / (ref - got).pow(2).sum())
    assert sqnr > 25.0, f"SQNR {sqnr:.1f} dB"


class Misc(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = self.fc1(x), self.fc2(x) * 3.0
        s = a + b
        return (torch.softmax(s, -1), self.ln(s), torch.sigmoid(a), torch.tanh(b),
                F.hardswish(a), torch.cumsum(a, -1))


@pytest.fixture(scope="module")
def misc_q() -> GraphModule:
    return _quantize(Misc().eval(), (4, 8))


def test_softmax_int16_in_fixed_int16_out(misc_q: GraphModule) -> None:
    sm = _node(misc_q, aten.softmax.int)
    scale, zp, qmin, qmax, dtype = _qparams(_in_dq(sm))
    assert (zp, qmin, qmax, dtype) == (0, -32768, 32767, torch.int16)
    assert tuple(_out_q(sm).args[1:]) == (1.0 / 32768, 0, -32768, 32767, torch.int16)


def test_layer_norm_reads_int16_and_its_producer_writes_int16(misc_q: GraphModule) -> None:
    ln = _node(misc_q, aten.layer_norm.default)
    assert _qparams(_in_dq(ln))[1:] == (0, -32768, 32767, torch.int16)
    assert _out_q(ln).args[3:] == (-128, 127, torch.int8)
    add = _node(misc_q, aten.add.Tensor)  # feeds softmax and layer norm: written in int16
    assert _out_q(add).args[2:] == (0, -32768, 32767, torch.int16)
    assert all(_qparams(_in_dq(add, i))[4] == torch.int8 for i in (0, 1))


def test_lut_ops_fixed_or_observed_output(misc_q: GraphModule) -> None:
    sig = _out_q(_node(misc_q, aten.sigmoid.default))
    assert tuple(sig.args[1:]) == (1.0 / 256, -128, -128, 127, torch.int8)
    tanh = _out_q(_node(misc_q, aten.tanh.default))
    assert tuple(tanh.args[1:]) == (1.0 / 128, 0, -128, 127, torch.int8)
    hsw = _out_q(_node(misc_q, aten.hardswish.default))
    assert hsw.args[1] not in (1.0 / 256, 1.0 / 128) and hsw.args[5] == torch.int8


def test_scalar_mul_is_quantised_and_unknown_op_stays_float(misc_q: GraphModule) -> None:
    mul = _node(misc_q, aten.mul.Tensor)
    assert _in_dq(mul).target == DQ_PT and _out_q(mul) is not None
    cumsum = _node(misc_q, aten.cumsum.default)
    assert _out_q(cumsum) is None  # host op: float output
    assert cumsum.args[0].target == DQ_PT  # its input is dequantised from int8


def test_residual_add_sharing_is_configurable() -> None:
    unshared = _quantize(Misc().eval(), (4, 8))
    shared = _quantize(Misc().eval(), (4, 8), QuantConfig(share_residual_qparams=True))
    add_u, add_s = _node(unshared, aten.add.Tensor), _node(shared, aten.add.Tensor)
    assert _qparams(_in_dq(add_u, 0)) != _qparams(_in_dq(add_u, 1))
    assert _qparams(_in_dq(add_s, 0)) == _qparams(_in_dq(add_s, 1))


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)) + x


def test_override_by_module_name_leaves_layer_float() -> None:
    cfg = QuantConfig(overrides=(LayerOverride(module="a.*", quantize=False),))
    q = _quantize(Two().eval(), (4, 8), cfg)
    lin_a, lin_b = [n for n in q.graph.nodes if n.target == aten.linear.default]
    assert lin_a.args[1].op == "get_attr"  # float weight, no dequantize
    assert _in_dq(lin_b, 1).target == DQ_PC


def test_override_by_op_type_sets_int16_and_observer() -> None:
    cfg = QuantConfig(
        overrides=(LayerOverride(op=OpKind.ADD, dtype=ActDtype.INT16,
                                 observer=ObserverKind.PERCENTILE),)
    )
    q = _quantize(Two().eval(), (4, 8), cfg)
    add = _node(q, aten.add.Tensor)
    assert _qparams(_in_dq(add, 0))[4] == torch.int16 and _out_q(add).args[5] == torch.int16
    lin_b = next(n for n in q.graph.nodes if n.target == aten.linear.default and n.name != "linear")
    assert _qparams(_in_dq(lin_b, 0))[4] == torch.int8  # MAC inputs stay int8


@pytest.mark.parametrize("kind", list(ObserverKind))
def test_every_observer_kind_calibrates(kind: ObserverKind) -> None:
    q = _quantize(Two().eval(), (16, 8), QuantConfig(observer=kind))
    x = torch.randn(16, 8)
    with torch.no_grad():
        ref, got = Two().eval()(x), q(x)
    assert _out_q(_node(q, aten.add.Tensor)) is not None
    assert got.shape == ref.shape and torch.isfinite(got).all()


def test_percentile_observer_ignores_outliers() -> None:
    from tessel.quant.qspecs import PercentileObserver

    obs = PercentileObserver(percentile=99.0, dtype=torch.int8, quant_min=-128, quant_max=127)
    x = torch.linspace(-1.0, 1.0, 10001)
    x[0], x[-1] = -1000.0, 1000.0
    obs(x)
    obs(x)
    assert -1.0 < float(obs.min_val) < -0.9 and 0.9 < float(obs.max_val) < 1.0
    scale, _ = obs.calculate_qparams()
    assert float(scale) < 2.0 / 255 * 1.01


def test_config_validation() -> None:
    with pytest.raises(TesselConfigError, match="LayerOverride"):
        LayerOverride()
    with pytest.raises(TesselConfigError, match="OpKind"):
        LayerOverride(op="conv")  # type: ignore[arg-type]
    with pytest.raises(TesselConfigError, match="percentile"):
        QuantConfig(percentile=30.0)
    with pytest.raises(TesselConfigError, match="int16_inputs"):
        QuantConfig(int16_inputs=frozenset({"softmax"}))  # type: ignore[arg-type]
    with pytest.raises(TesselConfigError, match="calibration_data is empty"):
        quantize_pt2e_module(Two().eval(), (torch.randn(2, 8),), [])


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).reshape(1, 4, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(1, 4, 16))


def test_attention_is_decomposed_and_quantised_with_a_large_mask() -> None:
    torch.manual_seed(2)
    model = Attention().eval()
    mask = torch.tensor([0.0, 0.0, 0.0, -1e4]).reshape(1, 1, 1, 4)
    calib = [(torch.randn(1, 4, 16), mask) for _ in range(16)]
    q = quantize_pt2e_module(model, calib[0], calib)
    targets = [n.target for n in q.graph.nodes]
    assert aten.scaled_dot_product_attention.default not in targets
    assert targets.count(aten.matmul.default) == 2
    # the -1e4 mask does not eat the softmax input's int16 range (capped at max - 64)
    scale, zp, _, _, dtype = _qparams(_in_dq(_node(q, aten.softmax.int)))
    assert dtype == torch.int16 and zp == 0 and scale < 70.0 / 32767
    # unbind's pieces keep the parameters of the tensor they come from
    unbind = _node(q, aten.unbind.int)
    pieces = {tuple(_out_q(g).args[1:]) for g in unbind.users}
    assert pieces == {_qparams(unbind.args[0])}
    xs = [torch.randn(1, 4, 16) for _ in range(8)]
    with torch.no_grad():
        ref = torch.cat([model(x, mask) for x in xs])
        got = torch.cat([q(x, mask) for x in xs])
    sqnr = 10 * torch.log10(ref.pow(2).sum() / (ref - got).pow(2).sum())
    assert sqnr > 22.0, f"SQNR {sqnr:.1f} dB"  # all-int8 attention of a 16-wide toy model



class EagerMaskAttention(nn.Module):
    """Scores + an additive mask of ``low`` where masked: (1 - keep) * low (runtime, as Hugging
    Face's eager attention builds it with float32's minimum), or a constant causal mask."""

    def __init__(self, causal: bool, low: float) -> None:
        super().__init__()
        self.causal, self.low = causal, low
        self.qk = nn.Linear(8, 6)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        scores = self.qk(x)  # [1, 6 queries, 6 keys]
        if self.causal:
            mask = torch.triu(torch.full((6, 6), self.low), diagonal=1)
        else:
            mask = (1.0 - keep[:, None, :]) * self.low
        return torch.softmax(scores + mask, dim=-1)


@pytest.mark.parametrize("causal", [False, True], ids=["padding_mask", "causal_mask"])
def test_float_min_attention_mask_saturates_and_runs_bit_exact(causal: bool) -> None:
    # the mask's range is capped at max - 1e4 (a scale of 3.4e38 / 255 has no requantiser
    # multiplier that brings it to the softmax input's; (1 - keep) * 3.4e38 saturates): the
    # model quantises to the integers a -1e4 mask gives, and runs bit-exact
    import numpy as np

    import tessel
    from tessel.arch import load_preset
    from tessel.driver import compile_graph

    keep = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0, 0.0]])
    x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(9))
    outs, qms = [], []
    for low in (torch.finfo(torch.float32).min, -1.0e4):
        torch.manual_seed(0)
        model = EagerMaskAttention(causal, low).eval()
        calib = [(torch.randn(1, 6, 8), keep) for _ in range(4)]
        qm = tessel.quantize(model, calib[0], calib)
        outs.append(qm.run(x.numpy(), keep.numpy())[0])
        qms.append(qm)
    cm = compile_graph(qms[0].graph, load_preset("tnpu-xs"))
    got, = cm.run(x.numpy(), keep.numpy())
    np.testing.assert_array_equal(got, outs[0])
    np.testing.assert_array_equal(outs[0], outs[1])
    masked = np.triu(np.ones((6, 6), bool), 1) if causal else np.arange(6) >= 4
    assert np.all(got[..., masked] == 0.0)
    with torch.no_grad():
        ref = model(x, keep).numpy()
    assert np.abs(got - ref).max() < 0.1  # int8 scores of a toy layer on 4 samples
