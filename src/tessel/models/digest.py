"""Content hashes of model sources: what a binary records about the model it was compiled from
and what keys the design-space exploration's graph cache, so a moved or re-cloned model gives
the same result and an edited one never reuses a stale one."""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

from tessel.errors import TesselConfigError
from tessel.models.loader import split_path_spec


def source_file(model: str) -> Path:
    """The Python file that defines `model` (a zoo name or path/to/file.py:factory)."""
    from tessel.models.zoo import ZOO, resolve

    path_spec = split_path_spec(model)
    if path_spec is not None:
        return path_spec[0]
    spec = ZOO.get(model) or resolve(model)
    found = inspect.getsourcefile(spec.factory)
    if found is None:
        raise TesselConfigError(f"cannot find the source file of model {model!r}")
    return Path(found)


def file_digest(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise TesselConfigError(f"cannot read model file {path}: {exc.strerror or exc}") from None


def source_digest(model: str) -> str:
    """sha256 (hex) of the source file that defines `model`."""
    return file_digest(source_file(model))
