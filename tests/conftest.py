"""Suite-wide settings: one torch thread per xdist worker (two workers share two cores), a
fresh quantised-graph cache folder per test process."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


# The quantised-graph cache (tessel.quant.cache) of a test run lives in a fresh folder of its
# own, never in the user's ~/.cache: no test reuses a graph from an earlier run.
if "TESSEL_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["TESSEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessel-test-cache-")


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    """Tables fit $COLUMNS when it is set (tessel.display.output_width): no test inherits one
    (from the shell or a library); the tests of fitted output set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
