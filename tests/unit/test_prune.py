"""tessel.prune_2_4: the 2:4 mask along input channels, the layers it leaves dense, the
fine-tune keeping the zeros."""

import numpy as np
import pytest
import torch

import tessel
from tessel.prune import is_2_4, mask_2_4


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
