"""Messages and progress: stdlib ``logging`` under the ``tessel`` logger, and progress bars for
the long loops (calibration, mapping search, advise relaxations, exploration, accuracy).

Library calls are silent unless the application asks: the CLI and ``make demo`` call
``configure(verbosity)`` (``-q`` -1: warnings only, 0: progress, ``-v`` 1: debug). Then a
long loop shows a rich progress bar on a terminal, or, when stderr is not a terminal (CI,
pipes, files), one plain line per 2 s and a closing line for a step that took over 2 s.
Only one bar is live at a time: a loop inside another (the mapping search inside each advise
relaxation) only advances the outer bar.

Inside ``watching(what)`` (the CLI's commands, the demo) nothing is silent for long: when no
line has been written for SILENCE_S and no bar is live, a watchdog thread writes one saying
what is running and for how long (the last message, or the loop and its count), on a
terminal or not.

    with task("mapping search", total=len(nodes)) as bar:
        for node in nodes: ...; bar.advance()
    for sample in track(data, "calibration", total=n): ...
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

LOGGER = logging.getLogger("tessel")
PLAIN_EVERY_S = 2.0  # plain-text progress: a line at most this often, a closing line if longer
T = TypeVar("T")

SILENCE_S = 1.2  # inside watching(): a line when nothing was written for this long
_state: dict[str, Any] = {"enabled": False, "active": False, "handler": None}
# what the watchdog reports: the time of the last line, the current activity and its start,
# the plain-text loop running (its count), whether a rich bar is live
_watch: dict[str, Any] = {"last": 0.0, "doing": "", "since": 0.0, "plain": None, "bar": False}


class _Noted(logging.Filter):
    """Notes the time of every line written (and, for a message, what is running now)."""

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.perf_counter()
        _watch["last"] = now
        if not getattr(record, "heartbeat", False) and not getattr(record, "loop", False):
            _watch["doing"], _watch["since"] = _activity(record.getMessage()), now
        return True


def _activity(message: str) -> str:
    return message[:-4] if message.endswith(" ...") else message


def configure(verbosity: int = 0, stream: Any = None) -> None:
    """Send the ``tessel`` logger to ``stream`` (stderr) at a level from ``verbosity`` and
    enable progress (verbosity >= 0)."""
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 \
        else logging.DEBUG
    old = _state["handler"]
    if old is not None:
        LOGGER.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    handler.addFilter(_Noted())
    LOGGER.addHandler(handler)
    LOGGER.setLevel(level)
    LOGGER.propagate = False
    _state.update(enabled=verbosity >= 0, handler=handler)


def info(msg: str) -> None:
    """A progress message (shown by the CLI unless -q)."""
    LOGGER.info(msg)


class _Null:
    def advance(self, n: int = 1) -> None:
        pass

    def set_total(self, total: int) -> None:
        pass


class _Plain:
    """Plain lines: '<step>: i/total' at most every PLAIN_EVERY_S, and a closing line."""

    def __init__(self, description: str, total: int | None) -> None:
        self.description, self.total, self.done = description, total, 0
        self.t0 = self.last = time.perf_counter()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= PLAIN_EVERY_S:
            self.last = now
            LOGGER.info(self.line(now), extra={"loop": True})

    def line(self, now: float) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.description}: {self.done}{of} ({now - self.t0:.0f} s)"

    def set_total(self, total: int) -> None:
        self.total = total

    def close(self) -> None:
        took = time.perf_counter() - self.t0
        if took >= PLAIN_EVERY_S:
            LOGGER.info(f"{self.description}: done, {self.done} in {took:.1f} s")


class _Bar:
    def __init__(self, description: str, total: int | None, stream: Any) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(file=stream), transient=False)
        self.progress.start()
        self.id = self.progress.add_task(description, total=total)

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.id, n)

    def set_total(self, total: int) -> None:
        self.progress.update(self.id, total=total)

    def close(self) -> None:
        self.progress.stop()


@contextmanager
def task(description: str, total: int | None = None) -> Iterator[Any]:
    """A progress bar (or plain lines) for one loop; ``.advance(n)`` per item."""
    if not _state["enabled"] or _state["active"] or not LOGGER.isEnabledFor(logging.INFO):
        yield _Null()
        return
    handler = _state["handler"]
    stream = getattr(handler, "stream", sys.stderr)
    bar: _Plain | _Bar = _Bar(description, total, stream) if _isatty(stream) \
        else _Plain(description, total)
    _state["active"] = True
    _watch.update(plain=bar if isinstance(bar, _Plain) else None, bar=isinstance(bar, _Bar))
    try:
        yield bar
    finally:
        _state["active"] = False
        _watch.update(plain=None, bar=False, last=time.perf_counter())
        bar.close()


@contextmanager
def step(description: str) -> Iterator[None]:
    """A step without a loop to count (an export, a simulation): a line when it starts (inside
    ``watching`` the watchdog then says it is still running), and its time at the end when it
    took over PLAIN_EVERY_S."""
    if not _state["enabled"] or not LOGGER.isEnabledFor(logging.INFO):
        yield
        return
    LOGGER.info(f"{description} ...")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - t0
        if took >= PLAIN_EVERY_S:
            LOGGER.info(f"{description}: done in {took:.1f} s")


@contextmanager
def watching(what: str) -> Iterator[None]:
    """Run the body with the watchdog on: whenever SILENCE_S pass without a line (and no bar
    is live), one line says what is running (``what`` until the first message) and for how
    long. A no-op unless progress is enabled (``configure``) at INFO level."""
    if not _state["enabled"] or not LOGGER.isEnabledFor(logging.INFO):
        yield
        return
    import threading

    now = time.perf_counter()
    _watch.update(last=now, doing=what, since=now)
    stop = threading.Event()
    thread = threading.Thread(target=_watchdog, args=(stop,), daemon=True,
                              name="tessel-progress-watchdog")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _watchdog(stop: Any) -> None:
    while not stop.wait(0.1):
        now = time.perf_counter()
        if _watch["bar"] or now - _watch["last"] < SILENCE_S:
            continue
        plain = _watch["plain"]
        text = plain.line(now) if plain is not None else \
            f"{_watch['doing']} (still running, {now - _watch['since']:.0f} s)"
        LOGGER.info(text, extra={"heartbeat": True})


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """``items``, advancing a progress bar (total: ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with task(description, total) as bar:
        for item in items:
            yield item
            bar.advance()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
