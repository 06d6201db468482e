"""Fixtures shared by the simulator tests."""

from __future__ import annotations

import pytest

from tessel.sim import jit


@pytest.fixture(params=[False, True], ids=["numpy", "kernels"])
def kernels(request, monkeypatch) -> bool:
    """Both ways: the fast path's closures built with its compiled kernels off and on
    (``tessel.sim.jit``'s switch, read when a program's closures are built)."""
    monkeypatch.setenv(jit.ENV, "1" if request.param else "0")
    return request.param
