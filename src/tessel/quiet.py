"""Third-party noise. Known messages are silenced when ``tessel`` is imported: each filter
names one message of one library (never a blanket filter), so any other warning still shows
to a library user. The CLI goes further (``third_party_messages``): while a command runs,
warnings raised by other packages' code and their loggers' warnings are hidden unless ``-v``
(Tessel's own warnings always show).

* torchao logs ``Failed to load .../torchao/_C_mxfp8...so`` (and ``_C_cutlass_90a``) on a CPU
  build: optional CUDA kernels that the CPU-only wheel cannot load; Tessel never uses them.
* torch logs that torchao's ``KernelPreference`` enum needs no pytree ``register_constant``.
* torch's FutureWarning that ``isinstance(treespec, LeafSpec)`` is deprecated, raised by
  torch.export internals while pickling pytree specs, not by Tessel code.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


class _DropMessages(logging.Filter):
    """Drops a log record whose text contains every one of ``fragments``."""

    def __init__(self, *fragments: str) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return not all(f in text for f in self.fragments)


TORCHAO_CUDA_LIBS = _DropMessages("Failed to load", "torchao/_C")
TORCH_PYTREE_ENUM = _DropMessages("is an Enum subclass and is now natively supported")


def silence_known_warnings() -> None:
    """Install the filters (idempotent)."""
    torchao = logging.getLogger("torchao")
    if TORCHAO_CUDA_LIBS not in torchao.filters:
        torchao.addFilter(TORCHAO_CUDA_LIBS)
    pytree = logging.getLogger("torch.utils._pytree")
    if TORCH_PYTREE_ENUM not in pytree.filters:
        pytree.addFilter(TORCH_PYTREE_ENUM)
    warnings.filterwarnings("ignore", category=FutureWarning,
                            message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")


# the libraries whose loggers the CLI quiets (their errors still show)
THIRD_PARTY_LOGGERS = ("torch", "torchao", "numba", "onnx", "onnxruntime", "tflite",
                       "matplotlib", "optuna", "ray", "PIL", "sklearn", "scipy")


@contextmanager
def third_party_messages(shown: bool) -> Iterator[None]:
    """Unless ``shown``: warnings raised from outside the ``tessel`` package are ignored and
    the loggers of THIRD_PARTY_LOGGERS only pass errors, for the duration of the block
    (restored after)."""
    if shown:
        yield
        return
    loggers = [logging.getLogger(name) for name in THIRD_PARTY_LOGGERS]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", module=r"tessel(\.|$)")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.setLevel(level)
