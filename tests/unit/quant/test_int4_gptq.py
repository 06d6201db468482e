"""GPTQ rounding of int4 weights (tessel.quant.int4_weights): on correlated layer inputs its
output error is below nearest rounding's at the same scale, every value is on the int4 grid,
the result is deterministic, and the quantiser's int4 weights are exactly the rounded values
(the observer's scale is the one the rounding used)."""

from __future__ import annotations

import pytest
import torch

import tessel
from tessel.quant.config import Int4Rounding, QuantConfig, WeightDtype
from tessel.quant.int4_weights import (
    ConvShape,
    Gram,
    choose_int4,
    gptq_int4,
    gptq_runs,
    input_rows,
    output_error,
)
from tessel.quant.qspecs import int4_clip


def _correlated(n: int, d: int, seed: int) -> torch.Tensor:
    """``n`` input rows of width ``d`` whose features are strongly correlated (a few factors)."""
    g = torch.Generator().manual_seed(seed)
    factors = torch.randn(n, 4, generator=g) @ torch.randn(4, d, generator=g)
    return factors + 0.2 * torch.randn(n, d, generator=g)


def _nearest(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    shape = [-1] + [1] * (w.dim() - 1)
    return torch.clamp(torch.round(w / scale.reshape(shape)), -7, 7)


def _amax_scale(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], -1).abs().amax(1) / 7


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_linear_output_error_is_below_nearest_rounding(seed):
    x = _correlated(512, 96, seed)
    w = torch.randn(24, 96, generator=torch.Generator().manual_seed(100 + seed))
    gram = Gram(96)
    gram.add(input_rows(x, None))
    scale = _amax_scale(w)
    q = gptq_int4(w, gram, scale)
    ours = float(((x @ (w - q * scale[:, None]).T) ** 2).sum())
    nearest = float(((x @ (w - _nearest(w, scale) * scale[:, None]).T) ** 2).sum())
    assert ours < 0.5 * nearest  # measured 0.03-0.05 of nearest's


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_conv_output_error_is_below_nearest_rounding(groups):
    g = torch.Generator().manual_seed(groups)
    def smooth() -> torch.Tensor:  # neighbouring taps correlated (a depthwise kernel's inputs)
        coarse = torch.randn(1, 2, 4, 4, generator=g)
        return torch.nn.functional.interpolate(coarse, size=(12, 12), mode="bilinear")

    x = torch.cat([smooth().repeat(1, 3, 1, 1) + 0.1 * torch.randn(1, 6, 12, 12, generator=g)
                   for _ in range(4)])  # 4 samples, channels and taps correlated
    w = torch.randn(12, 6 // groups, 3, 3, generator=g)
    conv = ConvShape((3, 3), (1, 1), (1, 1), (1, 1), groups)
    gram = Gram(w[0].numel())
    for sample in x:
        gram.add(input_rows(sample[None], conv))
    scale = _amax_scale(w)

    def error(values: torch.Tensor) -> float:
        e = w - values * scale[:, None, None, None]
        return float((torch.nn.functional.conv2d(x, e, padding=1, groups=groups) ** 2).sum())

    q = gptq_int4(w, gram, scale)
    assert error(q) < error(_nearest(w, scale))
    # output_error is the same quantity on the rows that entered H (here all of them)
    torch.testing.assert_close(float(output_error(w, q, scale, gram).sum()), error(q),
                               rtol=1e-3, atol=0)


def test_values_are_on_the_int4_grid_and_deterministic():
    x = _correlated(300, 40, 7)
    w = 3 * torch.randn(10, 40, generator=torch.Generator().manual_seed(8))
    w[4] = 0  # an all-zero channel
    gram = Gram(40)
    gram.add(input_rows(x, None))
    ranges, q = choose_int4(w, gram, int4_clip(w, 0))
    assert torch.equal(q, torch.round(q)) and int(q.abs().max()) <= 7
    assert bool((q[4] == 0).all())
    again = choose_int4(w.clone(), gram, int4_clip(w, 0))
    assert torch.equal(again[1], q) and torch.equal(again[0], ranges)


def test_pruned_weights_stay_zero():
    x = _correlated(300, 32, 5)
    w = torch.randn(6, 32, generator=torch.Generator().manual_seed(6))
    w.view(6, 8, 4)[:, :, :2] = 0  # 2:4: two of every four zero
    gram = Gram(32)
    gram.add(input_rows(x, None))
    _, q = choose_int4(w, gram, int4_clip(w, 0))
    assert bool((q[w == 0] == 0).all()) and bool((q[w != 0] != 0).any())


def test_the_chosen_ranges_never_lose_to_either_candidate():
    x = _correlated(400, 64, 3)
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(4))
    w[:, 5] *= 8  # outliers in one input: clipping them hurts the output
    gram = Gram(64)
    gram.add(input_rows(x, None))
    clip = int4_clip(w, 0)
    ranges, q = choose_int4(w, gram, clip)
    chosen = output_error(w, q, ranges / 7, gram)
    for r in (w.abs().amax(1), clip):
        other = output_error(w, gptq_int4(w, gram, r / 7), r / 7, gram)
        assert bool((chosen <= other * (1 + 1e-6)).all())


def test_a_block_split_wide_layer_still_beats_nearest(monkeypatch):
    import tessel.quant.int4_weights as iw

    monkeypatch.setattr(iw, "MAX_BLOCK", 32)  # H kept as 3 diagonal blocks
    x = _correlated(400, 90, 11)
    w = torch.randn(8, 90, generator=torch.Generator().manual_seed(12))
    gram = Gram(90)
    assert len(gram.blocks) == 3
    gram.add(input_rows(x, None))
    scale = _amax_scale(w)
    q = gptq_int4(w, gram, scale)
    nearest = _nearest(w, scale)
    assert float(output_error(w, q, scale, gram).sum()) < float(
        output_error(w, nearest, scale, gram).sum())


