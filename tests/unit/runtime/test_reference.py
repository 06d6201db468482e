"""Reference outputs in a binary's metadata: exact round trip, malformed records rejected."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tessel.errors import TesselFormatError
from tessel.runtime.reference import reference_metadata, stored_reference


def test_reference_round_trip_is_exact_through_json():
    rng = np.random.default_rng(0)
    golden = [rng.integers(-128, 128, (1, 10), dtype=np.int8), np.arange(6, dtype=np.int32)]
    flt = [rng.standard_normal((2, 3)).astype(np.float32)]
    meta = json.loads(json.dumps({"reference": reference_metadata(golden, flt)}))
    stored = stored_reference(meta)
    got_golden, got_float = stored.golden, stored.float
    for a, b in zip(got_golden + got_float, golden + flt, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert stored_reference({}) is None


@pytest.mark.parametrize("bad", [
    {"inputs": "other", "golden": [], "float": []},
    {"inputs": "example", "golden": [{"dtype": "object", "shape": [1], "data": ""}], "float": []},
    {"inputs": "example", "golden": [{"dtype": "int8", "shape": [5], "data": "AAA="}],
     "float": []},
    {"inputs": "example", "golden": "x", "float": []},
])
def test_malformed_reference_is_a_format_error(bad):
    with pytest.raises(TesselFormatError, match="reference"):
        stored_reference({"reference": bad})
