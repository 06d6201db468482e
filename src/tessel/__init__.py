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

__all__ = [
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
