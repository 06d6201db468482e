"""The digits CNN: kept split, training time, accuracy, caching."""

from __future__ import annotations

import torch

from tessel.models import digits


def test_split_is_kept_and_stratified() -> None:
    x_train, y_train, x_test, y_test = digits.load_split()
    assert x_train.shape == (1347, 1, 8, 8) and x_test.shape == (450, 1, 8, 8)
    assert y_train.dtype == torch.int64 and set(y_test.tolist()) == set(range(10))
    assert 0.0 <= float(x_train.min()) and float(x_train.max()) <= 1.0
    x_train[0] = -1.0  # callers get copies: the cached split is unaffected
    assert float(digits.load_split()[0].min()) >= 0.0


def test_trains_fast_and_is_accurate() -> None:
    result = digits.train()
    model, inputs = digits.digits_cnn()
    accuracy = digits.test_accuracy(model)
    print(f"digits_cnn: trained {result.epochs} epochs in {result.seconds:.2f} s, "
          f"test accuracy {accuracy:.4f}")
    assert result.seconds < 30.0
    assert accuracy >= 0.95
    assert torch.equal(inputs[0], digits.load_split()[2][:1])


def test_factory_reuses_the_training_and_returns_independent_copies() -> None:
    digits.train()
    hits = digits.train.cache_info().hits
    a, _ = digits.digits_cnn()
    b, _ = digits.digits_cnn()
    assert digits.train.cache_info().hits >= hits + 2
    with torch.no_grad():
        a.fc.weight.zero_()
    assert not torch.equal(a.fc.weight, b.fc.weight)
    assert not torch.equal(digits.digits_cnn()[0].fc.weight, a.fc.weight)


def test_calibration_data_are_training_images() -> None:
    calib = digits.calibration_data(4)
    assert torch.equal(calib[2][0], digits.load_split()[0][2:3])
