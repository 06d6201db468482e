"""One thread for BLAS, OpenMP and torch while Tessel computes: reproducible and fast.

The simulator's float GEMMs are exact whatever the thread count, but on a shared machine a BLAS
that spreads every small tile over all cores is several times slower than one thread (10.8 s vs
1.3 s for `tessel run` of one model). Calibration is float: its observers' min / max depend on
the reduction order of the float kernels, which depends on the thread count, and so would the
binary. ``single_threaded()`` pins all of them to one thread for the duration and restores the
caller's settings afterwards; torch is only touched if the caller has already imported it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@cache
def _controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the body with one BLAS / OpenMP / torch intra-op thread."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None and before != 1:
        torch.set_num_threads(1)
    try:
        with _controller().limit(limits=1):
            yield
    finally:
        if torch is not None and before != 1:
            torch.set_num_threads(before)
