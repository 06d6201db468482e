"""The importers' error contract: what a model file may ask for, and how a malformed node is
reported.

Every importer (ONNX, TFLite, .pt2) raises only `tessel.errors` types. A value that a model
file sizes (a graph input, a folded constant such as ConstantOfShape's output, an example
input drawn for the model) is checked against `MAX_IMPORT_ELEMENTS` before it is allocated;
quantisation scales must be finite and > 0, dimensions >= 0. A converter that meets a node
whose inputs or attributes do not fit its op (a missing attribute, a list that is too short,
a value of the wrong kind) fails inside `node_boundary`, which reports the node, the op and
what was wrong as one TesselFormatError instead of the Python exception.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

import numpy as np

from tessel.errors import TesselError, TesselFormatError

MAX_IMPORT_ELEMENTS = 1 << 26  # elements of one tensor an imported file may make Tessel allocate


def check_elements(shape: Iterable[int], what: str) -> tuple[int, ...]:
    """`shape` as ints if every dim is >= 0 and the element count is within the bound;
    TesselFormatError naming `what` otherwise."""
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError, OverflowError):
        raise TesselFormatError(f"{what}: shape {shape!r} is not a list of integers") from None
    if any(d < 0 for d in dims):
        raise TesselFormatError(f"{what}: negative dimension in shape {list(dims)}")
    count = math.prod(dims)
    if count > MAX_IMPORT_ELEMENTS:
        raise TesselFormatError(
            f"{what}: shape {list(dims)} has {count} elements, more than the "
            f"{MAX_IMPORT_ELEMENTS} (2^{MAX_IMPORT_ELEMENTS.bit_length() - 1}) a tensor of an "
            "imported model may have")
    return dims


def check_scales(scales: Iterable[float], what: str) -> None:
    """TesselFormatError naming `what` unless every quantisation scale is finite and > 0."""
    values = np.asarray(list(scales), np.float64)
    bad = values[~(np.isfinite(values) & (values > 0))]
    if bad.size:
        raise TesselFormatError(f"{what}: quantisation scale {float(bad[0])} (scales must be "
                                "finite and > 0)")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc.args[0]!r}" if exc.args else "a missing key"
    if isinstance(exc, IndexError):
        return f"fewer inputs or values than the op needs ({exc})"
    if isinstance(exc, ZeroDivisionError):
        return f"a zero where the op divides ({exc})"
    if isinstance(exc, AttributeError):
        return f"a missing table or option ({exc})"
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def node_boundary(where: str, passthrough: tuple[type[BaseException], ...] = ()
                  ) -> Iterator[None]:
    """Within the block, a non-Tessel exception (other than `passthrough` types) becomes a
    TesselFormatError naming `where` (the node and its op) and what was wrong; a
    TesselFormatError of a check inside gets `where` in front."""
    try:
        yield
    except TesselFormatError as exc:  # a check inside the converter: add the node
        if str(exc).startswith(where):
            raise
        raise TesselFormatError(f"{where}: {exc}") from None
    except (TesselError, *passthrough):
        raise
    except RecursionError:
        raise TesselFormatError(f"{where}: nested too deeply to import") from None
    except MemoryError:
        raise TesselFormatError(f"{where}: needs more memory than is available") from None
    except Exception as exc:  # noqa: BLE001 - the contract: a bad file is a Tessel error
        raise TesselFormatError(f"{where}: malformed: {_describe(exc)}") from exc
