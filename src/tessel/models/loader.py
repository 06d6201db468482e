"""Load a model given as a zoo name, as `path/to/file.py:factory` (a user's own model), or as
a model file of another format (`model.onnx`, `model.tflite`; see `MODEL_FILES`)."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tessel.errors import TesselConfigError
from tessel.models.spec import ModelAndInputs, ModelSpec, Task, check_model_and_inputs


def split_path_spec(spec: str) -> tuple[Path, str] | None:
    """'dir/file.py:make' -> (Path('dir/file.py'), 'make'); None if `spec` is not of that form."""
    path, sep, func = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        return None
    if not func.isidentifier():
        raise TesselConfigError(
            f"model spec {spec!r}: {func!r} is not a function name "
            "(expected path/to/file.py:factory)"
        )
    return Path(path), func


def _import_file(path: Path, where: str):
    """Import `path` as a module (cached in sys.modules under a name derived from its path).
    Its folder goes first on sys.path, as for a script `python path` runs, so the file can
    import the modules beside it."""
    if not path.is_file():
        raise TesselConfigError(f"model file not found: {path} (from model spec {where!r})")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_name = "tessel_user_model_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TesselConfigError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise TesselConfigError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    return module


def load_factory_file(path: Path, func: str) -> ModelAndInputs:
    """Import `path` as a module, call its function `func` and check what it returned."""
    where = f"{path}:{func}"
    module = _import_file(path, where)
    module_name = module.__name__
    factory = getattr(module, func, None)
    if not callable(factory):
        found = sorted(n for n, v in vars(module).items()
                       if callable(v) and not n.startswith("_") and getattr(
                           v, "__module__", None) == module_name)
        raise TesselConfigError(
            f"{path} has no function {func!r}"
            + (f"; functions defined there: {', '.join(found)}" if found else "")
        )
    try:
        result = factory()
    except Exception as e:
        raise TesselConfigError(f"{where}() raised {type(e).__name__}: {e}") from e
    return check_model_and_inputs(result, f"{where}()")


EXAMPLE_ONLY = ("the model's example input only (1 sample): give --calibration-data "
                "DIR|file.npz, or define calibration() in the model file, for real data")
STAND_IN = ("the example input and seeded standard-normal stand-ins, not real data: give "
            "--calibration-data DIR|file.npz for real data")


def user_spec(path: Path, func: str) -> ModelSpec:
    """A ModelSpec for a user's factory. Calibration data: the samples the module's own
    `calibration()` generator yields (up to n), else the example inputs once (said so).
    Evaluation data (`tessel accuracy`'s held-out inputs): the module's `evaluation()`
    generator if it has one."""
    name = f"{path}:{func}"
    module = _import_file(path, name)
    source = getattr(module, "calibration", None)
    held_out = getattr(module, "evaluation", None)

    def factory() -> ModelAndInputs:
        return load_factory_file(path, func)

    def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
        if not callable(source):
            return [factory()[1]]
        return _samples(source, "calibration", name, path, n)

    def evaluation_data(n: int) -> list[tuple[torch.Tensor, ...]]:
        assert callable(held_out)
        return _samples(held_out, "evaluation", name, path, n)

    described = (f"{path}:calibration() (up to --calibration samples)" if callable(source)
                 else EXAMPLE_ONLY)
    return ModelSpec(name=name, factory=factory, description=f"user model from {name}",
                     task=Task.GENERIC, input_description="the factory's example inputs",
                     calibration_data=calibration_data, calibration_description=described,
                     evaluation_data=evaluation_data if callable(held_out) else None)


def _samples(generator: Any, what: str, name: str, path: Path, n: int
             ) -> list[tuple[torch.Tensor, ...]]:
    """The first ``n`` samples of a model file's ``calibration()`` / ``evaluation()``, each
    checked; whatever the generator raises becomes a TesselConfigError naming it."""
    try:
        return [check_sample(s, f"{name} {what}() sample {i}")
                for i, s in enumerate(itertools.islice(generator(), n))]
    except TesselConfigError:
        raise
    except Exception as e:
        raise TesselConfigError(f"{path}: {what}() raised {type(e).__name__}: {e}") from e


def _onnx_factory(path: Path, seed: int) -> ModelAndInputs:
    from tessel.frontend.onnx_import import onnx_module
    return onnx_module(path, seed=seed)


def _tflite_factory(path: Path, seed: int) -> ModelAndInputs:
    from tessel.frontend.tflite_import import tflite_module
    return tflite_module(path, seed=seed)


def _tosa_factory(path: Path, seed: int) -> ModelAndInputs:
    from tessel.frontend.tosa_import import tosa_module
    return tosa_module(path, seed=seed)


# file suffix -> (loader(path, seed) -> (module, example inputs), what it is)
MODEL_FILES: dict[str, tuple[Callable[[Path, int], ModelAndInputs], str]] = {
    ".onnx": (_onnx_factory, "ONNX model (float: quantised by Tessel; QDQ: its own scales)"),
    ".tflite": (_tflite_factory, "int8 TFLite model (its own scales)"),
    ".tosa": (_tosa_factory, "integer TOSA 1.0 graph (its own integer arithmetic)"),
}


def model_file_spec(spec: str) -> ModelSpec | None:
    """A ModelSpec for `model.onnx` / `model.tflite` / `model.tosa` (None for other strings). The example
    inputs are seeded random inputs in the model's input shapes, the calibration samples the
    example and then standard-normal samples (seed k); a QDQ ONNX or TFLite model is not
    calibrated. Give real data with `--calibration-data` or `tessel.compile(...,
    calibration_data=...)`. A saved ExportedProgram (`model.pt2`) is `exported_spec`."""
    path = Path(spec)
    if path.suffix.lower() == ".pt2":
        return exported_spec(path)
    if path.suffix.lower() not in MODEL_FILES:
        return None
    loader, what = MODEL_FILES[path.suffix.lower()]
    if not path.is_file():
        raise TesselConfigError(f"model file not found: {path}")

    def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
        _, example = loader(path, 0)
        return [example] + [tuple(torch.randn(x.shape, generator=torch.Generator().manual_seed(k))
                                  if x.is_floating_point() else x for x in example)
                            for k in range(1, n)]

    return ModelSpec(name=spec, factory=lambda: loader(path, 0), description=f"{what}: {path}",
                     task=Task.GENERIC, input_description="seeded random inputs of the model's "
                     "input shapes", calibration_data=calibration_data,
                     calibration_description=STAND_IN)


def check_sample(sample: object, where: str) -> tuple[torch.Tensor, ...]:
    """A calibration sample as a tuple of tensors (a lone tensor is one input)."""
    if isinstance(sample, torch.Tensor):
        return (sample,)
    if isinstance(sample, tuple | list) and sample and all(
            isinstance(x, torch.Tensor) for x in sample):
        return tuple(sample)
    raise TesselConfigError(f"{where} is a {type(sample).__name__}; yield a tensor or a tuple "
                            "of tensors per sample")


def exported_spec(path: Path) -> ModelSpec:
    """A ModelSpec for a saved ExportedProgram (`torch.export.save`): the model is the
    program's module, the example inputs those stored with it (else stand-ins of the shapes of
    its signature, standard normal, seed 0)."""
    from tessel.frontend.model_input import example_inputs_of

    def program() -> torch.export.ExportedProgram:
        from tessel.frontend.pt2 import load_pt2

        return load_pt2(path)  # weights-only: no code from the file runs

    def factory() -> ModelAndInputs:
        ep = program()
        return ep.module(), example_inputs_of(ep, None)

    def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
        return [factory()[1]]

    return ModelSpec(name=str(path), factory=factory, description=f"ExportedProgram {path}",
                     task=Task.GENERIC, input_description="the program's example inputs",
                     calibration_data=calibration_data, calibration_description=EXAMPLE_ONLY)
