"""Fewer cyclic garbage collections while the compiler or simulator runs.

The schedule stage builds millions of small objects (tiles, instructions, queue ops) while
several hundred thousand long-lived ones are alive (the imported modules, the model, its
integer graph). With CPython's default thresholds a young collection runs every 700
allocations and a full one, which walks every live object, every ~70 000: on a MobileNetV2
compile that is about a third of the backend's time (measured: 2.1 s -> 1.4 s cold, 1.5 s
-> 1.3 s warm; docs/backend.md "Compile cost").

`few_collections()` freezes the objects alive on entry (`gc.freeze`: the collector no longer
walks them; nothing is freed or moved) and raises the young generation's threshold; on exit
both are put back and the frozen objects are collected as usual again. Garbage made inside
is still collected (less often), so memory stays bounded; results cannot change (the
collector only frees unreachable cycles). Nested uses, and uses from other threads while one
is active, do nothing more; if the caller froze objects itself (`gc.get_freeze_count()`),
they are left frozen and only the threshold changes.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)

_lock = threading.Lock()
_depth = 0
_saved: tuple[tuple[int, int, int], bool] | None = None  # thresholds, whether we froze


@contextlib.contextmanager
def few_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Run the block with the collector tuned as the module docstring says."""
    global _depth, _saved
    with _lock:
        _depth += 1
        if _depth == 1:
            thresholds = gc.get_threshold()
            froze = gc.isenabled() and gc.get_freeze_count() == 0
            if froze:
                gc.freeze()
            gc.set_threshold(max(young, thresholds[0]), *thresholds[1:])
            _saved = (thresholds, froze)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                thresholds, froze = _saved
                gc.set_threshold(*thresholds)
                if froze:
                    gc.unfreeze()
                _saved = None
