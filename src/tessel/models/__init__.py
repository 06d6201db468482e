"""The Tessel model zoo: hand-written reference models, each built by a deterministic factory.

ZOO maps a name to a ModelSpec (factory, task, input description, calibration data);
load(name_or_spec) builds a zoo model or a user's model given as path/to/file.py:factory and
returns (model in eval mode, example inputs). Modules: mobilenet_v2, resnet, ds_cnn, vit,
minilm (pretrained all-MiniLM-L6-v2), digits (trained in-process on scikit-learn digits).
"""

from __future__ import annotations

from tessel.models.spec import ModelSpec, Task
from tessel.models.zoo import ZOO, load, resolve

__all__ = ["ZOO", "ModelSpec", "Task", "load", "resolve"]
