"""The float Graph IR's kernels (numpy; the oracle for everything after it): the table the
interpreter runs, filled by the op definitions (tessel.ops), and the helpers kernels share.

Each kernel takes the node's attributes (defaults filled in) and numpy operands and returns one
numpy array. Sliding-window ops work in NHWC; NCHW callers are transposed around them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tessel.ir.ops import Op, load_definitions
from tessel.ir.types import Layout

Kernel = Callable[[Mapping[str, Any], list[np.ndarray]], np.ndarray]
KERNELS: dict[Op, Kernel] = {}  # filled by the op definitions (tessel.ops.base.register)


def kernel_of(op: Op) -> Kernel | None:
    """The float kernel of `op` (None: the op has none, e.g. an integer op)."""
    if not KERNELS:
        load_definitions()
    return KERNELS.get(op)


def _special() -> Any:
    """scipy.special, imported on first use (its import is slow; the CLI starts without it)."""
    import scipy.special

    return scipy.special


def to_nhwc(x: np.ndarray, layout: Layout) -> np.ndarray:
    return x if layout is Layout.NHWC else x.transpose(0, 2, 3, 1)


def from_nhwc(x: np.ndarray, layout: Layout) -> np.ndarray:
    return x if layout is Layout.NHWC else x.transpose(0, 3, 1, 2)


def windows(x: np.ndarray, kernel_hw: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Strided view (N, OH, OW, C, KH, KW) of the (already padded) NHWC input."""
    kh, kw = kernel_hw
    dh, dw = dilation
    view = sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(1, 2))
    view = view[:, ::stride[0], ::stride[1], :, ::dh, ::dw]
    return view[:, :out_hw[0], :out_hw[1]]


def pad_hw(x: np.ndarray, padding: tuple[int, ...], value: float, extra: tuple[int, int] = (0, 0)
           ) -> np.ndarray:
    pt, pl, pb, pr = padding
    return np.pad(x, ((0, 0), (pt, pb + extra[0]), (pl, pr + extra[1]), (0, 0)),
                  constant_values=value)


# ---------------------------------------------------------------- special functions
def expit(x: np.ndarray) -> np.ndarray:
    """The logistic sigmoid (scipy's, imported on first use: scipy is slow to import)."""
    from scipy.special import expit as _expit
    return _expit(x)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function (scipy's, imported on first use)."""
    from scipy.special import erf as _erf
    return _erf(x)
