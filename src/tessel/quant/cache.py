"""A cache of quantised integer graphs, so that `tessel estimate`, `tessel advise` and
`tessel explore` quantise a model once, not on every run.

The key is a hash of everything that determines the integer graph:

* Tessel's own sources (every ``.py`` file of the package: a changed quantiser or lowering never
  reuses an old graph, even at the same version number);
* the model: its name, the content of the file that defines it (zoo module, ``file.py``,
  ``.pt2``, ``.onnx``, ``.tflite``) and the bytes of its parameters and buffers (weights loaded
  from a checkpoint at run time are covered too);
* the example inputs' shapes and dtypes and every calibration sample's bytes;
* the quantisation config and the number of calibration samples.

What it does not see: the forward code of *other* modules a model file imports (edit one and
the cache is stale: clear it, or set ``TESSEL_CACHE_DIR=off``). Entries are Graph IR text
(``<key>.tir``), parsed and verified when read; an unreadable entry is recomputed. The folder is
``$TESSEL_CACHE_DIR`` (``off`` or empty disables caching), else ``~/.cache/tessel/graphs``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

CACHE_ENV = "TESSEL_CACHE_DIR"


def default_dir() -> Path | None:
    """The cache folder, or None when caching is off (``TESSEL_CACHE_DIR=off``)."""
    from tessel.fileio import cache_folder

    return cache_folder(CACHE_ENV, "graphs")


@lru_cache(maxsize=1)
def tessel_digest() -> str:
    """sha256 of every source file of the tessel package (path and bytes, sorted)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _tensor_bytes(h: Any, value: Any) -> None:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous().numpy()
    array = np.ascontiguousarray(value)
    h.update(f"{array.dtype.str}{array.shape}".encode())
    h.update(array.tobytes())


def graph_key(model_name: str, source_digest: str, model: Any, example_inputs: Sequence[Any],
              calibration: Sequence[Sequence[Any]] | None, config: Any, samples: int) -> str:
    """The cache key (hex) of a quantisation (see the module docstring for what it covers)."""
    from tessel.frontend.cut import cut_record

    h = hashlib.sha256()
    for part in (tessel_digest(), model_name, source_digest, repr(config), str(samples),
                 repr(cut_record(model))):
        h.update(part.encode())
        h.update(b"\0")
    state = model.state_dict() if hasattr(model, "state_dict") else {}
    for name in sorted(state):
        h.update(name.encode())
        _tensor_bytes(h, state[name])
    for x in example_inputs:
        h.update(f"{tuple(x.shape)}{x.dtype}".encode())
    for sample in calibration or ():
        for x in sample if isinstance(sample, tuple | list) else (sample,):
            _tensor_bytes(h, x)
    return h.hexdigest()


def cached_graph(model_name: str, model: Any, example_inputs: Sequence[Any],
                 calibration: Iterable[Sequence[Any]] | None, config: Any, samples: int,
                 directory: Path | None = None, *, use_default: bool = True) -> Any:
    """The quantised integer graph of `model` (a Graph), from the cache when its key is there,
    else quantised with `tessel.quantize` and stored. `directory` None: `default_dir()` when
    `use_default`, no caching otherwise."""
    from tessel.errors import TesselError
    from tessel.fileio import write_atomic
    from tessel.ir import parse_graph, print_graph, verify
    from tessel.models.digest import source_digest
    from tessel.quant.api import quantize

    folder = directory if directory is not None else (default_dir() if use_default else None)
    calib = None if calibration is None else list(calibration)[:samples]
    path = None
    if folder is not None:
        try:
            digest = source_digest(model_name)
        except TesselError:
            digest = ""  # no source file (e.g. a module built in memory): key on the weights
        key = graph_key(model_name, digest, model, example_inputs, calib, config, samples)
        path = folder / f"{key[:32]}.tir"
        if path.is_file():
            try:
                return verify(parse_graph(path.read_text(encoding="utf-8"), source=str(path)))
            except (OSError, UnicodeDecodeError, TesselError):
                pass  # a cut or stale entry: quantise again and overwrite it
    qm = quantize(model, tuple(example_inputs), calibration_data=calib, quant_config=config,
                  calibration_samples=samples)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, print_graph(qm.graph).encode("utf-8"))
        except (OSError, TesselError):
            pass  # an unwritable cache only costs time
    return qm.graph
