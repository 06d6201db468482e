"""Model inputs and calibration samples read from files (`--inputs`, `--calibration-data`).

* `--inputs x.npz` (or `x.npy`): one set of example inputs, the arrays in the order the model
  takes them (a .npz keeps the order they were saved in).
* `--calibration-data file.npz`: one calibration sample per array (a single-input model).
* `--calibration-data DIR`: one sample per file, in file-name order; a `.npy` file is the
  single input of a sample, a `.npz` file holds all inputs of one sample (model order).

Every array is checked against the model's example inputs (same rank and shape; it is cast to
the example's dtype), so a wrong file is a clear TesselConfigError naming it, not a traceback
deep inside the export.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tessel.errors import TesselConfigError

Sample = tuple[torch.Tensor, ...]


def _arrays(path: Path) -> list[tuple[str, np.ndarray]]:
    """(name, array) of a .npy or .npz file, in stored order."""
    if not path.is_file():
        raise TesselConfigError(f"data file not found: {path}")
    bad = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            return [(str(path), np.asarray(data))]
        with data:
            return [(f"{path}[{k}]", data[k]) for k in data.files]
    except bad as exc:
        raise TesselConfigError(f"{path}: not a readable .npy / .npz file ({exc})") from None


def _tensor(where: str, array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    if tuple(array.shape) != tuple(like.shape):
        raise TesselConfigError(f"{where}: shape {tuple(array.shape)}, but the model's input "
                                f"has shape {tuple(like.shape)}")
    if array.dtype.kind not in "biuf":
        raise TesselConfigError(f"{where}: dtype {array.dtype} is not numeric")
    return torch.from_numpy(np.ascontiguousarray(array)).to(like.dtype)


def _sample(named: Sequence[tuple[str, np.ndarray]], like: Sample, where: str) -> Sample:
    if len(named) != len(like):
        raise TesselConfigError(f"{where}: {len(named)} array(s), but the model takes "
                                f"{len(like)} input(s)")
    return tuple(_tensor(w, a, x) for (w, a), x in zip(named, like, strict=True))


def read_inputs(path: Path, like: Sample) -> Sample:
    """One set of model inputs from a .npy / .npz file, checked against `like`."""
    return _sample(_arrays(Path(path)), like, str(path))


def read_calibration(path: Path, like: Sample) -> list[Sample]:
    """Calibration samples from a .npz file (one sample per array, single-input models) or a
    directory (one sample per .npy / .npz file, in name order)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if not files:
            raise TesselConfigError(f"calibration directory {path} has no .npy / .npz files")
        return [_sample(_arrays(f), like, str(f)) for f in files]
    named = _arrays(path)
    if len(like) != 1:
        raise TesselConfigError(
            f"{path}: a calibration file holds one sample per array, which needs a single-input "
            f"model; this one takes {len(like)} inputs: give a directory of .npz files instead")
    if not named:
        raise TesselConfigError(f"{path}: no arrays (calibration needs at least one sample)")
    return [_sample([item], like, item[0]) for item in named]
