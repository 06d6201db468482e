"""Fixtures of the report tests (the models are in analysis_nets)."""

from __future__ import annotations

import pytest
from analysis_nets import build

from tessel.runtime.compiled import CompiledModel


@pytest.fixture(scope="session")
def compiled() -> CompiledModel:
    return build()
