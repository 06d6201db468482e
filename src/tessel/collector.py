"""Fewer cyclic garbage collections while the compiler or simulator runs.

The schedule stage builds millions of small objects (tiles, instructions, queue ops) while
several hundred thousand long-lived ones are alive (the imported modules, the model, its
integer graph). With CPython's default thresholds a young collection runs every 700
allocations and a full one, which walks every live object, every ~70 000: on a MobileNetV2
compile that would be a large part of the backend's time (docs/backend.md, "Emit and
serialise cost").

`few_collections()` freezes the objects alive on entry (`gc.freeze`: the collector no longer
walks them; nothing is freed or moved) and raises the young generation's threshold; on exit
both are put back and the frozen objects are collected as usual again. Garbage made inside
is still collected (less often), so memory stays bounded; results cannot change (the
collector only frees unreachable cycles). Nested uses, and uses from other threads while one
is active, do nothing more; if the caller froze objects itself (`gc.get_freeze_count()`),
they are left frozen and only the threshold changes. That check counts the frozen objects one
by one (CPython keeps no count): a process that froze a large heap, or a worker forked from
one, pays a walk of it at every outermost use (each model of each design point explored), and
`no_collections` then leaves what it made young, so freezing the heap before forking
explore's workers makes them slower, not faster.

`no_collections()` turns the collector off for the block instead (on again on exit), for code
that makes no cyclic garbage, so that a collection could only walk live objects: the backend
(`driver.compile_graph`, the schedule stage, explore's design points). Reference counting
frees everything it drops; tests/unit/test_collector.py checks that compiling zoo models
leaves no cyclic garbage behind. Each young collection of a MobileNetV2 compile walked the
tiles, instructions and memos built since the last one, all still alive (about 2 % of the
compile's instructions, more of its time: the walk misses the caches). On exit the objects
made inside join the oldest generation (`gc.freeze()` then `gc.unfreeze()`, when the caller
froze nothing), as every object alive on entry does after `few_collections`: the next young
collection does not walk them (it would, once, if they stayed young), a full one still does,
and any cyclic garbage among them is still collected by it.
Both context managers share the nesting rule: inside either, the other does nothing more.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)

_lock = threading.Lock()
_depth = 0
# thresholds, whether we froze (on entry, or on exit: `no_collections`), whether we turned the
# collector off
_saved: tuple[tuple[int, int, int], bool, bool] | None = None


@contextlib.contextmanager
def few_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Run the block with the collector tuned as the module docstring says."""
    with _outermost(young):
        yield


@contextlib.contextmanager
def no_collections() -> Iterator[None]:
    """Run the block with the collector off (code that makes no cyclic garbage: the module
    docstring)."""
    with _outermost(None):
        yield


@contextlib.contextmanager
def _outermost(young: int | None) -> Iterator[None]:
    """The outermost use sets the collector up (`young`: the young threshold, or None for
    off) and puts it back on exit; nested uses do nothing more."""
    global _depth, _saved
    with _lock:
        _depth += 1
        if _depth == 1:
            thresholds, enabled = gc.get_threshold(), gc.isenabled()
            froze = enabled and gc.get_freeze_count() == 0
            if froze and young is not None:
                gc.freeze()
            if young is None:
                gc.disable()
            else:
                gc.set_threshold(max(young, thresholds[0]), *thresholds[1:])
            _saved = (thresholds, froze, young is None and enabled)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                thresholds, froze, disabled = _saved
                gc.set_threshold(*thresholds)
                if froze and disabled:  # what was made inside, old (the module docstring)
                    gc.freeze()
                if froze:
                    gc.unfreeze()
                if disabled:
                    gc.enable()
                _saved = None
