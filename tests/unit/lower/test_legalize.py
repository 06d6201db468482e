"""Convs padded beyond the CONV / DWCONV 4-bit fields run on the NPU as pad + conv, bit-exact
with the golden model of the original graph (which keeps the padded conv); one refused for
another rule as well stays on the host, naming that rule."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import tessel
from tessel.ir import Op
from tessel.lower.legalize import legalize


class DilatedTCN(nn.Module):
    """Dilated conv1d padded by 24 and 16 (a TCN block): beyond the 4-bit padding field."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(8, 16, 3, dilation=12, padding=24)
        self.b = nn.Conv1d(16, 16, 3, dilation=8, padding=16, groups=16)  # depthwise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_overpadded_convs_become_pad_plus_conv_on_the_npu_bit_exact():
    torch.manual_seed(0)
    model = DilatedTCN().eval()
    calib = [(torch.randn(1, 8, 64),) for _ in range(4)]
    qm = tessel.quantize(model, calib[0], calibration_data=calib)
    convs = [n for n in qm.graph.nodes if n.op is Op.QCONV2D]
    assert max(max(n.attr("padding")[:2]) for n in convs) > 15
    legal = legalize(qm.graph)
    assert [n.op for n in legal.nodes if n.op in (Op.PAD, Op.QCONV2D)] == [
        Op.PAD, Op.QCONV2D, Op.PAD, Op.QCONV2D]
    assert all(n.attr("padding") == (0, 0, 0, 0) for n in legal.nodes if n.op is Op.QCONV2D)
    cm = tessel.compile(model, calib[0], calibration_data=calib)
    assert not cm.program.metadata.get("host_ops"), cm.program.metadata.get("host_ops")
    for (x,) in calib[:2] + [(5 * torch.randn(1, 8, 64),)]:
        for got, want in zip(cm.run(x), qm.run(x), strict=True):
            assert np.array_equal(got, want)


def test_graph_without_overpadded_convs_is_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)).eval()
    x = torch.randn(1, 3, 8, 8)
    qm = tessel.quantize(model, (x,), calibration_data=[(x,)])
    assert legalize(qm.graph) is qm.graph


def _strided_dw_graph(padding: tuple[int, int, int, int], stride: int):
    """A depthwise conv over a [1, 1, 60, 8] signal: 5 taps, stride (1, stride)."""
    from tessel.ir import DType, GraphBuilder, Layout, QuantParams, TensorType, verify

    b = GraphBuilder("dw")
    x = b.input("x", TensorType((1, 1, 60, 8), DType.I8, Layout.NHWC, QuantParams((0.05,), (0,))))
    w = np.arange(-20, 20, dtype=np.int8).reshape(8, 1, 5, 1)
    y = b.add(Op.QCONV2D, [x, b.constant(w, "w"), b.constant(np.zeros(8, np.int32), "bias"),
                           b.constant(np.full(8, 1 << 30, np.int32), "mult"),
                           b.constant(np.full(8, -4, np.int32), "shift")],
              dict(stride=(1, stride), padding=padding, dilation=(1, 1), groups=8,
                   layout=Layout.NHWC, in_zp=0, out_zp=0, act_min=-128, act_max=127,
                   dtype=DType.I8))
    return verify(b.build([y]))


def test_an_overpadded_conv_refused_for_its_stride_names_the_stride():
    """A depthwise conv with a stride past the field and padding past the field stays on the
    host (splitting the padding off would not help): its reason is the stride rule, not the
    padding the legaliser could split; padding alone still names the padding."""
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.ops.conv_geometry import refusal
    from tessel.quant.golden import run_golden

    g = _strided_dw_graph((0, 16, 0, 16), 17)
    cm = compile_graph(g, load_preset("tnpu-s"), name="dw")
    (reason,) = cm.program.metadata["host_ops"]
    assert "ordinary convs only" in reason and "padding 16" not in reason, reason
    x = np.random.default_rng(0).integers(-128, 128, (1, 1, 60, 8), np.int8)
    np.testing.assert_array_equal(cm.run(x)[0], run_golden(g, [x])[0])
    padded = _strided_dw_graph((0, 16, 0, 16), 1)
    (conv,) = [n for n in padded.nodes if n.op is Op.QCONV2D]
    assert "top / left padding 16" in refusal(conv, padded)


class OutputPaddedUpsampler(nn.Module):
    """A transposed conv whose output_padding adds a row and a column that read no input (only
    its bias): its stride phases are a 1x1 conv padded past its kernel at the bottom."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(5, 9, 3, stride=3, padding=1, output_padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


def test_conv_with_rows_of_padding_only_becomes_pad_plus_conv_bit_exact():
    # a row tile of such rows loaded no input row: DMA_LOAD.d2 = 0 failed to encode
    from tessel.arch import load_preset
    from tessel.driver import compile_graph

    torch.manual_seed(0)
    model = OutputPaddedUpsampler().eval()
    calib = [(torch.randn(1, 5, 12, 12),) for _ in range(3)]
    qm = tessel.quantize(model, calib[0], calibration_data=calib)
    for preset in ("tnpu-xs", "tnpu-s"):
        cm = compile_graph(qm.graph, load_preset(preset))
        for (x,) in calib[:2]:
            got, = cm.run(x.numpy())
            np.testing.assert_array_equal(got, qm.run(x.numpy())[0])
    legal = legalize(qm.graph)
    assert [n.op for n in legal.nodes if n.op in (Op.PAD, Op.QCONV2D)] == [Op.PAD, Op.QCONV2D]
