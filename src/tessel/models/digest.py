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
    """The file that defines `model`: a zoo model's module, the file of path/to/file.py:factory,
    or the model file itself (model.pt2 / .onnx / .tflite)."""
    from tessel.models.loader import MODEL_FILES
    from tessel.models.zoo import ZOO, resolve

    path_spec = split_path_spec(model)
    if path_spec is not None:
        return path_spec[0]
    if Path(model).suffix.lower() in (*MODEL_FILES, ".pt2"):
        return Path(model)
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


def source_record(model: str) -> dict[str, str]:
    """What a binary records about the model it was compiled from, independent of where the
    model lives: a zoo name as is; for path/to/file.py:factory the file's name relative to its
    folder (the model root) and the sha256 of its content."""
    path_spec = split_path_spec(model)
    if path_spec is None:
        return {"model": model}
    path, func = path_spec
    return {"model": f"{path.name}:{func}", "sha256": file_digest(path)}


def find_recorded(record: dict[str, str], search: list[Path], override: str | None = None
                  ) -> str:
    """The model spec to rebuild a recorded model: `override` if given (checked against the
    recorded hash), else the recorded file found in one of the `search` folders (the binary's
    folder, the working directory) with the recorded content. Raises TesselConfigError saying
    where it looked."""
    model = record.get("model")
    if not isinstance(model, str) or not model:
        raise TesselConfigError("the binary's metadata names no model (metadata.source.model)")
    want = record.get("sha256")
    path_spec = split_path_spec(model)
    if override is None and path_spec is None:
        return model  # a zoo name
    if override is not None:
        found = split_path_spec(override)
        if path_spec is not None and (found is None or found[1] != path_spec[1]):
            raise TesselConfigError(f"--model {override}: the binary was compiled from {model}")
        if want and found is not None and file_digest(found[0]) != want:
            raise TesselConfigError(f"{found[0]} is not the model this binary was compiled from "
                                    f"(its content differs; recorded sha256 {want[:12]}...)")
        return override
    assert path_spec is not None
    name, func = path_spec
    tried = []
    for folder in search:
        candidate = folder / name
        tried.append(str(candidate))
        if candidate.is_file() and (not want or file_digest(candidate) == want):
            return f"{candidate}:{func}"
    raise TesselConfigError(
        f"the binary was compiled from {model} (sha256 {str(want)[:12]}...) but no file with "
        f"that content is at {' or '.join(dict.fromkeys(tried))}; pass --model "
        f"path/to/{name}:{func}")