@pytest.mark.parametrize("conv", [
    ConvShape((3, 3), (1, 1), (1, 1), (1, 1), 2),
    ConvShape((7, 7), (2, 2), (3, 3), (1, 1), 1),
    ConvShape((3, 2), (2, 1), (2, 0), (2, 1), 4),
    ConvShape((5,), (2,), (1,), (1,), 1),
])
def test_patches_are_im2cols_columns_at_the_kept_positions_and_a_batch_is_its_samples(conv):
    import math

    from tessel.quant.int4_weights import ROWS_PER_SAMPLE

    g = torch.Generator().manual_seed(3)
    shape = (3, 8, 50) if len(conv.kernel) == 1 else (3, 8, 40, 37)
    x = torch.randn(*shape, generator=g)
    rows = []
    for k in range(3):  # im2col of one sample, every output position, then strided
        one = x[k:k + 1]
        kernel, stride, pad, dil = conv.kernel, conv.stride, conv.padding, conv.dilation
        if len(kernel) == 1:  # conv1d as a conv2d of height 1
            one = one.unsqueeze(-2)
            kernel, stride, pad, dil = (1, *kernel), (1, *stride), (0, *pad), (1, *dil)
        cols = torch.nn.functional.unfold(one, kernel, dil, pad, stride)[0].T  # [L, C * taps]
        cols = cols.reshape(cols.shape[0], conv.groups, -1).transpose(0, 1)
        rows.append(cols[:, ::max(1, math.ceil(cols.shape[1] / ROWS_PER_SAMPLE))])
        assert torch.equal(input_rows(x[k:k + 1], conv), rows[-1])
    assert torch.equal(input_rows(x, conv, samples=3), torch.cat(rows, 1))


def test_gptqs_own_error_is_the_output_error_it_chooses_by():
    x = _correlated(300, 50, 21)
    w = torch.randn(12, 50, generator=torch.Generator().manual_seed(22))
    w[:, 7] = 0  # a pruned input
    gram = Gram(50)
    gram.add(input_rows(x, None))
    scales = torch.stack([_amax_scale(w), int4_clip(w, 0) / 7])
    q, err = gptq_runs(w, gram, scales)
    for k in range(2):
        assert torch.equal(q[k], gptq_int4(w, gram, scales[k]))
        torch.testing.assert_close(err[k], output_error(w, q[k], scales[k], gram),
                                   rtol=1e-4, atol=1e-6 * float(err[k].max()))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _data(n: int) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(9)
    base = torch.randn(n, 1, 6, 6, generator=g)
    return [((base[k:k + 1].repeat(1, 4, 1, 1) + 0.3 * torch.randn(1, 4, 6, 6, generator=g)),)
            for k in range(n)]


def _sqnr(model, qm, data) -> float:
    ref = torch.cat([model(*s) for s in data]).detach().numpy()
    got = torch.cat([torch.from_numpy(qm.run(*s)[0]) for s in data]).numpy()
    return float(10 * torch.log10(torch.tensor((ref ** 2).sum() / ((ref - got) ** 2).sum())))


def test_the_quantiser_keeps_the_user_model_and_gptq_beats_nearest_on_held_out_data():
    model = _Net().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = _data(24)
    calibration, held_out = data[:16], data[16:]
    results = {}
    for rounding in Int4Rounding:
        config = QuantConfig(weights=WeightDtype.INT4, int4_rounding=rounding)
        qm = tessel.quantize(model, calibration[0], calibration, config)
        results[rounding] = _sqnr(model, qm, held_out)
        for node in qm.graph.nodes:
            if node.op.name in ("QCONV2D", "QLINEAR"):
                assert int(abs(qm.graph.constant_value(node.inputs[1])).max()) <= 7
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert results[Int4Rounding.GPTQ] > results[Int4Rounding.NEAREST]


def test_the_int8_path_has_no_rounding_pass():
    model = _Net().eval()
    data = _data(4)
    a = tessel.quantize(model, data[0], data, QuantConfig(int4_rounding=Int4Rounding.GPTQ))
    b = tessel.quantize(model, data[0], data, QuantConfig(int4_rounding=Int4Rounding.NEAREST))
    consts = [(na, nb) for na, nb in zip(a.graph.nodes, b.graph.nodes, strict=True)
              if na.is_constant]
    assert consts
    for na, nb in consts:
        assert (a.graph.constant_value(na.name) == b.graph.constant_value(nb.name)).all()


def test_the_sensitivity_analysis_rounds_like_the_quantiser():
    from tessel.analysis.precision import fake_int4, layer_grams

    model = _Net().eval()
    data = _data(8)
    qm = tessel.quantize(model, data[0], data, QuantConfig(weights=WeightDtype.INT4))
    grams = layer_grams(model, data)
    (fc,) = [n for n in qm.graph.nodes if n.op.name == "QLINEAR"]
    got = torch.from_numpy(qm.graph.constant_value(fc.inputs[1]).astype("float32"))
    w = model.fc.weight.detach()
    ranges, q = choose_int4(w, grams["fc"], int4_clip(w, 0))
    got = got if got.shape == q.shape else got.T  # the IR may hold [in, out]
    assert torch.equal(got, q)
    fake = fake_int4(w, 0, grams["fc"], Int4Rounding.GPTQ)
    torch.testing.assert_close(fake, q * (ranges / 7)[:, None], rtol=1e-6, atol=0)
