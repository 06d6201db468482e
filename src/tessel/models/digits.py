"""A small CNN trained, in-process and seeded, on scikit-learn's digits data (8x8 images).

The data ships with scikit-learn (1797 grey 8x8 images of the digits 0-9, pixel values 0..16);
nothing is downloaded. Images are scaled to [0, 1] and used at 1x1x8x8. A stratified split
(25% test, seed 0) is kept: load_split() returns it and test_accuracy() measures a model on the
test part. Training (Adam, 15 epochs, batch 64, cosine learning rate) runs on one thread, which
is faster for such small batches and makes the weights independent of the machine's thread
count; it takes about 3 s. The trained weights are cached per process, so repeated factory
calls do not retrain.
"""

from __future__ import annotations

import copy
import functools
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tessel.models.weights import seeded

SEED = 10
TEST_FRACTION = 0.25
EPOCHS = 15
BATCH = 64


class DigitsCNN(nn.Module):
    """conv16-BN-ReLU, conv32-BN-ReLU, maxpool 2, conv32-BN-ReLU, flatten, linear 10."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


@dataclass(frozen=True)
class TrainResult:
    """The trained weights and how long training took."""

    state_dict: dict[str, torch.Tensor]
    seconds: float
    epochs: int


def load_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train [N,1,8,8] float32 in [0,1], y_train int64, x_test, y_test), stratified, seed 0."""
    return tuple(t.clone() for t in _split())  # type: ignore[return-value]


@functools.lru_cache(maxsize=1)
def _split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.int64)
    idx_train, idx_test = train_test_split(
        torch.arange(len(y)).numpy(), test_size=TEST_FRACTION, random_state=0,
        stratify=y.numpy(),
    )
    idx_train, idx_test = torch.from_numpy(idx_train), torch.from_numpy(idx_test)
    return x[idx_train], y[idx_train], x[idx_test], y[idx_test]


@functools.lru_cache(maxsize=1)
def train() -> TrainResult:
    """Train DigitsCNN from a fixed seed (cached: the first call trains, later calls reuse)."""
    x_train, y_train, _, _ = _split()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _fit(x_train, y_train)
    finally:
        torch.set_num_threads(threads)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return TrainResult(state, time.perf_counter() - start, EPOCHS)


def _fit(x_train: torch.Tensor, y_train: torch.Tensor) -> DigitsCNN:
    with seeded(SEED):
        model = DigitsCNN()
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS)
        model.train()
        for _ in range(EPOCHS):
            order = torch.randperm(len(y_train))
            for i in range(0, len(order), BATCH):
                batch = order[i : i + BATCH]
                loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
            sched.step()
    return model.eval()


@torch.no_grad()
def test_accuracy(model: nn.Module) -> float:
    """Top-1 accuracy of `model` (eval mode) on the held-out test split."""
    _, _, x_test, y_test = _split()
    return float((model(x_test).argmax(dim=1) == y_test).float().mean())


def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
    """The first n training images (cycling if n > training set), each ([1, 1, 8, 8],)."""
    x_train = _split()[0]
    return [(x_train[i % len(x_train)].unsqueeze(0),) for i in range(n)]


def digits_cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Zoo factory: (the trained CNN in eval mode, (the first test image [1, 1, 8, 8],))."""
    with seeded(SEED):  # construction draws random numbers; keep them off the caller's RNG
        model = DigitsCNN()
    model.load_state_dict(copy.deepcopy(train().state_dict))
    return model.eval(), example_inputs()


def example_inputs() -> tuple[torch.Tensor, ...]:
    """The factory's example inputs: (the first test image [1, 1, 8, 8],)."""
    return (_split()[2][:1].clone(),)
