"""tessel.prune_2_4: the 2:4 mask along input channels, the layers it leaves dense, the
fine-tune keeping the zeros, SparseGPT's choice against magnitude's."""

import numpy as np
import pytest
import torch

import tessel
from tessel.errors import TesselConfigError
from tessel.prune import PruneMethod, is_2_4, mask_2_4


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)  # 3 input channels: dense
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dw(torch.relu(self.conv(torch.relu(self.stem(x)))))
        return self.fc(x.mean(dim=(2, 3)))


def test_mask_keeps_the_two_largest_of_each_group_of_input_channels() -> None:
    torch.manual_seed(0)
    w = torch.randn(5, 8, 3, 3)
    keep = mask_2_4(w).numpy()
    a = w.abs().numpy()
    for o in range(5):
        for ky in range(3):
            for kx in range(3):
                for g in range(2):
                    grp = a[o, 4 * g:4 * g + 4, ky, kx]
                    kept = set(np.flatnonzero(keep[o, 4 * g:4 * g + 4, ky, kx]))
                    assert kept == set(np.argsort(-grp, kind="stable")[:2])


def test_prune_report_and_exact_2_4() -> None:
    torch.manual_seed(0)
    net = _Net().eval()
    pruned, rep = tessel.prune_2_4(net)
    assert rep.pruned == ("conv", "fc")
    assert dict(rep.dense) == {"stem": "3 input channels per group (not a multiple of 4)",
                               "dw": "depthwise (one input channel per output)"}
    assert is_2_4(pruned.conv.weight.detach().numpy(), axis=1)
    assert is_2_4(pruned.fc.weight.detach().numpy(), axis=1)
    assert rep.zeroed == rep.weights // 2
    # the input is untouched; the dense layers are equal
    assert not is_2_4(net.conv.weight.detach().numpy(), axis=1)
    assert torch.equal(pruned.stem.weight, net.stem.weight)


def test_finetune_keeps_the_mask_and_lowers_the_loss() -> None:
    torch.manual_seed(0)
    net = _Net().eval()
    data = [torch.randn(2, 3, 8, 8) for _ in range(4)]
    pruned, rep = tessel.prune_2_4(net, finetune_data=data, steps=40, lr=0.05)
    assert rep.loss_after < rep.loss_before
    for name in rep.pruned:
        w = dict(pruned.named_modules())[name].weight.detach().numpy()
        assert is_2_4(w, axis=1)


def test_is_2_4() -> None:
    assert is_2_4(np.array([[1, 0, 0, 2, 0, 0, 0, 0]]), axis=1)
    assert not is_2_4(np.array([[1, 1, 0, 2, 0, 0, 0, 0]]), axis=1)
    assert not is_2_4(np.zeros((2, 6)), axis=1)
    with pytest.raises(np.exceptions.AxisError):
        is_2_4(np.zeros(4), axis=2)


def _correlated(n: int, d: int, mix: torch.Tensor) -> torch.Tensor:
    return torch.randn(n, d) @ mix


def _relative_error(pruned: torch.nn.Module, dense: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        ref = dense(x)
        return float((pruned(x) - ref).square().sum() / ref.square().sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparsegpt_linear_error_at_most_magnitude_on_correlated_inputs(seed: int) -> None:
    torch.manual_seed(seed)
    d = 64
    mix = torch.randn(d, d)  # correlated input channels: where compensation pays
    lin = torch.nn.Linear(d, 24).eval()
    calibration = [_correlated(64, d, mix) for _ in range(8)]
    held_out = _correlated(256, d, mix)
    errors = {}
    for method in PruneMethod:
        pruned, rep = tessel.prune_2_4(lin, method=method, calibration_data=calibration)
        assert is_2_4(pruned.weight.detach().numpy(), axis=1)
        assert mask_2_4(pruned.weight).sum() * 2 == pruned.weight.numel()  # exactly 2 of 4
        assert rep.zeroed == rep.weights // 2
        errors[method] = _relative_error(pruned, lin, held_out)
    assert errors[PruneMethod.SPARSEGPT] <= errors[PruneMethod.MAGNITUDE]


def test_sparsegpt_conv_exact_2_4_error_at_most_magnitude_and_deterministic() -> None:
    torch.manual_seed(0)
    mix = torch.randn(16, 16, 1, 1)

    def inputs(n: int) -> torch.Tensor:
        return torch.nn.functional.conv2d(torch.randn(n, 16, 9, 9), mix)

    conv = torch.nn.Conv2d(16, 8, 3, padding=1, stride=2).eval()
    calibration = [inputs(2) for _ in range(6)]
    held_out = inputs(8)
    magnitude, _ = tessel.prune_2_4(conv)
    pruned, rep = tessel.prune_2_4(conv, method=PruneMethod.SPARSEGPT,
                                   calibration_data=calibration)
    again, _ = tessel.prune_2_4(conv, method=PruneMethod.SPARSEGPT,
                                calibration_data=calibration)
    assert torch.equal(pruned.weight, again.weight)
    assert is_2_4(pruned.weight.detach().numpy(), axis=1)
    assert rep.zeroed == rep.weights // 2
    # the kept weights differ from the dense ones: they compensate the pruned
    assert not torch.equal(pruned.weight, conv.weight * (pruned.weight != 0))
    assert _relative_error(pruned, conv, held_out) <= _relative_error(magnitude, conv, held_out)


def test_sparsegpt_on_a_network_keeps_dense_layers_and_finetunes_with_the_mask() -> None:
    torch.manual_seed(0)
    net = _Net().eval()
    data = [torch.randn(2, 3, 8, 8) for _ in range(4)]
    pruned, rep = tessel.prune_2_4(net, method=PruneMethod.SPARSEGPT, calibration_data=data)
    assert rep.pruned == ("conv", "fc")
    assert torch.equal(pruned.stem.weight, net.stem.weight)
    assert torch.equal(pruned.dw.weight, net.dw.weight)
    pruned, rep = tessel.prune_2_4(net, method=PruneMethod.SPARSEGPT, calibration_data=data,
                                   finetune_data=data, steps=10, lr=0.05)
    for name in rep.pruned:
        assert is_2_4(dict(pruned.named_modules())[name].weight.detach().numpy(), axis=1)
    with pytest.raises(TesselConfigError):
        tessel.prune_2_4(net, method=PruneMethod.SPARSEGPT)
    with pytest.raises(TesselConfigError):
        tessel.prune_2_4(net, method=PruneMethod.SPARSEGPT, calibration_data=[])


def test_sparsegpt_leaves_a_layer_the_inputs_never_reach_to_magnitude() -> None:
    torch.manual_seed(0)
    net = _Net().eval()
    net.unused = torch.nn.Linear(8, 4)
    data = [torch.randn(2, 3, 8, 8) for _ in range(2)]
    pruned, rep = tessel.prune_2_4(net, method=PruneMethod.SPARSEGPT, calibration_data=data)
    assert "unused" in rep.pruned
    assert torch.equal(pruned.unused.weight, net.unused.weight * mask_2_4(net.unused.weight))
