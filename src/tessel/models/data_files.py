"""Model inputs and calibration samples read from files (`--inputs`, `--calibration-data`).

* `--inputs x.npz` (or `x.npy`): one set of example inputs, the arrays in the order the model
  takes them (a .npz keeps the order they were saved in).
* `--calibration-data file.npz`: one calibration sample per array (a single-input model).
* `--calibration-data DIR`: one sample per file, in file-name order; a `.npy` file is the
  single input of a sample, a `.npz` file holds all inputs of one sample (model order).

Every array is checked against the model's example inputs (same rank and shape; it is cast to
the example's dtype), so a wrong file is a clear TesselConfigError naming it, not a traceback
deep inside the export. A file's arrays may hold at most `MAX_DATA_BYTES` (checked from the
.npy headers and the archive's directory before anything is read or inflated: a small .npz
can declare gigabytes), and the files of a calibration directory as many together.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tessel.errors import TesselConfigError

Sample = tuple[torch.Tensor, ...]
MAX_DATA_BYTES = 512 << 20  # the arrays of one --inputs file, or all --calibration-data


def declared_bytes(path: Path) -> int:
    """The bytes the arrays of a .npy / .npz file declare (their headers' shapes, and an
    archive member's inflated size), read without loading or inflating any array. A file
    whose headers cannot be read counts its size on disk (reading it then fails, naming it)."""
    bad = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, NotImplementedError)
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    try:
        if not zipfile.is_zipfile(path):
            with open(path, "rb") as f:
                return max(_header_bytes(f), size)
        total = 0
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                total += info.file_size
                if total > MAX_DATA_BYTES:
                    return total
                with z.open(info) as f:
                    total += max(_header_bytes(f) - info.file_size, 0)
        return total
    except bad:
        return size


def _header_bytes(f) -> int:
    fmt = np.lib.format
    version = fmt.read_magic(f)
    shape, _, dtype = (fmt.read_array_header_1_0(f) if version == (1, 0)
                       else fmt.read_array_header_2_0(f))
    count = 1
    for d in shape:
        count *= int(d)
    return count * dtype.itemsize


def check_size(path: Path, used: int = 0) -> int:
    """`used` plus the bytes `path` declares; TesselConfigError if past MAX_DATA_BYTES."""
    total = used + declared_bytes(path)
    if total > MAX_DATA_BYTES:
        raise TesselConfigError(
            f"{path}: its arrays declare {total} bytes{' with the files before it' if used else ''}"
            f", more than the {MAX_DATA_BYTES >> 20} MiB Tessel reads as data (refused before "
            "reading or inflating it)")
    return total


def _arrays(path: Path, used: int = 0) -> list[tuple[str, np.ndarray]]:
    """(name, array) of a .npy or .npz file, in stored order."""
    if not path.is_file():
        raise TesselConfigError(f"data file not found: {path}")
    bad = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)
    check_size(path, used)
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
        used, samples = 0, []
        for f in files:
            samples.append(_sample(_arrays(f, used), like, str(f)))
            used = declared_bytes(f) + used
        return samples
    named = _arrays(path)
    if len(like) != 1:
        raise TesselConfigError(
            f"{path}: a calibration file holds one sample per array, which needs a single-input "
            f"model; this one takes {len(like)} inputs: give a directory of .npz files instead")
    if not named:
        raise TesselConfigError(f"{path}: no arrays (calibration needs at least one sample)")
    return [_sample([item], like, item[0]) for item in named]
