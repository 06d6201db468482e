"""What the zoo knows about a model: its factory, task, inputs and calibration data."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from tessel.errors import TesselConfigError

ModelAndInputs = tuple[nn.Module, tuple[torch.Tensor, ...]]
Factory = Callable[[], ModelAndInputs]
CalibrationFactory = Callable[[int], list[tuple[torch.Tensor, ...]]]


class Task(enum.Enum):
    """What a model's output means, which decides how accuracy is measured."""

    CLASSIFIER = "classifier"  # logits [N, classes]: top-1 agreement / accuracy
    EMBEDDING = "embedding"  # unit vectors [N, D]: cosine similarity
    DENSE = "dense"  # maps or values (segmentation, heat maps, depth, angles): output SQNR
    GENERIC = "generic"  # a user model of unknown kind: raw output error only


@dataclass(frozen=True)
class ModelSpec:
    """One zoo entry (or a user model given as path/to/file.py:factory)."""

    name: str
    factory: Factory
    description: str
    task: Task
    input_description: str
    calibration_data: CalibrationFactory
    # held-out inputs for `tessel accuracy`, distinct from calibration (None: the accuracy
    # path draws its own, stated in the report)
    evaluation_data: CalibrationFactory | None = None
    # what calibration_data returns, said to the user when it is a stand-in for real data
    calibration_description: str = ""
    # the factory's example inputs without building the model (None: the factory's)
    example: Callable[[], tuple[torch.Tensor, ...]] | None = None

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The factory's example inputs (`tessel run` without --input), made without building
        the model where the spec knows how (a zoo model's weights take seconds to make)."""
        return self.example() if self.example is not None else self.factory()[1]


def check_model_and_inputs(result: object, where: str) -> ModelAndInputs:
    """Check a factory returned (nn.Module, tuple of tensors); raise a clear error if not."""
    hint = "a factory must return (model: nn.Module, example_inputs: tuple[torch.Tensor, ...])"
    if not isinstance(result, tuple) or len(result) != 2:
        got = f"a tuple of length {len(result)}" if isinstance(result, tuple) else _kind(result)
        raise TesselConfigError(f"{where} returned {got}; {hint}")
    model, inputs = result
    if not isinstance(model, nn.Module):
        raise TesselConfigError(f"{where} returned {_kind(model)} as the model; {hint}")
    if not isinstance(inputs, tuple):
        extra = " (wrap a single tensor as `(x,)`)" if isinstance(inputs, torch.Tensor) else ""
        raise TesselConfigError(
            f"{where} returned {_kind(inputs)} as example inputs{extra}; {hint}"
        )
    if not inputs:
        raise TesselConfigError(f"{where} returned an empty tuple of example inputs; {hint}")
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise TesselConfigError(
                f"{where} returned {_kind(x)} as example input {i}; {hint}"
            )
    return model, inputs


def _kind(obj: object) -> str:
    return f"a {type(obj).__module__}.{type(obj).__qualname__}"
