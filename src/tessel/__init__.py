"""Tessel: PyTorch models to binaries for the Tessel NPU, with a bit-exact simulator."""

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

__version__ = "0.1.0"

_LAZY = {  # heavy entry points (torch) are imported on first use
    "compile": ("tessel.driver", "compile"),
    "quantize": ("tessel.quant.api", "quantize"),
    "load": ("tessel.runtime.compiled", "load"),
    "estimate": ("tessel.analysis.estimate", "estimate"),
    "explore": ("tessel.analysis.explore", "explore"),
    "advise": ("tessel.analysis.advise", "advise"),
    "CompiledModel": ("tessel.runtime.compiled", "CompiledModel"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tessel' has no attribute {name!r}")

__all__ = [
    "CompiledModel",
    "advise",
    "estimate",
    "explore",
    "compile",
    "load",
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
