"""The C engine's tests skip only where no C compiler exists: wherever one does, Tessel's C
sources must build, so a compile error in them fails here instead of turning every C-engine
test (test_c_runtime.py, test_c_npu_model.py, test_export_c.py, the C fuzz and the
4 GiB-arch reproducers, which skip when `cengine.available()` gives a reason) into a skip."""

from __future__ import annotations

import pytest

from tessel.errors import TesselConfigError
from tessel.runtime import cbuild, cengine


def test_c_sources_build_wherever_a_compiler_exists() -> None:
    try:
        cc = cbuild.compiler()
    except TesselConfigError as exc:
        pytest.skip(str(exc))  # no compiler on this machine: the one reason to skip C tests
    assert cengine.available() is None, f"with {cc}: {cengine.available()}"
