"""Tessel: PyTorch models to binaries for the Tessel NPU, with a bit-exact simulator."""

from typing import TYPE_CHECKING

from tessel.errors import (
    TesselCompileError,
    TesselConfigError,
    TesselError,
    TesselFormatError,
    TesselParseError,
    TesselSimError,
    TesselUnsupportedOpError,
    TesselVerifyError,
)
from tessel.quiet import silence_known_warnings
from tessel.version import __version__

if TYPE_CHECKING:  # the lazy attributes below, with their real types for mypy and IDEs
    from tessel.analysis.advise import advise
    from tessel.analysis.compare import compare_binaries, compare_targets
    from tessel.analysis.estimate import estimate
    from tessel.analysis.explore import explore
    from tessel.analysis.layer_accuracy import layer_accuracy
    from tessel.analysis.precision import auto_weights
    from tessel.analysis.precision_advice import precision_advice
    from tessel.driver import compile
    from tessel.frontend.cut import cut
    from tessel.prune import prune_2_4
    from tessel.quant.api import quantize
    from tessel.runtime.compiled import CompiledModel, load
    from tessel.runtime.profile import Profile

silence_known_warnings()

_LAZY = {  # heavy entry points (torch) are imported on first use
    "compile": ("tessel.driver", "compile"),
    "quantize": ("tessel.quant.api", "quantize"),
    "cut": ("tessel.frontend.cut", "cut"),
    "load": ("tessel.runtime.compiled", "load"),
    "estimate": ("tessel.analysis.estimate", "estimate"),
    "explore": ("tessel.analysis.explore", "explore"),
    "advise": ("tessel.analysis.advise", "advise"),
    "compare_targets": ("tessel.analysis.compare", "compare_targets"),
    "compare_binaries": ("tessel.analysis.compare", "compare_binaries"),
    "layer_accuracy": ("tessel.analysis.layer_accuracy", "layer_accuracy"),
    "auto_weights": ("tessel.analysis.precision", "auto_weights"),
    "precision_advice": ("tessel.analysis.precision_advice", "precision_advice"),
    "prune_2_4": ("tessel.prune", "prune_2_4"),
    "CompiledModel": ("tessel.runtime.compiled", "CompiledModel"),
    "Profile": ("tessel.runtime.profile", "Profile"),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tessel' has no attribute {name!r}")

__all__ = [
    "CompiledModel",
    "Profile",
    "advise",
    "auto_weights",
    "compare_binaries",
    "compare_targets",
    "estimate",
    "explore",
    "compile",
    "cut",
    "layer_accuracy",
    "load",
    "precision_advice",
    "prune_2_4",
    "quantize",
    "TesselCompileError",
    "TesselConfigError",
    "TesselError",
    "TesselFormatError",
    "TesselParseError",
    "TesselSimError",
    "TesselUnsupportedOpError",
    "TesselVerifyError",
    "__version__",
]
