"""tessel.models.load / resolve: zoo names, path/to/file.py:factory, and every error case."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from tessel.errors import TesselConfigError
from tessel.models import ZOO, Task, load, resolve

GOOD = """
import torch
from torch import nn

def make():
    torch.manual_seed(0)
    return nn.Linear(4, 2).eval(), (torch.ones(1, 4),)

def helper():
    return 1
"""


def _write(tmp_path: Path, body: str, name: str = "user_model.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_load_by_zoo_name() -> None:
    model, inputs = load("ds_cnn")
    assert not model.training
    assert tuple(model(*inputs).shape) == (1, 12)
    assert resolve("ds_cnn") is ZOO["ds_cnn"]


def test_load_by_path_and_factory(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    model, inputs = load(f"{path}:make")
    assert isinstance(model, nn.Linear)
    assert tuple(model(*inputs).shape) == (1, 2)
    spec = resolve(f"{path}:make")
    assert spec.task is Task.GENERIC and spec.name == f"{path}:make"
    calib = spec.calibration_data(2)  # no calibration(): the example input once, said so
    assert len(calib) == 1 and torch.equal(calib[0][0], inputs[0])
    assert "example input only (1 sample)" in spec.calibration_description


def test_factory_file_calibration_generator(tmp_path: Path) -> None:
    path = tmp_path / "cal.py"
    path.write_text(GOOD + "\ndef calibration():\n    for i in range(5):\n"
                    "        yield torch.full((1, 4), float(i))\n")
    spec = resolve(f"{path}:make")
    calib = spec.calibration_data(3)
    assert [float(c[0][0, 0]) for c in calib] == [0.0, 1.0, 2.0]
    assert "calibration()" in spec.calibration_description


def test_unknown_zoo_name_lists_the_known_models() -> None:
    with pytest.raises(TesselConfigError, match="unknown model 'resnet50'") as info:
        load("resnet50")
    for name in ZOO:
        assert name in str(info.value)


def test_file_without_factory_is_explained(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(TesselConfigError, match="path/to/file.py:factory"):
        load(str(path))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TesselConfigError, match="model file not found: .*nope.py"):
        load(f"{tmp_path / 'nope.py'}:make")


def test_missing_function_lists_the_functions_defined(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(TesselConfigError, match="has no function 'build'.*helper, make"):
        load(f"{path}:build")


def test_bad_function_name(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(TesselConfigError, match="not a function name"):
        load(f"{path}:not-a-name")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def make():\n    return 3\n", "returned a builtins.int"),
        ("import torch\ndef make():\n    return torch.nn.ReLU(), (torch.ones(1),), 1\n",
         "returned a tuple of length 3"),
        ("import torch\ndef make():\n    return 'model', (torch.ones(1),)\n",
         "returned a builtins.str as the model"),
        ("import torch\ndef make():\n    return torch.nn.ReLU(), torch.ones(1)\n",
         r"as example inputs \(wrap a single tensor as `\(x,\)`\)"),
        ("import torch\ndef make():\n    return torch.nn.ReLU(), [torch.ones(1)]\n",
         "returned a builtins.list as example inputs"),
        ("import torch\ndef make():\n    return torch.nn.ReLU(), (torch.ones(1), 2.0)\n",
         "returned a builtins.float as example input 1"),
        ("import torch\ndef make():\n    return torch.nn.ReLU(), ()\n",
         "empty tuple of example inputs"),
    ],
)
def test_factory_returning_the_wrong_thing(tmp_path: Path, body: str, message: str) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(TesselConfigError, match=message):
        load(f"{path}:make")


def test_file_that_fails_to_import(tmp_path: Path) -> None:
    path = _write(tmp_path, "import torch\nraise RuntimeError('boom')\n")
    with pytest.raises(TesselConfigError, match="importing .* failed: RuntimeError: boom"):
        load(f"{path}:make")


def test_factory_that_raises(tmp_path: Path) -> None:
    path = _write(tmp_path, "def make():\n    raise ValueError('no weights')\n")
    with pytest.raises(TesselConfigError, match=r"make\(\) raised ValueError: no weights"):
        load(f"{path}:make")


def test_empty_or_non_string_spec() -> None:
    with pytest.raises(TesselConfigError, match="zoo name or path/to/file.py:factory"):
        load("")
