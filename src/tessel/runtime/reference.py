"""Reference outputs stored in a binary, so `tessel run --check` needs no re-quantisation.

When the CLI compiles a named model (``metadata.source``), it runs the integer golden model and
float PyTorch once on the model's example inputs and stores both results under the metadata
key ``"reference"`` (a key of its own, next to the reader's typed fields)::

    "reference": {"inputs": "example",
                  "example_inputs": [... the inputs themselves, when at most 8 MiB ...],
                  "golden": [{"dtype": "int8", "shape": [1, 1000], "data": "<base64>"}, ...],
                  "float":  [... float32 outputs of the PyTorch model ...],
                  "low_range": ["out1", ...],  # outputs spanning < 4 quantisation steps
                  "float_of": "qdq"}  # absent: float PyTorch (tessel.runtime.check)

`run --check` on the example inputs compares the simulator with ``golden`` bit for bit and
reports SQNR against ``float``; with the inputs stored too, that needs neither the model's
source nor re-quantisation. With other inputs (``--input``) it re-quantises the model.
``float_of`` says what ``float`` is when it is not float PyTorch: ``"qdq"``, an imported
quantised graph run in float; ``"none"``, an integer model (``float`` is then empty).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessel.errors import TesselFormatError
from tessel.runtime.check import FloatReference

KEY = "reference"
MAX_INPUT_BYTES = 8 << 20  # example inputs larger than this are not stored
_DTYPES = {"int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"}


def encode(arrays: list[np.ndarray]) -> list[dict[str, Any]]:
    """JSON-safe little-endian encodings of ``arrays``."""
    out = []
    for a in arrays:
        a = np.ascontiguousarray(a)
        out.append({"dtype": a.dtype.name, "shape": list(a.shape),
                    "data": base64.b64encode(a.astype(a.dtype.newbyteorder("<")).tobytes())
                    .decode("ascii")})
    return out


def decode(items: Any) -> list[np.ndarray]:
    """Arrays from ``encode``'s records; a malformed record raises TesselFormatError."""
    if not isinstance(items, list):
        raise TesselFormatError(f"metadata '{KEY}': expected a list of tensors")
    out = []
    for i, item in enumerate(items):
        try:
            dt = item["dtype"]
            if dt not in _DTYPES:
                raise ValueError(f"dtype {dt!r}")
            shape = tuple(int(n) for n in item["shape"])
            raw = base64.b64decode(item["data"], validate=True)
            out.append(np.frombuffer(raw, np.dtype(dt).newbyteorder("<")).reshape(shape))
        except (KeyError, TypeError, ValueError) as exc:
            raise TesselFormatError(f"metadata '{KEY}' tensor {i} is malformed: {exc}") from None
    return out


@dataclass(frozen=True)
class StoredReference:
    golden: list[np.ndarray]  # the integer golden model's outputs on the example inputs
    float: list[np.ndarray]  # the float reference's outputs on the same inputs (`float_of`)
    low_range: tuple[str, ...]  # outputs spanning fewer than a few quantisation steps
    inputs: list[np.ndarray] | None = None  # the example inputs (None: not stored)
    float_of: FloatReference = FloatReference.PYTORCH


def reference_metadata(golden: list[np.ndarray], float_out: list[np.ndarray],
                       low_range: list[str] | tuple[str, ...] = (),
                       inputs: list[np.ndarray] | None = None,
                       float_of: FloatReference = FloatReference.PYTORCH) -> dict[str, Any]:
    """The ``"reference"`` metadata value for outputs computed on the example inputs (and the
    inputs themselves, when given and at most MAX_INPUT_BYTES)."""
    out: dict[str, Any] = {"inputs": "example", "golden": encode(golden),
                           "float": encode(float_out), "low_range": list(low_range)}
    if float_of is not FloatReference.PYTORCH:  # (PyTorch models' binaries: no key)
        out["float_of"] = float_of.value
    if inputs is not None and sum(np.asarray(x).nbytes for x in inputs) <= MAX_INPUT_BYTES:
        out["example_inputs"] = encode(list(inputs))
    return out


def stored_reference(metadata: dict[str, Any]) -> StoredReference | None:
    """The reference outputs on the example inputs, or None if the binary has none."""
    ref = metadata.get(KEY)
    if ref is None:
        return None
    if not isinstance(ref, dict) or ref.get("inputs") != "example":
        raise TesselFormatError(f"metadata '{KEY}' must be an object with inputs 'example'")
    low = ref.get("low_range", [])
    if not isinstance(low, list) or not all(isinstance(n, str) for n in low):
        raise TesselFormatError(f"metadata '{KEY}': 'low_range' must be a list of output names")
    inputs = decode(ref["example_inputs"]) if "example_inputs" in ref else None
    try:
        float_of = FloatReference(ref.get("float_of", FloatReference.PYTORCH.value))
    except ValueError:
        raise TesselFormatError(f"metadata '{KEY}': 'float_of' must be one of "
                                f"{[f.value for f in FloatReference]}") from None
    return StoredReference(decode(ref.get("golden")), decode(ref.get("float")), tuple(low),
                           inputs, float_of)
