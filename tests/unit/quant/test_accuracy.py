"""Accuracy of the golden model against float: digits CNN (PTQ and QAT), all-MiniLM-L6-v2
embeddings, every zoo model quantising and running, and the `tessel accuracy` command."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tessel.analysis.accuracy import cosine, evaluate, sqnr_db
from tessel.cli.quant import register
from tessel.ir import Op
from tessel.quant.config import MINILM_CONFIG, default_config


def test_sqnr_and_cosine_definitions() -> None:
    ref = np.array([3.0, 4.0])
    assert sqnr_db(ref, ref) == math.inf
    assert sqnr_db(ref, ref + np.array([0.5, 0.0])) == pytest.approx(10 * math.log10(25 / 0.25))
    assert cosine(np.array([[1.0, 0.0]]), np.array([[1.0, 1.0]]))[0] == pytest.approx(0.5**0.5)


def test_digits_int8_accuracy_within_one_point_of_float() -> None:
    report = evaluate("digits_cnn", calibration=32)
    print(f"\ndigits CNN test accuracy: float {100 * report.float_accuracy:.2f}%, "
          f"int8 golden {100 * report.int_accuracy:.2f}% ({report.eval_samples} images)")
    assert report.eval_samples >= 400 and report.host_ops == ()
    assert report.float_accuracy >= 0.9
    assert abs(report.float_accuracy - report.int_accuracy) <= 0.01
    assert report.top1_agreement >= 0.97 and report.sqnr_db[0] > 20


@pytest.mark.slow
def test_digits_qat_converts_lowers_and_is_accurate() -> None:
    from tessel.models import digits
    from tessel.quant.api import prepare_quantize_qat, quantize_qat

    model, example = digits.digits_cnn()
    x_train, y_train, x_test, y_test = digits.load_split()
    prepared = prepare_quantize_qat(model, example)
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-3)
    for i in range(0, 640, 64):  # a few fake-quant steps (batch 1: the exported shape)
        for j in range(i, i + 2):
            loss = F.cross_entropy(prepared(x_train[j:j + 1]), y_train[j:j + 1])
            opt.zero_grad()
            loss.backward()
            opt.step()
    qm = quantize_qat(prepared, example, name="digits_qat")
    assert any(n.op is Op.QCONV2D for n in qm.graph.nodes) and qm.host_ops == ()
    preds = [int(qm.run(x_test[i:i + 1])[0].argmax()) for i in range(200)]
    acc = float(np.mean(np.array(preds) == y_test[:200].numpy()))
    print(f"\ndigits QAT int8 golden accuracy on 200 test images: {100 * acc:.1f}%")
    assert acc >= 0.9


@pytest.mark.slow
def test_minilm_golden_embeddings_cosine_at_least_098() -> None:
    assert default_config("minilm") is MINILM_CONFIG  # int16 residual adds
    report = evaluate("minilm", calibration=12)  # 52 held-out sentences
    print(f"\nMiniLM golden vs float cosine over {report.eval_samples} sentences: mean "
          f"{report.cosine_mean:.4f}, min {report.cosine_min:.4f}; host ops "
          f"{len(report.host_ops)}")
    assert report.eval_samples >= 50
    assert report.cosine_mean >= 0.98
    assert any("embedding" in h for h in report.host_ops)  # the gather stays on the host


# golden model vs float PyTorch on 2 held-out inputs after 8 calibration samples (the zoo's
# generator): measured 39.5 / 33.3 / 29.9 / 36.7 dB; each floor is about 7 dB below
MIN_GOLDEN_SQNR_DB = {"mobilenet_v2": 32.0, "resnet18": 26.0, "ds_cnn": 23.0, "vit_small": 29.0}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MIN_GOLDEN_SQNR_DB))
def test_zoo_model_quantises_and_runs_in_the_golden_model(name: str) -> None:
    report = evaluate(name, calibration=8, eval_samples=2)
    print(f"\n{name}: SQNR {report.sqnr_db[0]:.2f} dB, golden "
          f"{report.golden_seconds_per_inference:.2f} s/inference")
    assert report.host_ops == ()  # every op of these models is integer
    assert report.sqnr_db[0] >= MIN_GOLDEN_SQNR_DB[name]


def test_accuracy_command_prints_one_json_object(capsys) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["accuracy", "ds_cnn", "--calibration", "2", "--samples", "2",
                              "--json"])
    assert args.func(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "ds_cnn" and data["calibration_samples"] == 2
    assert data["eval_samples"] == 2 and len(data["sqnr_db"]) == 1
    assert 0.0 <= data["top1_agreement"] <= 1.0 and data["host_ops"] == []


USER_MODEL = '''
import torch
from torch import nn

def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval()
    return model, (torch.randn(1, 3, 12, 12),)
'''


def test_user_model_accuracy_is_out_of_sample_and_labelled(tmp_path) -> None:
    # a file.py:factory model calibrates on copies of its example input: evaluating on that
    # input again is in sample; the headline figure is on random inputs, stated in the report
    path = tmp_path / "net.py"
    path.write_text(USER_MODEL)
    report = evaluate(f"{path}:make", calibration=2, eval_samples=3)
    assert report.eval_samples == 3 and report.eval_inputs.startswith("random: N(mean, std)")
    assert len(report.in_sample_sqnr_db) == len(report.sqnr_db) == len(report.qdq_sqnr_db) == 1
    assert report.in_sample_sqnr_db[0] > report.sqnr_db[0]  # the example input was calibrated on
    text = report.text()
    assert "out of sample" in text and "in sample" in text and "random" in text


def test_accuracy_with_target_simulates_every_eval_input_batched() -> None:
    report = evaluate("ds_cnn", calibration=2, eval_samples=3, target="tnpu-s")
    assert report.simulated_target == "tnpu-s"
    assert report.simulated_bit_exact == report.eval_samples == 3
    assert report.simulated_seconds_per_inference > 0
    assert "3/3 evaluation inputs bit-exact" in report.text()
