"""Model-zoo test configuration: registers xdist_group so the tests also run without xdist."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): keep tests on one xdist worker")
